// Command ctoken-sqlite reports the state of a sqlitestore store's table
// and re-arms it after a loss: the one step every
// sqlitestore.ErrForgotten refusal names, with the database's path and
// table filled in (docs/sqlitestore.md, "After ErrForgotten").
//
//	ctoken-sqlite status -db /var/lib/api/replay.db [-table ctoken_replay] [-horizon 25h]
//	ctoken-sqlite rearm  -db /var/lib/api/replay.db  -table ctoken_replay  -fence 25h0m0s
//
// status opens the database read-only and changes nothing: it prints the
// table's marker (incarnation, sequence, fence), each hidden file the
// store keeps beside the database (its sidecar, the WALs it kept) and what
// it records, a read transaction of another process that holds the WAL,
// and whether sqlitestore.New would serve or refuse, and why
// (sqlitestore.Inspect; -table and -horizon are the applications' Options).
//
// rearm runs sqlitestore.Rearm with the fence: claims are refused until it
// ends (a fence of the stores' Horizon if the lost claims matter, 0 when
// you know nothing was lost). It judges the files as they are, so
// the application must be stopped: it holds the database with an exclusive
// lock while it runs, and refuses when another connection has the file
// open (in WAL mode, any open connection; in other journal modes only one
// that is reading or writing can be seen). It refuses too when New would
// serve and no fence is left to change, and when the refusal is not a
// loss.
//
// Exit status: status 0 New would serve, 1 it would refuse or the read
// failed; rearm 0 done, 1 refused or failed; 2 a usage error.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
	_ "modernc.org/sqlite"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// name is the command's, as the refusals print it.
const name = "ctoken-sqlite"

const usage = `usage: ctoken-sqlite status|rearm -db FILE [flags]

  status   the table's marker, the hidden files beside the database and
           whether New would serve; read-only
  rearm    make the table serve again after a loss (sqlitestore.Rearm),
           with the application stopped; needs -fence

Run "ctoken-sqlite <command> -h" for the flags.
`

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd := args[0]
	switch cmd {
	case "status", "rearm":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", name, cmd, usage)
		return 2
	}
	var path string
	var opts sqlitestore.Options
	var fence time.Duration
	fs := flag.NewFlagSet(name+" "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&path, "db", "", "the database `file` (required)")
	fs.StringVar(&opts.Table, "table", sqlitestore.DefaultTable, "the applications' Options.Table")
	timeout := fs.Duration("timeout", time.Minute, "bound on the whole command")
	if cmd == "status" {
		fs.DurationVar(&opts.Horizon, "horizon", sqlitestore.DefaultHorizon, "the applications' Options.Horizon: the fence the printed rearm command line gives")
	} else {
		fs.DurationVar(&fence, "fence", 0, "refuse every claim for this long from now (required: the stores' Horizon if the lost claims matter, 0 when nothing was lost)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s %s: unexpected argument %q\n", name, cmd, fs.Arg(0))
		return 2
	case path == "":
		fmt.Fprintf(stderr, "%s %s: -db is required\n", name, cmd)
		return 2
	case cmd == "rearm" && !given["fence"]:
		fmt.Fprintf(stderr, "%s rearm: -fence is required: the stores' Horizon if the lost claims matter, 0 when the refusal says nothing was lost\n", name)
		return 2
	case fence < 0:
		fmt.Fprintf(stderr, "%s rearm: negative -fence\n", name)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if cmd == "status" {
		return status(ctx, path, opts, stdout, stderr)
	}
	return rearm(ctx, path, opts.Table, fence, stdout, stderr)
}

// open opens the database file at path, which must exist, with the URI
// parameters query.
func open(path string, query url.Values) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	info, err := os.Stat(abs)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a database file", abs)
	}
	u := url.URL{Scheme: "file", Path: abs, OmitHost: true, RawQuery: query.Encode()}
	return sql.Open("sqlite", u.String())
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, os.ErrNotExist)
}

