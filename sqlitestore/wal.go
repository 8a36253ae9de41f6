package sqlitestore

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ctoken/ctoken/sqlitestore/internal/walfile"
)

// A WAL deleted after a crash takes commits the database file lacks, so
// each Store keeps a hidden hard link to its WAL until Close checkpoints
// it whole. New judges a link that is not the WAL in place by the highest
// marker sequence in it: the database holds that WAL's last durable commit
// if its own sequence is not lower, wherever VACUUM put the marker.

// walLinkPrefix starts every WAL link name of table; a table name holds
// neither '-' nor '.', so no other file's name starts with it.
func walLinkPrefix(path, table string) string { return sidecarFile(path, table) + ".wal-" }

// linkTemp starts a link's name while it is made, which New never judges.
func linkTemp(path, table string) string { return sidecarFile(path, table) + ".tmp-wal-" }

// withPrefix lists the files whose path starts with prefix.
func withPrefix(prefix string) ([]string, error) {
	dir := filepath.Dir(prefix)
	entries, err := os.ReadDir(dir)
	var files []string
	for _, e := range entries {
		if f := filepath.Join(dir, e.Name()); strings.HasPrefix(f, prefix) {
			files = append(files, f)
		}
	}
	return files, err
}

// linkWAL makes link name the WAL file wal, atomically, unless it does.
func linkWAL(path, table, link string, wal os.FileInfo) error {
	if info, err := os.Stat(link); err == nil && os.SameFile(info, wal) {
		return nil
	}
	tmp := linkTemp(path, table) + newToken()
	if err := os.Link(path+"-wal", tmp); err != nil {
		return err
	}
	defer os.Remove(tmp)
	// Never link a WAL replaced since the caller's look.
	if info, err := os.Stat(tmp); err != nil || !os.SameFile(info, wal) {
		return errWALChanged
	}
	return os.Rename(tmp, link)
}

var errWALChanged = errors.New("the WAL file changed while it was linked")

// relinkWAL links the WAL the writer holds or, without one, the WAL in place.
func (s *Store) relinkWAL() {
	if !s.wal || s.guard.sticky.Load() {
		return
	}
	// The WAL in place: SQLite copies a WAL into the file before it deletes it.
	w, err := os.Stat(s.path + "-wal")
	if p := s.guard.wal.Load(); p != nil {
		w, err = *p, nil
	}
	if err != nil {
		return
	}
	if err := linkWAL(s.path, s.table, s.walLink, w); err != nil && !errors.Is(err, errWALChanged) {
		s.log.Warn("sqlitestore: linking the WAL failed: a WAL file deleted while no store runs would not be found", "path", s.walLink, "err", err)
	}
}

// judgeWALLinks removes each link the database (sequence seq, its file
// readable through db) is known to hold, and refuses with ErrForgotten at
// the first it may not: the link's last sequence is higher, or equal while
// some page of the link that holds store rows differs from what SQLite
// reads now (a checkpoint cut short copies the marker's low page before
// the claims' higher ones; a file rewritten after the WAL's deletion,
// VACUUM, differs too, which only an operator can tell apart). Stale
// temporary links are removed. Unless remove, it removes nothing.
func judgeWALLinks(path, table, inc string, seq int64, db io.ReaderAt, remove bool) error {
	links, err := withPrefix(walLinkPrefix(path, table))
	if err != nil {
		return fmt.Errorf("%w: listing the WALs kept beside %s: %w", ErrUnavailable, path, err)
	}
	cur, curErr := os.Stat(path + "-wal")
	for _, link := range links {
		info, err := os.Lstat(link)
		if err != nil {
			continue // removed meanwhile
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%w: %s is not a file the store made (not a regular file): remove it", ErrUnavailable, link)
		}
		if curErr == nil && os.SameFile(info, cur) {
			continue // the WAL in place: a running store's link
		}
		last, copied, err := lastSeq(link, path, inc, db)
		if err != nil {
			return fmt.Errorf("%w: reading the WAL kept at %s: %w", ErrUnavailable, link, err)
		}
		switch {
		case last > seq:
			return fmt.Errorf("%w: the WAL file %s-wal was deleted or replaced while no store ran, and it held commits the database no longer does (sequence %d, the database's %d; that WAL is kept at %s)", ErrForgotten, path, last, seq, link)
		case last == seq && last > 0 && !copied:
			return fmt.Errorf("%w: the WAL file %s-wal was deleted or replaced while no store ran, and the database file is not the copy of it a complete checkpoint leaves (a checkpoint cut short, or the file rewritten since: VACUUM, a restored copy; that WAL is kept at %s): if the WAL was not deleted (a checkpoint, then VACUUM), -fence 0 in the command at the end of this message is enough", ErrForgotten, path, link)
		}
		if !remove {
			continue
		}
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	if !remove {
		return nil
	}
	tmps, _ := withPrefix(linkTemp(path, table))
	for _, tmp := range tmps {
		if info, err := os.Lstat(tmp); err == nil && time.Since(info.ModTime()) > time.Minute {
			_ = os.Remove(tmp)
		}
	}
	return nil
}

// malformed refuses what a checkpoint cut short leaves once the WAL is deleted.
func malformed(err error, path, table string) error {
	if err == nil || errors.Is(err, ErrForgotten) || !strings.Contains(err.Error(), "malformed") {
		return err
	}
	path = cmp.Or(path, "NAME")
	return fmt.Errorf("%w: SQLite finds the database file malformed (%v): if its WAL was deleted after a crash, stop every program on the file and rename the WAL the store kept, %s*, to %s-wal; else restore a backup and re-arm it with the command at the end of this message", ErrForgotten, err, walLinkPrefix(path, table), path)
}

func removeWALLinks(path, table string) error {
	links, err := withPrefix(walLinkPrefix(path, table))
	for _, link := range links {
		if rerr := os.Remove(link); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = cmp.Or(err, rerr)
		}
	}
	return err
}

