package sqlitestore

import (
	"cmp"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ctoken/ctoken/sqlitestore/internal/walfile"
)

// A WAL deleted after a crash takes commits the database file lacks, so
// each Store keeps a hidden hard link to its WAL until Close checkpoints
// it whole. New judges a link that is not the WAL in place by what the
// stores wrote in it, read through SQL wherever SQLite put it since
// (linkLoss).

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

// judgeWALLinks removes each link the database (sequence seq, read
// through q at now) is known to hold, and refuses with ErrForgotten at
// the first it may not (linkLoss). Stale temporary links are removed.
// Unless remove, it removes nothing.
func judgeWALLinks(q querier, path, table, inc string, seq, now int64, remove bool) error {
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
		last, lacks, total, err := linkLoss(q, path, link, table, inc, seq, now)
		switch {
		case errors.Is(err, walfile.ErrDamaged):
			return fmt.Errorf("%w: the WAL file %s-wal was deleted or replaced while no store ran, and the header of the WAL kept at %s is not a WAL's (a byte changed since SQLite wrote it), so what it held cannot be judged", ErrForgotten, path, link)
		case err != nil:
			return fmt.Errorf("%w: judging the WAL kept at %s: %w", ErrUnavailable, link, err)
		case last > seq:
			return fmt.Errorf("%w: the WAL file %s-wal was deleted or replaced while no store ran, and it held commits the database no longer does (sequence %d, the database's %d; that WAL is kept at %s)", ErrForgotten, path, last, seq, link)
		case lacks > 0:
			return fmt.Errorf("%w: the WAL file %s-wal was deleted or replaced while no store ran, and the database lacks %d of the %d live rows it held (a checkpoint cut short, rows another store table released since, or rows too long for their page to be judged; that WAL is kept at %s)", ErrForgotten, path, lacks, total, link)
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

// linkLoss compares what the WAL kept at link says the stores wrote with
// what the database at path (table's marker of incarnation inc at
// sequence seq, read through q at now) holds, wherever SQLite put it: the
// WAL's last sequence of inc's marker and, when it equals seq, how many of
// the live rows of the WAL (of total) the database lacks. The database
// holds the WAL when neither is lost: a lower sequence lacks the WAL's
// last durable commit; a higher one is a store's later commit, which it
// holds only if it held this WAL's; at an equal one, the file must hold
// every row of the WAL that must still be in it (a claim or record live at
// now, an escaped Work), as the WAL has it, in table or in another store
// table (lacking): a checkpoint cut short copies the marker's page before
// higher ones, then the WAL was deleted.
func linkLoss(q querier, path, link, table, inc string, seq, now int64) (last int64, lacks, total int, err error) {
	// The database header's reserved bytes per page, through the held
	// descriptor: closing one would release SQLite's locks on the file.
	var hdr [100]byte
	h, err := openHeld(path)
	if err != nil {
		return 0, 0, 0, err
	}
	if _, err := h.f.ReadAt(hdr[:], 0); err != nil {
		return 0, 0, 0, err
	}
	last, rows, cut, err := walRows(link, inc, int(hdr[20]), now)
	if err != nil || last != seq {
		return last, 0, 0, err
	}
	lacks, total = cut, cut+len(rows)
	if len(rows) > 0 {
		tables, err := storeTables(q, table)
		if err != nil {
			return last, 0, 0, err
		}
		n, err := lacking(q, tables, rows)
		if err != nil {
			return last, 0, 0, err
		}
		lacks += n
	}
	return last, lacks, total, nil
}

// storeRowOf is a store row as a page of the WAL holds it.
type storeRowOf struct {
	key, state, token []byte
	until             int64
}

// walRows reads the WAL at link, of a database whose pages keep reserved
// bytes unless the WAL's page 1 says otherwise: the highest sequence of
// inc's marker on the last committed image of any page, the rows that
// must still be in the database (a claim or record live at now, an
// escaped Work) on the pages the database holds after the last commit,
// and how many store rows there are too long for their page to be read
// (a long key and a record's result: the row goes on overflow pages),
// which the database is taken to lack. A damaged header is refused.
func walRows(link, inc string, reserved int, now int64) (seq int64, rows []storeRowOf, cut int, err error) {
	// O_NONBLOCK: a FIFO put at the name never blocks the open.
	f, err := os.OpenFile(link, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, nil, 0, err
	}
	defer f.Close()
	size, npages, last, err := walfile.Committed(f)
	if err != nil {
		return 0, nil, 0, err
	}
	var readErr error
	image := func(pgno uint32) []byte {
		off, ok := last[pgno]
		if !ok {
			return nil
		}
		page := make([]byte, size)
		if _, err := f.ReadAt(page, off); err != nil && err != io.EOF {
			readErr = cmp.Or(readErr, err)
			return nil
		}
		return page
	}
	p1 := image(1)
	if len(p1) >= 100 {
		reserved = int(p1[20])
	}
	free := walfile.Free(image, func(pgno uint32) bool { _, ok := last[pgno]; return ok })
	for pgno := range last {
		page := image(pgno)
		if page == nil {
			continue
		}
		entries, err := walfile.IndexEntries(page, pgno, size-reserved)
		if err != nil {
			continue // not a page of an index b-tree
		}
		held := pgno <= npages && !free[pgno]
		for _, e := range entries {
			cols, ok := walfile.Record(e)
			if !ok || len(cols) != 7 || !storeRow(cols) {
				continue
			}
			if isMarker(cols, inc) {
				seq = max(seq, cols[6].Int)
			}
			r := storeRowOf{cols[0].Bytes, cols[1].Bytes, cols[2].Bytes, cols[3].Int}
			switch {
			case !held:
			case cols[3].Cut: // its first four columns not all on the page
				cut++
			case string(r.state) == "w" || r.until > now && (string(r.state) == "c" || string(r.state) == "d"):
				rows = append(rows, r)
			}
		}
	}
	return seq, rows, cut, readErr
}

// storeTables lists table, then the file's other tables that hold a
// store's marker row.
func storeTables(q querier, table string) ([]string, error) {
	var names sql.NullString
	if err := q.queryRow(`SELECT group_concat(name, ' ') FROM sqlite_master WHERE type = 'table'`).Scan(&names); err != nil {
		return nil, err
	}
	tables := []string{table}
	for _, name := range strings.Fields(names.String) {
		t, fault := tableName(name)
		if fault != "" || "main."+t == table {
			continue
		}
		var n int
		if err := q.queryRow(`SELECT count(*) FROM main.` + t + ` WHERE key = ` + markerKey + ` AND state = 'm'`).Scan(&n); err == nil && n == 1 {
			tables = append(tables, "main."+t)
		}
	}
	return tables, nil
}

// lacking is how many of rows none of tables holds as the WAL has it. A
// row is told by its columns alone, so a row another table holds the same
// counts as held, and one of another table's rows that table's store
// released since counts as lacking (a refusal: docs/sqlitestore.md).
func lacking(q querier, tables []string, rows []storeRowOf) (int, error) {
	in := make([]string, len(tables))
	for i, t := range tables {
		in[i] = `EXISTS (SELECT 1 FROM ` + t + ` AS t WHERE t.key = v.column1 AND t.state = v.column2 AND t.token = v.column3 AND t.until = v.column4)`
	}
	held := 0
	for chunk := range slices.Chunk(rows, 200) { // 800 arguments, under SQLite's oldest limit
		values := strings.Repeat(", (?, ?, ?, ?)", len(chunk))[2:]
		args := make([]any, 0, 4*len(chunk))
		for _, r := range chunk {
			args = append(args, r.key, string(r.state), string(r.token), r.until)
		}
		var n int
		if err := q.queryRow(`SELECT count(*) FROM (VALUES `+values+`) AS v WHERE `+strings.Join(in, ` OR `), args...).Scan(&n); err != nil {
			return 0, err
		}
		held += n
	}
	return len(rows) - held, nil
}

// malformed refuses a file SQLite finds malformed: what a checkpoint cut
// short leaves once the WAL is deleted, or a file given another's WAL.
func malformed(err error, path, table string) error {
	if !isMalformed(err) {
		return err
	}
	path = cmp.Or(path, "NAME")
	return fmt.Errorf("%w: SQLite finds the database file malformed (%v): stop every program on the file; if its WAL was deleted after a crash, rename the WAL the store kept, %s*, to %s-wal; if the file was replaced while a program had it open, delete %s-wal and %s-shm (the replaced file's); else put a good copy in its place; then re-arm it with the command at the end of this message", ErrForgotten, err, walLinkPrefix(path, table), path, path, path)
}

// isMalformed reports an error of SQLite's that finds the file malformed.
func isMalformed(err error) bool {
	return err != nil && !errors.Is(err, ErrForgotten) && strings.Contains(err.Error(), "malformed")
}

// sawMalformed turns a write that finds the file malformed into a loss,
// refused until Rearm and recorded (guard.refuse); other errors pass.
func (s *Store) sawMalformed(err error) error {
	if !isMalformed(err) {
		return err
	}
	return s.guard.refuse(malformed(err, s.path, s.table))
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

// storeRow reports whether a record's first columns are a store row's
// (Schema): a BLOB key, a one-letter state, a TEXT token, an INTEGER
// until; those past the page (Cut) by their types.
func storeRow(cols []walfile.Value) bool {
	key, state := cols[0], cols[1]
	blob := !key.Text && key.Bytes != nil // a NULL, an integer or a float has none
	return blob && (key.Cut || len(key.Bytes) > 0) &&
		state.Text && (state.Cut || len(state.Bytes) == 1 && strings.IndexByte("mclwd", state.Bytes[0]) >= 0) &&
		cols[2].Text && cols[3].IsInt
}

// isMarker reports whether a record's columns are inc's marker row.
func isMarker(cols []walfile.Value, inc string) bool {
	return !cols[0].Text && string(cols[0].Bytes) == "\x00\x00" &&
		cols[1].Text && string(cols[1].Bytes) == "m" &&
		cols[2].Text && string(cols[2].Bytes) == inc && cols[6].IsInt && !cols[6].Cut
}
