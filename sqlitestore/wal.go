package sqlitestore

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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
// a file other than the WAL at the path is judged (walLost, with present
// finding a key in the database now); one that loses nothing is removed,
// and the first that loses entries refuses with ErrForgotten. Temporary links older than a minute (a process died while
// it made one) are removed.
func judgeWALLinks(path, table string, now int64, present func(key []byte) (bool, error)) error {
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
		lost, err := walLost(path, link, now, present)
		if err != nil {
			return fmt.Errorf("reading the WAL kept at %s: %w", link, err)
		}
		if lost > 0 {
			return fmt.Errorf("%w: the WAL file %s-wal was deleted or replaced while no store ran, and it held %d acknowledged entries the database no longer does (that WAL is kept at %s): run Rearm once you have decided", ErrForgotten, path, lost, link)
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

// walLost reports how many acknowledged entries the WAL file at link held
// that the database at path no longer does. It compares the last
// committed image of each page in it with what SQLite reads now (the
// committed frames of the WAL at the path, when there is one, over the
// database file); a page past the database's size at the linked WAL's
// last commit is skipped (the commit freed it). On a page that differs,
// each entry that is a row of a store's table (the shape of [Schema]),
// not the marker and not expired at now (UnixNano), must be found by
// present, or it is lost; an entry of seven columns whose key lies past
// the page (an ID too long for it) counts as lost, and so does a page
// whose entries cannot be read.
// Pages of other kinds hold no store's row: the app's own pages may have
// changed since for any reason.
func walLost(path, link string, now int64, present func(key []byte) (bool, error)) (lost int, err error) {
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
	usable := size
	var hdr [100]byte
	if _, err := db.ReadAt(hdr[:], 0); err == nil {
		usable -= int(hdr[20]) // the reserved bytes at the end of each page
	}
	// SQLite reads a page from the WAL at the path when it holds one.
	var cur *os.File
	var curLast map[uint32]int64
	if f, err := os.Open(path + "-wal"); err == nil {
		defer f.Close()
		if csize, _, l, err := walfile.Committed(f); err == nil && csize == size {
			cur, curLast = f, l
		}
	}
	have := make([]byte, size)
	for pgno, off := range last {
		if pgno > npages {
			continue
		}
		want := make([]byte, size)
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
		if n == size && bytes.Equal(want, have) {
			continue
		}
		l, err := lostRows(want, pgno, usable, now, present)
		if err != nil {
			return 0, err
		}
		lost += l
	}
	return lost, nil
}

// lostRows is walLost's look at one page image that differs from the
// database's: the store rows on it that present does not find.
func lostRows(page []byte, pgno uint32, usable int, now int64, present func(key []byte) (bool, error)) (int, error) {
	entries, _, err := walfile.IndexEntries(page, pgno, usable)
	if err != nil {
		return 1, nil
	}
	lost := 0
	for _, e := range entries {
		cols, total, ok := walfile.Record(e)
		if !ok {
			return lost + 1, nil
		}
		if total != len(storeColumns) {
			continue
		}
		if len(cols) < 2 {
			// A key too long for the page: the entry cannot be told
			// from a store's row, nor looked up.
			lost++
			continue
		}
		if !storeRow(cols) {
			continue
		}
		if cols[1].Bytes[0] == 'm' {
			continue // the marker: the sequence's checks judge it
		}
		if len(cols) >= 4 && cols[3].IsInt && cols[3].Int <= now {
			continue // expired: a sweep may have removed it
		}
		found, err := present(cols[0].Bytes)
		if err != nil {
			return 0, err
		}
		if !found {
			lost++
		}
	}
	return lost, nil
}

// storeColumns are the columns of a store's table, in order ([Schema]).
var storeColumns = [...]string{"key", "state", "token", "until", "fingerprint", "result", "seq"}

// storeRow reports whether the columns read of a record of seven have the
// shape of a store's row: a BLOB key, then a state of one letter, and the
// rest, as far as read, of their types.
func storeRow(cols []walfile.Value) bool {
	if cols[0].Text || cols[0].IsInt || cols[0].Null || len(cols[0].Bytes) == 0 {
		return false
	}
	if !cols[1].Text || len(cols[1].Bytes) != 1 || !strings.ContainsRune("mclwd", rune(cols[1].Bytes[0])) {
		return false
	}
	if len(cols) > 2 && !cols[2].Text {
		return false
	}
	if len(cols) > 3 && !cols[3].IsInt {
		return false
	}
	return true
}

// presentIn returns walLost's look-up of a key on q: found in the store's
// table, or in another table of the file with a store's columns (tables
// share a file, and the linked WAL holds their rows too).
func (s *Store) presentIn(q querier) func(key []byte) (bool, error) {
	var tables []string
	return func(key []byte) (bool, error) {
		if tables == nil {
			tables = []string{s.table}
			var names sql.NullString
			if err := q.queryRow(`SELECT group_concat(m.name, ',') FROM main.sqlite_master m WHERE m.type = 'table' AND (SELECT group_concat(name, ',') FROM pragma_table_info(m.name)) = ?`, strings.Join(storeColumns[:], ",")).Scan(&names); err != nil {
				return false, err
			}
			for _, name := range strings.Split(names.String, ",") {
				// A name with ',' is no store's (tableName): split
				// apart, its parts match no table.
				if t := "main." + `"` + strings.ReplaceAll(name, `"`, `""`) + `"`; name != "" && t != s.table {
					tables = append(tables, t)
				}
			}
		}
		for _, t := range tables {
			var n int
			if err := q.queryRow(`SELECT count(*) FROM `+t+` WHERE key = ?`, key).Scan(&n); err != nil {
				return false, err
			}
			if n > 0 {
				return true, nil
			}
		}
		return false, nil
	}
}