func status(ctx context.Context, path string, opts sqlitestore.Options, stdout, stderr io.Writer) int {
	// mode=ro: SQLite neither writes the file nor checkpoints or deletes
	// its WAL when the connection closes; it may make its -shm index.
	// Without a WAL or a journal beside it, everything is in the file:
	// immutable=1 reads it alone, without making a WAL, which mode=ro
	// would (empty) for a file in WAL mode.
	query := url.Values{"mode": {"ro"}, "_pragma": {"busy_timeout(5000)"}}
	if !exists(path+"-wal") && !exists(path+"-journal") {
		query.Set("immutable", "1")
	}
	db, err := open(path, query)
	if err != nil {
		return fail(stderr, "status", err)
	}
	defer db.Close()
	st, err := sqlitestore.Inspect(ctx, db, opts)
	if err != nil {
		return fail(stderr, "status", err)
	}
	report(stdout, st, time.Now())
	// Read once this process holds no connection on the file.
	db.Close()
	if r := heldWAL(st.Path); r != "" {
		fmt.Fprintf(stdout, "reader    %s\n", r)
	}
	if st.Refusal != nil {
		return 1
	}
	return 0
}

func rearm(ctx context.Context, path, table string, fence time.Duration, stdout, stderr io.Writer) int {
	fmt.Fprintln(stdout, "rearm judges the files as they are now: every program with the database open, the application included, must be stopped")
	// One connection that keeps an exclusive lock from its first
	// transaction to its close: nothing else reads or writes meanwhile.
	db, err := open(path, url.Values{"mode": {"rw"}, "_pragma": {"locking_mode(EXCLUSIVE)", "busy_timeout(0)", "synchronous(FULL)"}})
	if err != nil {
		return fail(stderr, "rearm", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if _, err := db.ExecContext(ctx, `BEGIN EXCLUSIVE; COMMIT`); err != nil {
		if strings.Contains(err.Error(), "locked") || strings.Contains(err.Error(), "busy") {
			fmt.Fprintf(stderr, "%s rearm: refused: the database is in use (another connection holds it open: %v): stop every program on the file, then run this again\n", name, err)
			return 1
		}
		return fail(stderr, "rearm", err)
	}
	opts := sqlitestore.Options{Table: table}
	before, err := sqlitestore.Inspect(ctx, db, opts)
	if err != nil {
		return fail(stderr, "rearm", err)
	}
	report(stdout, before, time.Now())
	switch {
	case before.Refusal == nil && !before.Fence.After(time.Now()):
		fmt.Fprintf(stderr, "%s rearm: refused: New serves this table, and no fence is left to change: nothing to lift\n", name)
		return 1
	case before.Refusal != nil && !errors.Is(before.Refusal, sqlitestore.ErrForgotten):
		fmt.Fprintf(stderr, "%s rearm: refused: New's refusal is not a loss, which rearm does not lift: %v\n", name, before.Refusal)
		return 1
	}
	if err := sqlitestore.Rearm(ctx, db, table, fence); err != nil {
		return fail(stderr, "rearm", err)
	}
	after, err := sqlitestore.Inspect(ctx, db, opts)
	if err != nil {
		return fail(stderr, "rearm", err)
	}
	if after.Refusal != nil {
		return fail(stderr, "rearm", fmt.Errorf("re-armed, and New still refuses: %w", after.Refusal))
	}
	fmt.Fprintf(stdout, "re-armed: incarnation %s, sequence %d", after.Incarnation, after.Seq)
	if fence > 0 {
		fmt.Fprintf(stdout, "; every claim is refused until %s", after.Fence.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(stdout, "; the applications can start")
	return 0
}

// report writes st for an operator.
func report(w io.Writer, st sqlitestore.State, now time.Time) {
	fmt.Fprintf(w, "database  %s\ntable     %s\n", st.Path, st.Table)
	if st.Incarnation == "" {
		fmt.Fprintln(w, "marker    none (the table or its marker row is missing)")
	} else {
		fmt.Fprintf(w, "marker    incarnation %s, sequence %d\n", st.Incarnation, st.Seq)
	}
	switch {
	case st.Fence.After(now):
		fmt.Fprintf(w, "fence     every claim refused until %s (in %s)\n", st.Fence.UTC().Format(time.RFC3339), st.Fence.Sub(now).Round(time.Second))
	case !st.Fence.IsZero():
		fmt.Fprintf(w, "fence     ended %s\n", st.Fence.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "hidden files beside the database: %d\n", len(st.Files))
	for _, f := range st.Files {
		fmt.Fprintf(w, "  %s: %s\n", f.Path, f.Says)
	}
	if st.Refusal != nil {
		fmt.Fprintf(w, "New       refuses: %v\n", st.Refusal)
	} else {
		fmt.Fprintln(w, "New       serves")
	}
}

// fail prints err and returns 1.
func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "%s %s: refused or failed: %v\n", name, cmd, err)
	return 1
}
