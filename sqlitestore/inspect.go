package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ctoken/ctoken/sqlitestore/internal/walfile"
)

// command is the operator's command for SQLite stores (cmd/ctoken-sqlite).
const command = "ctoken-sqlite"

// place is where a store's refusals are lifted: its file, table and fence.
type place struct {
	path, table string
	fence       time.Duration
}

// lifted is an ErrForgotten refusal with the hidden files found beside the
// database and the command line that lifts it.
type lifted struct{ err error }

func (e lifted) Error() string { return e.err.Error() }
func (e lifted) Unwrap() error { return e.err }

// nothingLost marks an ErrForgotten refusal whose files prove that
// nothing was lost: the command it names fences for 0.
type nothingLost struct{ error }

func (e nothingLost) Unwrap() error { return e.error }

// lift names in an ErrForgotten refusal the hidden files beside the
// database, whether acknowledged claims can have been lost, and the one
// command that lifts it, with the fence that fits: 0 where the files
// prove nothing was lost, the stores' Horizon otherwise. Other errors
// pass.
func (p place) lift(err error) error {
	if !errors.Is(err, ErrForgotten) || errors.As(err, new(lifted)) || p.path == "" {
		return err
	}
	found := "no hidden file of the store's beside it (" + sidecarFile(p.path, p.table) + "*)"
	if files := hiddenFiles(p.path, p.table); len(files) > 0 {
		found = "found beside it: " + strings.Join(files, ", ")
	}
	fence, lost := p.fence, fmt.Sprintf("acknowledged claims may be lost, so the fence is the stores' Horizon, %s: nothing is accepted until every claim the lost rows could hold has expired", p.fence)
	if errors.As(err, new(nothingLost)) {
		fence, lost = 0, "nothing was lost, so the fence is 0"
	}
	return lifted{fmt.Errorf("%w; %s; %s; once you have decided, stop every program on the file and run: %s", err, found, lost, p.rearm(fence))}
}

// rearm is the command line that re-arms the table with fence.
func (p place) rearm(fence time.Duration) string {
	return fmt.Sprintf("%s rearm -db %s -table %s -fence %s", command, shellQuote(p.path), unquote(p.table), fence)
}

// shellQuote quotes s for a POSIX shell when it holds more than letters,
// digits and the punctuation paths use.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// hiddenFiles lists the store's files of table beside the database at
// path: its sidecar and the WALs it keeps.
func hiddenFiles(path, table string) []string {
	side := sidecarFile(path, table)
	all, _ := withPrefix(side)
	var files []string
	for _, f := range all {
		if f == side || f == stopFile(path, table) || strings.HasPrefix(f, walLinkPrefix(path, table)) {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	return files
}

// State is what [Inspect] reads of a store's table and of the hidden files
// beside its database.
type State struct {
	// Path is the database file, Table the store's table.
	Path, Table string
	// Incarnation, Seq and Fence are the table's marker row's:
	// Incarnation is empty when the table or its marker row is missing;
	// Fence is the end of Rearm's fence (claims are refused until then),
	// zero when none was set.
	Incarnation string
	Seq         int64
	Fence       time.Time
	// Files are the hidden files the store keeps beside the database.
	Files []File
	// Refusal is the error New would return for the files as they are,
	// the connection's settings aside; nil when it would serve. An
	// [ErrForgotten] refusal names the command line that lifts it.
	Refusal error
}

// File is one hidden file beside the database: Says is what it records.
type File struct {
	Path, Says string
}

// Inspect reads, changing nothing, what [New] with opts (Table and
// Horizon; the rest does not matter here) judges of db's file and of the
// hidden files beside it: open db read-only (mode=ro in the DSN).
func Inspect(ctx context.Context, db *sql.DB, opts Options) (State, error) {
	if db == nil {
		return State{}, fmt.Errorf("%w: nil *sql.DB", ErrConfig)
	}
	ctx = orBackground(ctx)
	t, err := quoteTable(opts.Table)
	if err != nil {
		return State{}, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return State{}, unavailable(ctx, err)
	}
	defer conn.Close()
	set, err := readSettings(ctx, conn)
	if err != nil {
		return State{}, err
	}
	if set.path == "" {
		return State{}, fmt.Errorf("%w: an in-memory or temporary database holds no store: open a file", ErrConfig)
	}
	st := State{Path: set.path, Table: unquote(t)}
	p := place{set.path, "main." + t, orDefault(opts.Horizon, DefaultHorizon)}
	var fence int64
	st.Incarnation, fence, st.Seq, err = (&Store{table: t}).marker(connQuerier{ctx, conn})
	switch {
	case err == nil && fence > 0:
		st.Fence = time.Unix(0, fence)
	case err != nil && !errors.Is(err, errNoTable) && !errors.Is(malformed(err, set.path, p.table), ErrForgotten):
		return State{}, unavailable(ctx, err) // a malformed file is New's refusal, below
	}
	now := time.Now().UnixNano()
	// A kept WAL is read for the marker of the database's incarnation,
	// else of the sidecar's (the table is gone from the file).
	inc := st.Incarnation
	if c, ok, err := readSidecar(sidecarFile(p.path, p.table)); inc == "" && ok && err == nil {
		inc = c.Incarnation
	}
	for _, f := range hiddenFiles(set.path, t) {
		st.Files = append(st.Files, File{f, describe(connQuerier{ctx, conn}, f, p, inc, st.Seq, now)})
	}
	_, _, _, _, err = judgeFiles(ctx, connQuerier{ctx, conn}, p, bootID(), now, false)
	st.Refusal = p.lift(malformed(err, set.path, p.table))
	return st, nil
}

// describe says what the hidden file f records, for the database of
// incarnation inc at sequence seq, read through q at now.
func describe(q querier, f string, p place, inc string, seq, now int64) string {
	if strings.HasPrefix(f, walLinkPrefix(p.path, p.table)) {
		last, lacks, total, err := linkLoss(q, p.path, f, p.table, inc, seq, now)
		switch {
		case errors.Is(err, walfile.ErrDamaged):
			return "a WAL the store kept, its header damaged (a byte changed since SQLite wrote it): what it held cannot be judged"
		case err != nil:
			return "a WAL the store kept, unreadable: " + err.Error()
		case last > seq:
			return fmt.Sprintf("a WAL the store kept, with commits the database lacks (its sequence %d, the database's %d)", last, seq)
		case lacks > 0:
			return fmt.Sprintf("a WAL the store kept, at the database's sequence %d, with %d of its %d live rows the database lacks", seq, lacks, total)
		}
		return fmt.Sprintf("a WAL the store kept, which the database holds (its sequence %d, the database's %d): New removes it", last, seq)
	}
	if f == stopFile(p.path, p.table) {
		return "the record of a store's clean stop: a sidecar deleted since loses nothing while it matches the database"
	}
	c, ok, err := readSidecar(f)
	switch {
	case err != nil:
		return err.Error()
	case !ok:
		return "removed meanwhile"
	}
	s := fmt.Sprintf("the store's sidecar: incarnation %s, sequence %d last seen", c.Incarnation, c.Seq)
	if c.Boot != "" {
		s += "; a store with synchronous=NORMAL ran since boot " + c.Boot
	}
	if c.Repair != "" {
		s += "; a repair after an I/O error unfinished since boot " + c.Repair
	}
	if c.Lost != "" {
		s += "; a loss a running store found, at " + c.Lost
	}
	if c.Filed {
		s += "; the database file records that a store ran on it"
	}
	return s
}
