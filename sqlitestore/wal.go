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
// its writer holds, or, with no writer, to the WAL in place. While the WAL
// is at its path a link costs no space. New judges every link of its
// table that is not the WAL at the path (walLost): it walks the table's
// b-tree through the snapshot the link holds and compares each row on the
// table's pages that changed with the table's row of its key now. A row
// missing or weaker is an entry lost, and New refuses with ErrForgotten,
// keeping the link; a link that loses nothing is removed.

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
// older WAL, so a later loss of this store's commits is found. New calls
// it, the writer when it opens a connection, and the checker at each
// check.
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
// a file other than the WAL at the path is judged (walLost, with current
// reading a key's row in the table now); one that loses nothing is removed,
// and the first that loses entries refuses with ErrForgotten. Temporary links older than a minute (a process died while
// it made one) are removed.
func judgeWALLinks(path, table string, now int64, root uint32, current func(key []byte) (row, bool, error)) error {
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
		lost, err := walLost(path, link, now, root, current)
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

// walLost reports how many acknowledged entries of the store's table the
// WAL file at link held that the database at path no longer does. The
// table's pages are those its b-tree (rooted at root) reaches in the
// snapshot the link holds: the WAL's last committed images over the
// database file. On each such page whose last image differs from what
// SQLite reads now (the committed frames of the WAL at the path, when
// there is one, over the database file), every row but the marker is
// compared with the table's row of its key now (current): a row missing,
// or weaker than the one the WAL held, is an entry lost (see heldBy). A
// row whose key, state or until is not on its page (an ID too long for
// it) counts as lost, and so does a page whose entries cannot be read. A
// page past the database's size at the linked WAL's last commit is
// skipped (the commit freed it), and so are expired rows (a sweep may
// have removed them) but for an escaped Work's, which lasts until an
// operator releases it.
func walLost(path, link string, now int64, root uint32, current func(key []byte) (row, bool, error)) (lost int, err error) {
	old, err := os.Open(link)
	if err != nil {
		return 0, err
	}
	defer old.Close()
	size, npages, last, err := walfile.Committed(old)
	if err != nil || len(last) == 0 {
		return 0, err
	}
	db, err := openPages(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	usable := size
	var hdr [100]byte
	if _, err := db.ReadAt(hdr[:], 0); err == nil {
		usable -= int(hdr[20]) // the reserved bytes at the end of each page
	}
	readAt := func(f io.ReaderAt, off int64) ([]byte, bool) {
		b := make([]byte, size)
		n, err := f.ReadAt(b, off)
		return b, n == size && (err == nil || err == io.EOF)
	}
	// The snapshot the link holds, for the walk of the table's tree.
	snapshot := func(pgno uint32) ([]byte, bool) {
		if off, ok := last[pgno]; ok && pgno <= npages {
			return readAt(old, off)
		}
		return readAt(db, int64(pgno-1)*int64(size))
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
	// The pages the walk may read: the larger of the file's and the last
	// commit's size.
	maxPage := npages
	if n, err := db.Size(); err == nil && n/int64(size) > int64(maxPage) {
		maxPage = uint32(min(n/int64(size), 1<<31))
	}
	for pgno := range walfile.IndexTree(root, usable, maxPage, snapshot) {
		off, ok := last[pgno]
		if !ok || pgno > npages {
			continue // not written by the linked WAL: the file holds it
		}
		want, ok := readAt(old, off)
		if !ok {
			return 0, fmt.Errorf("reading page %d of %s", pgno, link)
		}
		var have []byte
		var read bool
		if coff, inCur := curLast[pgno]; inCur {
			have, read = readAt(cur, coff)
		} else {
			have, read = readAt(db, int64(pgno-1)*int64(size))
		}
		if read && bytes.Equal(want, have) {
			continue
		}
		l, err := lostRows(want, pgno, usable, now, current)
		if err != nil {
			return 0, err
		}
		lost += l
	}
	return lost, nil
}

// row is what walLost compares of a store row: its state, token and until.
type row struct {
	state byte
	token string
	until int64
}

// heldBy reports whether the table's row now (cur) still holds what the
// WAL's row (was) acknowledged: an escaped Work ('w') is still one; a
// claim or a done row ('c', 'd') is still refused at least as long, or
// escaped; a lease ('l') is the same lease lasting at least as long, or
// was followed by a claim, done or escaped row that still refuses.
func heldBy(was, cur row, now int64) bool {
	switch was.state {
	case 'w':
		return cur.state == 'w'
	case 'c', 'd':
		return cur.state == 'w' || (cur.state == 'c' || cur.state == 'd') && cur.until >= was.until
	case 'l':
		return cur.state == 'l' && cur.token == was.token && cur.until >= was.until ||
			cur.state == 'w' || (cur.state == 'c' || cur.state == 'd') && cur.until > now
	}
	return false
}

// lostRows is walLost's look at one page of the table whose image in the
// linked WAL differs from the database's: the rows on it not held now.
func lostRows(page []byte, pgno uint32, usable int, now int64, current func(key []byte) (row, bool, error)) (int, error) {
	entries, _, err := walfile.IndexEntries(page, pgno, usable)
	if err != nil {
		return 1, nil
	}
	lost := 0
	for _, e := range entries {
		cols, total, ok := walfile.Record(e)
		if !ok || total != len(storeColumns) || len(cols) < 4 || !storeRow(cols) {
			lost++ // an entry of the table that cannot be read whole enough
			continue
		}
		was := row{cols[1].Bytes[0], string(cols[2].Bytes), cols[3].Int}
		if was.state == 'm' || was.state != 'w' && was.until <= now {
			continue // the marker (the sequence judges it), or expired
		}
		cur, found, err := current(cols[0].Bytes)
		if err != nil {
			return 0, err
		}
		if !found || !heldBy(was, cur, now) {
			lost++
		}
	}
	return lost, nil
}

// storeColumns are the columns of a store's table, in order ([Schema]).
var storeColumns = [...]string{"key", "state", "token", "until", "fingerprint", "result", "seq"}

// storeRow reports whether the first four columns of a record have the
// types of a store row's: a BLOB key, a state of one letter, a TEXT
// token, an INTEGER until.
func storeRow(cols []walfile.Value) bool {
	return !cols[0].Text && !cols[0].IsInt && !cols[0].Null && len(cols[0].Bytes) > 0 &&
		cols[1].Text && len(cols[1].Bytes) == 1 && strings.IndexByte("mclwd", cols[1].Bytes[0]) >= 0 &&
		cols[2].Text && cols[3].IsInt
}

// currentIn returns walLost's look-up, on q, of a key's row in the
// store's table now.
func (s *Store) currentIn(q querier) func(key []byte) (row, bool, error) {
	return func(key []byte) (row, bool, error) {
		var state, token string
		var until int64
		err := q.queryRow(`SELECT state, token, until FROM `+s.table+` WHERE key = ?`, key).Scan(&state, &token, &until)
		if errors.Is(err, sql.ErrNoRows) {
			return row{}, false, nil
		}
		if err != nil || state == "" {
			return row{}, false, err
		}
		return row{state[0], token, until}, true, nil
	}
}

// rootPage is the root page of the store's table.
func (s *Store) rootPage(q querier) (uint32, error) {
	var root int64
	err := q.queryRow(`SELECT rootpage FROM main.sqlite_master WHERE type = 'table' AND name = ?`, unquote(s.table)).Scan(&root)
	return uint32(root), err
}