// lastSeq is the highest sequence of the marker of incarnation inc on the
// last committed image of any page of the WAL at link, and whether each
// such image that holds rows of a store's table (up to the last commit's
// size) is the page SQLite reads now: the last committed image in the WAL
// at path, if there is one, else the database file's page (db). Pages of
// other tables and indexes may differ: a program's writes after the crash
// change them.
func lastSeq(link, path, inc string, db io.ReaderAt) (seq int64, copied bool, err error) {
	// O_NONBLOCK: a FIFO put at the name never blocks the open.
	f, err := os.OpenFile(link, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	size, npages, last, err := walfile.Committed(f)
	if err != nil {
		return 0, false, err
	}
	var cur io.ReaderAt
	var curLast map[uint32]int64
	if w, err := os.OpenFile(path+"-wal", os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
		defer w.Close()
		if csize, _, l, err := walfile.Committed(w); err == nil && csize == size {
			cur, curLast = w, l
		}
	}
	copied = db != nil
	page, have := make([]byte, size), make([]byte, size)
	for pgno, off := range last {
		if _, err := f.ReadAt(page, off); err != nil && err != io.EOF {
			return 0, false, err
		}
		entries, err := walfile.IndexEntries(page, pgno, size)
		if err != nil {
			continue // not a page of an index b-tree
		}
		rows := false
		for _, e := range entries {
			cols, total, ok := walfile.Record(e)
			if !ok || total != 7 || len(cols) < 4 || !storeRow(cols) {
				continue
			}
			rows = true
			if len(cols) == 7 && isMarker(cols, inc) {
				seq = max(seq, cols[6].Int)
			}
		}
		if copied && rows && pgno <= npages {
			var n int
			if coff, ok := curLast[pgno]; ok {
				n, _ = cur.ReadAt(have, coff)
			} else {
				n, _ = db.ReadAt(have, int64(pgno-1)*int64(size))
			}
			copied = n == size && bytes.Equal(page, have)
		}
	}
	return seq, copied, nil
}

// storeRow reports whether a record's first columns are a store row's
// (Schema): a BLOB key, a one-letter state, a TEXT token, an INTEGER until.
func storeRow(cols []walfile.Value) bool {
	return !cols[0].Text && !cols[0].IsInt && !cols[0].Null && len(cols[0].Bytes) > 0 &&
		cols[1].Text && len(cols[1].Bytes) == 1 && strings.IndexByte("mclwd", cols[1].Bytes[0]) >= 0 &&
		cols[2].Text && cols[3].IsInt
}

// isMarker reports whether a record's columns are inc's marker row.
func isMarker(cols []walfile.Value, inc string) bool {
	return !cols[0].Text && string(cols[0].Bytes) == "\x00\x00" &&
		cols[1].Text && string(cols[1].Bytes) == "m" &&
		cols[2].Text && string(cols[2].Bytes) == inc && cols[6].IsInt
}
