package sqlitestore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ctoken/ctoken/sqlitestore/internal/walfile"
)

// A WAL file deleted while no store runs takes with it the commits not yet
// copied into the database file: after a crash of the process, the last
// ones. The files cannot tell that from a WAL SQLite deleted itself after
// copying every commit (the last connection's close), so the store keeps
// the WAL's content to look: a hard link beside its sidecar (the sidecar's
// name plus ".wal-link") to the WAL its writer holds. While the WAL is at its path the link costs no
// space. When New finds the path naming another file (or none), it reads
// the linked WAL's committed frames and compares the last image of each
// page with the database file: a page that differs is a commit the file
// does not hold, and New refuses with ErrForgotten.

// walLinkFile is the hard link a store of table keeps to the WAL of the
// database file path: one per table, so Rearm of one table lifts only its
// own refusal. No sidecar has its name: a table name holds neither '-'
// nor '.'.
func walLinkFile(path, table string) string { return sidecarFile(path, table) + ".wal-link" }

// linkWAL makes walLinkFile(path, table) name the WAL file wal (the
// store's writer holds it open, so SQLite cannot delete it meanwhile). A
// link already to it is left; another is replaced atomically.
func linkWAL(path, table string, wal os.FileInfo) error {
	link := walLinkFile(path, table)
	if info, err := os.Stat(link); err == nil && os.SameFile(info, wal) {
		return nil
	}
	tmp := link + "." + newToken() + ".tmp"
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

// relinkWAL restores the link to the WAL the store's writer holds when
// another store removed it (its Close, or Rearm), so that a later loss of
// this store's commits is found too. The checker calls it.
func (s *Store) relinkWAL() {
	w := s.guard.wal.Load()
	if w == nil || s.guard.sticky.Load() {
		return
	}
	if err := linkWAL(s.path, s.table, *w); err != nil && !errors.Is(err, errWALChanged) {
		s.log.Warn("sqlitestore: linking the WAL failed: a WAL file deleted while no store runs would not be found", "path", walLinkFile(s.path, s.table), "err", err)
	}
}

// walLost reports whether the WAL file linked at walLinkFile(path, table) holds
// commits the database file at path does not, when that WAL is no longer
// the database's: pages whose last committed image in it differs from the
// file's (or lies past its end). No link, or a link to the WAL in place,
// loses nothing.
func walLost(path, table string) (pages int, err error) {
	link := walLinkFile(path, table)
	linked, err := os.Stat(link)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if cur, err := os.Stat(path + "-wal"); err == nil && os.SameFile(cur, linked) {
		return 0, nil
	}
	wal, err := os.Open(link)
	if err != nil {
		return 0, err
	}
	defer wal.Close()
	size, last, err := walfile.Committed(wal)
	if err != nil || len(last) == 0 {
		return 0, err
	}
	db, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	want, have := make([]byte, size), make([]byte, size)
	for pgno, off := range last {
		if _, err := wal.ReadAt(want, off); err != nil {
			return 0, err
		}
		n, err := db.ReadAt(have, int64(pgno-1)*int64(size))
		if err != nil && err != io.EOF {
			return 0, err
		}
		if n < size || !bytes.Equal(want, have) {
			pages++
		}
	}
	return pages, nil
}

// walLossError is New's refusal when walLost found commits missing.
func walLossError(path, table string, pages int) error {
	return fmt.Errorf("%w: the WAL file %s-wal was deleted or replaced while no store ran, and it held commits the database file does not (%d pages; the WAL is kept at %s): run Rearm once you have decided", ErrForgotten, path, pages, walLinkFile(path, table))
}
