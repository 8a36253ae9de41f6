package keyfile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/internal/reason"
)

const (
	// DefaultInterval is how often a [Reloader] polls its
	// file when [Config.Interval] is 0.
	DefaultInterval = 10 * time.Second
	// MaxBytes caps the size of a key file a [Reloader] reads.
	MaxBytes = 64 << 10
)

// Config configures a [Reloader]. Source and Path are
// required.
type Config struct {
	// Source receives every new ring read from the file.
	Source *ctoken.KeySource
	// Path is the key file: one [ctoken.ParseKeyring] string (comma-separated
	// keys, primary first; surrounding white space is ignored). A file
	// written in place must be one line ending in a newline, as
	// `ctoken keygen > file` writes it: anything else may be a writer's
	// first bytes and is refused ([ErrIncomplete]). When Path is a
	// symbolic link it is followed on every read, and a file it newly
	// points to counts as published whole, with or without a newline: a
	// Kubernetes Secret volume's atomic ..data symlink swap is seen.
	Path string
	// Interval is how often [Reloader.Run] polls; 0 means
	// [DefaultInterval]; negative is [ctoken.ErrConfig].
	Interval time.Duration
	// OnError, if set, is called with every failure to read, parse or swap
	// in the file (the current ring is kept); it is called from the
	// goroutine that ran the check. Errors never contain key material.
	OnError func(error)
	// OnSwap, if set, is called after a new ring has taken effect, with the
	// number of keys it holds.
	OnSwap func(keys int)
}

// Reloader keeps a [ctoken.KeySource] in step with a key file. Each check
// reads the file through any symlinks and compares the SHA-256 of its
// content with the last one it swapped in; a change is parsed with
// [ctoken.ParseKeyring] and handed to [ctoken.KeySource.Swap]. A file that cannot be read
// or parsed, a file every user may write ([ErrWritable]),
// a file that may be caught mid-write ([ErrIncomplete], below),
// anything but a regular file ([ctoken.ErrConfig]), or a ring
// Swap refuses, leaves the current ring in effect and
// is reported to OnError (and returned by [Reloader.Reload]); the
// same bad content is reported once, not on every poll.
//
// Checks happen every Interval in [Reloader.Run], and whenever
// [Reloader.Reload] is called (from a SIGHUP handler, say). Reading
// the file on every check, rather than trusting its modification time or
// size, catches every change, including a symlink swap to a file with the
// same size and time stamp. A [Reloader] is safe for concurrent use.
//
// A file caught mid-write is never swapped in, however long its writer
// stalls: a file written in place counts as complete only when it is one
// line ending in a newline (the newline comes last, so no cut of a slower
// writer has it), and a file reached through Path's symbolic link counts
// as complete when the link resolves to another file than at the previous
// check (or at the first check): the writer published it by swapping the
// link, as the kubelet does. A file a crashed writer left truncated is
// refused at every check with [ErrIncomplete] (reported once) until
// it is rewritten; the ring in effect stays.
type Reloader struct {
	src      *ctoken.KeySource
	path     string
	interval time.Duration
	onError  func(error)
	onSwap   func(int)

	mu       sync.Mutex
	seen     bool              // a file has been read
	last     [sha256.Size]byte // SHA-256 of the content last read
	lastErr  error             // what that content gave
	target   string            // the file the last read reached through Path's symlink ("" when Path is no symlink)
	reported string            // text of the previous check's error
}

var (
	errReloaderSource   = reason.New(ctoken.ErrNoKey, "keyfile.Config.Source is nil or holds no ctoken.Keyring")
	errReloaderPath     = reason.New(ctoken.ErrConfig, "keyfile.Config.Path is empty")
	errReloaderInterval = reason.New(ctoken.ErrConfig, "keyfile.Config.Interval is negative (0 means DefaultInterval)")
	// ErrTooLarge reports a key file over [MaxBytes].
	ErrTooLarge = errors.New("ctoken: key file too large")
	// ErrIncomplete reports a key file that may be caught mid-write:
	// written in place (not published by a symlink swap) and not one line
	// ending in a newline, the terminator `ctoken keygen` writes. The ring
	// in effect is kept; see [Reloader].
	ErrIncomplete = errors.New("ctoken: key file is incomplete (no final newline)")
)

// NewReloader returns a reloader for cfg. It does not read the file:
// call [Reloader.Reload] to load it now (and see its error), then
// [Reloader.Run] to follow it.
func NewReloader(cfg Config) (*Reloader, error) {
	switch {
	case cfg.Source == nil || cfg.Source.Keyring() == nil:
		return nil, errReloaderSource
	case cfg.Path == "":
		return nil, errReloaderPath
	case cfg.Interval < 0:
		return nil, errReloaderInterval
	}
	r := &Reloader{src: cfg.Source, path: cfg.Path, interval: cfg.Interval, onError: cfg.OnError, onSwap: cfg.OnSwap}
	if r.interval == 0 {
		r.interval = DefaultInterval
	}
	return r, nil
}

