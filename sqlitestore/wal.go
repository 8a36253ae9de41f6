package sqlitestore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/ctoken/ctoken/sqlitestore/internal/walfile"
)

// A WAL file deleted while no store runs takes with it the commits not yet
// copied into the database file: after a crash of the process, the last
// ones. The files cannot tell that from a WAL SQLite deleted itself after
// copying every commit (the last connection's close), so each Store keeps
// the WAL's content to look: a hard link of its own beside its sidecar
// (the sidecar's name plus ".wal-" and the Store's random id) to the WAL
// its writer holds. While the WAL is at its path a link costs no space.
// New judges every link of its table that is not the WAL at the path: it
// reads the linked WAL's committed frames and compares the last image of
// each page with what SQLite reads now (the WAL at the path over the
// database file). A page that differs is a commit the file does not hold,
// and New refuses with ErrForgotten, keeping the link; a link that loses
// nothing is removed.

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

// relinkWAL restores the Store's link to the WAL its writer holds when it
// is missing or names an older WAL, so a later loss of this store's
// commits is found. The writer calls it when it opens a connection, the
// checker at each check.
func (s *Store) relinkWAL() {
	w := s.guard.wal.Load()
	if w == nil || s.guard.sticky.Load() {
		return
	}
	if err := linkWAL(s.path, s.table, s.walLink, *w); err != nil && !errors.Is(err, errWALChanged) {
		s.log.Warn("sqlitestore: linking the WAL failed: a WAL file deleted while no store runs would not be found", "path", s.walLink, "err", err)
	}
}

// judgeWALLinks is New's look at the links of its table: each that names
// a file other than the WAL at the path is judged (walLost); one that
// loses nothing is removed, and the first that loses commits refuses with
// ErrForgotten. Temporary links older than a minute (a process died while
// it made one) are removed.
func judgeWALLinks(path, table string) error {
	links, err := walLinks(path, table)
	if err != nil {
		return err
	}
	cur, curErr := os.Stat(path + "-wal")
	for _, link := range links {
		info, err := os.Stat(link)
		if err != nil {
			continue // removed meanwhile by another process's New or Close
		}
		if curErr == nil && os.SameFile(info, cur) {
			continue // the WAL in place: a running store's link
		}
		pages, err := walLost(path, link)
		if err != nil {
			return fmt.Errorf("reading the WAL kept at %s: %w", link, err)
		}
		if pages > 0 {
			return fmt.Errorf("%w: the WAL file %s-wal was deleted or replaced while no store ran, and it held commits the database does not (%d pages; that WAL is kept at %s): run Rearm once you have decided", ErrForgotten, path, pages, link)
		}
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
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

// walLost reports how many pages the WAL file at link committed whose last
// image is not what SQLite reads now at path: the committed frames of the
// WAL at the path (when there is one) over the database file. A page past
// the database's size at the linked WAL's last commit is not counted
// (the commit freed it).
func walLost(path, link string) (pages int, err error) {
	old, err := os.Open(link)
	if err != nil {
		return 0, err
	}
	defer old.Close()
	size, npages, last, err := walfile.Committed(old)
	if err != nil || len(last) == 0 {
		return 0, err
	}
	db, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	// SQLite reads a page from the WAL at the path when it holds one.
	var cur *os.File
	var curLast map[uint32]int64
	if f, err := os.Open(path + "-wal"); err == nil {
		defer f.Close()
		if csize, _, l, err := walfile.Committed(f); err == nil && csize == size {
			cur, curLast = f, l
		}
	}
	want, have := make([]byte, size), make([]byte, size)
	for pgno, off := range last {
		if pgno > npages {
			continue
		}
		if _, err := old.ReadAt(want, off); err != nil {
			return 0, err
		}
		var n int
		if coff, ok := curLast[pgno]; ok {
			n, err = cur.ReadAt(have, coff)
		} else {
			n, err = db.ReadAt(have, int64(pgno-1)*int64(size))
		}
		if err != nil && err != io.EOF {
			return 0, err
		}
		if n < size || !bytes.Equal(want, have) {
			pages++
		}
	}
	return pages, nil
}
