package keyfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/internal/reason"
)

// ErrWritable reports a key file that any user of the machine may
// write (its permission bits include o+w): whoever can write it can install
// a key they know and forge every token. A world-readable file is not
// refused; see [NewSource].
var ErrWritable = errors.New("ctoken: key file is writable by every user")

var (
	errKeyFileSource = reason.New(ctoken.ErrConfig, "keyfile.NewSource: Config.Source is set (NewSource makes the source)")
	errKeyFileCtx    = reason.New(ctoken.ErrConfig, "keyfile.NewSource: the context is nil")
)

// NewSource reads the key file cfg.Path (one [ctoken.ParseKeyring] string:
// comma-separated keys, primary first) into a new [ctoken.KeySource], and keeps
// the source in step with the file until ctx is done: a [Reloader]
// checks it every cfg.Interval (0 means [DefaultInterval]) in a
// goroutine that ends with ctx. Give the source to [ctoken.CursorConfig],
// [ctoken.RequestStateSecurity] or [ctoken.OneTimeConfig] as KeySource.
//
// The first read happens before NewSource returns and fails loudly:
// a missing or unreadable file, an empty or malformed one
// ([ctoken.ErrKeyInvalid]), a key under [ctoken.MinKeyBytes] ([ctoken.ErrKeyTooShort]), a file
// over [MaxBytes] ([ErrTooLarge]), writable by every user
// ([ErrWritable]), not a regular file (a directory,
// a FIFO, a device: [ctoken.ErrConfig]) or possibly caught mid-write (written in
// place and not one line ending in a newline: [ErrIncomplete]; see
// [Reloader]) is an error and no goroutine is started; there is
// never a random key to fall back on. Later, a change that fails the same
// checks keeps the current ring and is reported once to cfg.OnError; a
// good change takes effect for every call that starts after it and is
// reported to cfg.OnSwap (not called for the first read). cfg.Source must
// be nil and a nil ctx or a negative cfg.Interval is [ctoken.ErrConfig].
//
// Permissions: a file writable by every user is refused, at the first read
// and at every reload. The directory's mode is not checked. A world-readable
// file is accepted: a Kubernetes
// Secret volume's files are 0644 unless defaultMode says otherwise, and
// the volume is visible only inside the pod. Where other users share the
// machine, make the file 0400 or 0600 yourself. Permission bits are not
// checked on Windows.
//
// To also reload at once on a signal, or to stop the goroutine other than
// by ctx, use [NewReloader] instead.
func NewSource(ctx context.Context, cfg Config) (*ctoken.KeySource, error) {
	switch {
	case ctx == nil:
		return nil, errKeyFileCtx
	case cfg.Source != nil:
		return nil, errKeyFileSource
	case cfg.Path == "":
		return nil, errReloaderPath
	case cfg.Interval < 0:
		return nil, errReloaderInterval
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	src := new(ctoken.KeySource)
	r := &Reloader{src: src, path: cfg.Path, interval: cfg.Interval, onError: cfg.OnError, onSwap: cfg.OnSwap}
	r.mu.Lock()
	_, _, err := r.check()
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	go r.poll(ctx)
	return src, nil
}

// poll checks the file every interval until ctx is done. The first check
// is one interval after the file was read.
func (r *Reloader) poll(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// select picks at random when both are ready: after ctx is
			// done, no new check starts.
			if ctx.Err() != nil {
				return
			}
			r.Reload()
		}
	}
}

// notRegularKeyFile is the error for a key file that is a directory, a
// FIFO, a device or a socket.
func notRegularKeyFile(path string, mode fs.FileMode) error {
	return reason.Wrap(ctoken.ErrConfig, "the key file is not a regular file", fmt.Errorf("key file %s is not a regular file (mode %v)", path, mode))
}

// checkKeyFileMode refuses a key file every user may write.
func checkKeyFileMode(path string, mode fs.FileMode) error {
	if runtime.GOOS != "windows" && mode.Perm()&0o002 != 0 {
		return fmt.Errorf("%w: %s has mode %v (chmod o-w it; 0400 or 0600 is best)", ErrWritable, path, mode.Perm())
	}
	return nil
}