// Reload checks the file now. It reports whether a new ring took effect; an
// error means the current ring was kept. OnError is told of an error unless
// the previous check failed with the same error (so a bad file is reported
// once, not on every poll). Content unchanged since the previous check is
// no swap, and the previous check's error if it had one.
func (r *Reloader) Reload() (bool, error) {
	r.mu.Lock()
	swapped, n, err := r.check()
	report := err != nil && (r.reported == "" || err.Error() != r.reported)
	r.reported = ""
	if err != nil {
		r.reported = err.Error()
	}
	r.mu.Unlock()
	if report && r.onError != nil {
		r.onError(err)
	}
	if swapped && r.onSwap != nil {
		r.onSwap(n)
	}
	return swapped, err
}

// check is Reload under r.mu.
func (r *Reloader) check() (bool, int, error) {
	text, target, err := readKeyFile(r.path)
	if err != nil {
		return false, 0, err
	}
	// A symlink that now points at another file was swapped: the content
	// was published whole (the kubelet's ..data swap, ln -sfn).
	published := target != "" && target != r.target
	r.target = target
	sum := sha256.Sum256(text)
	if r.seen && subtle.ConstantTimeCompare(sum[:], r.last[:]) == 1 {
		clear(text)
		return false, 0, r.lastErr
	}
	complete := published || terminated(text)
	kr, err := ctoken.ParseKeyring(string(text))
	clear(text)
	r.seen, r.last, r.lastErr = true, sum, nil
	if err == nil && !complete {
		err = errKeyFileIncomplete
	}
	if err == nil {
		err = r.src.Swap(kr)
	}
	if err != nil {
		r.lastErr = fmt.Errorf("ctoken: key file %s: %w", r.path, err)
		return false, 0, r.lastErr
	}
	return true, kr.Len(), nil
}

// errKeyFileIncomplete is the error for a key file written in place that is
// not one terminated line.
var errKeyFileIncomplete = fmt.Errorf("%w: a key file written in place must be one line ending in a newline, as `ctoken keygen > file` writes; a writer may still be writing it, so the keys in effect are kept (or publish the file by a symlink swap, as a Kubernetes Secret volume does)", ErrIncomplete)

// terminated reports whether text is one line ending in a newline (a
// "\r\n" too): the only content of a file written in place that no cut of
// a slower writer can produce, since the newline comes last and no line
// break comes before it.
func terminated(text []byte) bool {
	n := len(text)
	if n == 0 || text[n-1] != '\n' {
		return false
	}
	return bytes.IndexByte(text[:n-1], '\n') < 0
}

// readKeyFile reads path (following symlinks) up to MaxBytes,
// refusing a file every user may write ([ErrWritable]) and anything
// but a regular file ([ctoken.ErrConfig]). When path itself is a symbolic link,
// target is the file it resolves to (read through that name, so a swap
// during the read cannot mix two versions); otherwise target is "".
func readKeyFile(path string) (text []byte, target string, err error) {
	open := path
	if li, err := os.Lstat(path); err != nil {
		return nil, "", err
	} else if li.Mode()&fs.ModeSymlink != 0 {
		if target, err = filepath.EvalSymlinks(path); err != nil {
			return nil, "", err
		}
		open = target
	}
	// Stat before opening: opening a FIFO for reading blocks until a
	// writer comes, which would hang the check (and Reload) under r.mu.
	if fi, err := os.Stat(open); err != nil {
		return nil, "", err
	} else if !fi.Mode().IsRegular() {
		return nil, "", notRegularKeyFile(path, fi.Mode())
	}
	f, err := os.Open(open)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	// The checks that decide are made on the open file, not the path, so
	// a swap after the Stat above cannot slip another file past them.
	fi, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	if !fi.Mode().IsRegular() {
		return nil, "", notRegularKeyFile(path, fi.Mode())
	}
	if err := checkKeyFileMode(path, fi.Mode()); err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, "", err
	}
	if len(b) > MaxBytes {
		clear(b)
		return nil, "", fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, path, MaxBytes)
	}
	return b, target, nil
}

// Run checks the file at once and then every Interval until ctx is done,
// and returns ctx's error; no check starts after ctx is done. Errors go to OnError (see
// [Reloader.Reload]); Run does not stop on them. Run it in its own
// goroutine.
func (r *Reloader) Run(ctx context.Context) error {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		// A select with both cases ready picks either: check ctx first so
		// that no reload runs once it is done.
		if err := ctx.Err(); err != nil {
			return err
		}
		r.Reload()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
