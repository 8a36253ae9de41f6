package sqlitestore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ctoken/ctoken/sqlitestore/internal/walfile"
)

// A WAL file deleted while no store runs takes with it the commits not yet
// copied into the database file: after a crash of the process, the last
// ones. So each Store keeps a hard link of its own to the WAL its writer
// holds (the sidecar's name plus ".wal-" and the Store's random id: hidden
// like the sidecar, and no space while the WAL is in place), and Close
// removes it once a checkpoint copied the whole WAL into the database file.
// New judges every link that is not the WAL at the path by one number:
// every durable commit of a store advances the marker row's sequence
// (guard.step), so the highest sequence of the table's marker among the
// link's committed pages is the store's last commit in that WAL, and the
// database holds it if its own sequence is not lower. The judgement reads
// the marker wherever it lies, so VACUUM, a moved root, reused pages or
// another page_size change nothing.

// walLinkPrefix is the start of every WAL link name of table in the
// database file path. No sidecar, and no other table's link, begins with
// it: a table name holds neither '-' nor '.'.
func walLinkPrefix(path, table string) string { return sidecarFile(path, table) + ".wal-" }

// linkTemp is the start of a link's temporary name while it is made: not
// a link name, so a New that runs meanwhile never judges it.
func linkTemp(path, table string) string { return sidecarFile(path, table) + ".tmp-wal-" }

// walLinks lists the WAL links of table in the database file path.
func walLinks(path, table string) ([]string, error) {
	return filepath.Glob(globEscape(walLinkPrefix(path, table)) + "*")
}

// globEscape quotes the metacharacters of filepath.Match in s.
func globEscape(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(b)
}

// linkWAL makes link name the WAL file wal of the database file path
// (the store's writer holds it open, so SQLite cannot delete it
// meanwhile). A link already to it is left; another is replaced
// atomically.
func linkWAL(path, table, link string, wal os.FileInfo) error {
	if info, err := os.Stat(link); err == nil && os.SameFile(info, wal) {
		return nil
	}
	tmp := linkTemp(path, table) + newToken()
	if err := os.Link(path+"-wal", tmp); err != nil {
		return err
	}
	defer os.Remove(tmp)
	// The WAL could have been replaced between the caller's look and the
	// link: never link a file the writer does not hold.
	if info, err := os.Stat(tmp); err != nil || !os.SameFile(info, wal) {
		return errWALChanged
	}
	return os.Rename(tmp, link)
}

// errWALChanged is linkWAL's refusal to link a WAL other than the one
// the writer holds: the writer's connection closed meanwhile.
var errWALChanged = errors.New("the WAL file changed while it was linked")

// relinkWAL restores the Store's link to the WAL its writer holds (the WAL
// in place when it has no writer) when the link is missing or names an
// older WAL. New calls it, the writer when it opens a connection, and the
// checker at each check.
func (s *Store) relinkWAL() {
	if !s.wal || s.guard.sticky.Load() {
		return
	}
	var w os.FileInfo
	if p := s.guard.wal.Load(); p != nil {
		w = *p
	} else {
		// No writer connection (a store whose calls all run in its
		// callers' transactions, WithTx): link the WAL in place. Should
		// SQLite delete it, it copied it into the file first.
		info, err := os.Stat(s.path + "-wal")
		if err != nil {
			return
		}
		w = info
	}
	if err := linkWAL(s.path, s.table, s.walLink, w); err != nil && !errors.Is(err, errWALChanged) {
		s.log.Warn("sqlitestore: linking the WAL failed: a WAL file deleted while no store runs would not be found", "path", s.walLink, "err", err)
	}
}

// judgeWALLinks is New's look at the links of its table: each that names
// a file other than the WAL at the path is judged against the database's
// sequence seq (of incarnation inc); one the database holds is removed,
// and the first it does not refuses with ErrForgotten and stays.
// Temporary links older than a minute (a process died while it made one)
// are removed.
func judgeWALLinks(path, table, inc string, seq int64) error {
	links, err := walLinks(path, table)
	if err != nil {
		return fmt.Errorf("%w: listing the WALs kept beside %s: %w", ErrUnavailable, path, err)
	}
	cur, curErr := os.Stat(path + "-wal")
	for _, link := range links {
		info, err := os.Lstat(link)
		if err != nil {
			continue // removed meanwhile by another process's New or Close
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%w: %s is not a file the store made (not a regular file): remove it", ErrUnavailable, link)
		}
		if curErr == nil && os.SameFile(info, cur) {
			continue // the WAL in place: a running store's link
		}
		last, err := lastSeq(link, inc)
		if err != nil {
			return fmt.Errorf("%w: reading the WAL kept at %s: %w", ErrUnavailable, link, err)
		}
		if last > seq {
			return fmt.Errorf("%w: the WAL file %s-wal was deleted or replaced while no store ran, and it held commits the database no longer does (sequence %d, the database's %d; that WAL is kept at %s)"+rearmHint, ErrForgotten, path, last, seq, link)
		}
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	if tmps, err := filepath.Glob(globEscape(linkTemp(path, table)) + "*"); err == nil {
		for _, tmp := range tmps {
			if info, err := os.Lstat(tmp); err == nil && time.Since(info.ModTime()) > time.Minute {
				_ = os.Remove(tmp)
			}
		}
	}
	return nil
}

// removeWALLinks removes every WAL link of table (Rearm: the loss is
// decided).
func removeWALLinks(path, table string) error {
	links, err := walLinks(path, table)
	if err != nil {
		return err
	}
	for _, link := range links {
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// lastSeq is the highest sequence of the marker row of incarnation inc on
// the last committed image of any page of the WAL file at link: the last
// durable commit of a store that WAL holds. Pages are read whole; an
// entry is the marker when its columns are a store row's (Schema) with the
// marker's key and state and inc as its token.
func lastSeq(link, inc string) (int64, error) {
	// O_NONBLOCK: a FIFO put at the name after the Lstat never blocks the
	// open.
	f, err := os.OpenFile(link, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, _, last, err := walfile.Committed(f)
	if err != nil {
		return 0, err
	}
	var seq int64
	page := make([]byte, size)
	for pgno, off := range last {
		if _, err := f.ReadAt(page, off); err != nil && err != io.EOF {
			return 0, err
		}
		entries, _, err := walfile.IndexEntries(page, pgno, size)
		if err != nil {
			continue // not a page of an index b-tree
		}
		for _, e := range entries {
			cols, total, ok := walfile.Record(e)
			if ok && total == 7 && len(cols) == 7 && isMarker(cols, inc) {
				seq = max(seq, cols[6].Int)
			}
		}
	}
	return seq, nil
}

// isMarker reports whether a record's columns are the marker row of
// incarnation inc: key x'0000', state 'm', token inc, an integer seq.
func isMarker(cols []walfile.Value, inc string) bool {
	return !cols[0].Text && string(cols[0].Bytes) == "\x00\x00" &&
		cols[1].Text && string(cols[1].Bytes) == "m" &&
		cols[2].Text && string(cols[2].Bytes) == inc && cols[6].IsInt
}
