package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// openApp opens path as an application does (the package documentation's
// DSN) and closes it when the test ends.
func openApp(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	must(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// must fails t on an error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// start is an application's start: Migrate, then New.
func start(t *testing.T, db *sql.DB) (*sqlitestore.Store, error) {
	t.Helper()
	if err := sqlitestore.Migrate(t.Context(), db, ""); err != nil {
		return nil, err
	}
	s, err := sqlitestore.New(t.Context(), db, sqlitestore.Options{Logger: discardLogger()})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// claims runs an application that claims ids, then stops it (store and pool).
func claims(t *testing.T, path string, ids ...string) {
	t.Helper()
	db := openApp(t, path)
	s, err := start(t, db)
	must(t, err)
	for _, id := range ids {
		if first, err := s.Claim(t.Context(), id, time.Now().Add(time.Hour)); err != nil || !first {
			t.Fatalf("Claim(%s) = %v, %v; want first", id, first, err)
		}
	}
	s.Close()
	must(t, db.Close())
}

// command is the command line a refusal ends with, split as a POSIX shell
// splits it (single quotes are all the store uses).
func command(t *testing.T, err error) []string {
	t.Helper()
	msg := err.Error()
	i := strings.LastIndex(msg, "and run: ")
	if i < 0 {
		t.Fatalf("the refusal names no command line: %v", err)
	}
	var args []string
	var cur strings.Builder
	in, any := false, false
	for _, r := range msg[i+len("and run: "):] {
		switch {
		case r == '\'':
			in, any = !in, true
		case r == ' ' && !in:
			if any {
				args = append(args, cur.String())
			}
			cur.Reset()
			any = false
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if any {
		args = append(args, cur.String())
	}
	if in || len(args) == 0 || args[0] != name {
		t.Fatalf("the refusal's command line %q is not a %s command", msg[i:], name)
	}
	return args
}

// runCmd runs the command line args; it returns the exit status and output.
func runCmd(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// TestRefusalAfterARestoredCopyNamesTheCommandThatLiftsIt: a database
// replaced by an older copy of itself is refused; status says so, read
// only; the refusal's command line, run as printed, re-arms it with the
// Horizon's fence, and New serves again (fenced, as it said).
func TestRefusalAfterARestoredCopyNamesTheCommandThatLiftsIt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my data") // a path the command line must quote
	must(t, os.Mkdir(dir, 0o755))
	path := filepath.Join(dir, "app.db")
	claims(t, path, "a")
	backup, err := os.ReadFile(path)
	must(t, err)
	claims(t, path, "b")
	must(t, os.WriteFile(path, backup, 0o644))

	db := openApp(t, path)
	_, err = sqlitestore.New(t.Context(), db, sqlitestore.Options{Logger: discardLogger()})
	if !errors.Is(err, sqlitestore.ErrForgotten) {
		t.Fatalf("New on the restored copy = %v; want ErrForgotten", err)
	}
	side := filepath.Join(dir, ".app.db-ctoken")
	want := "ctoken-sqlite rearm -db '" + path + "' -table ctoken_replay -fence 25h0m0s"
	for _, part := range []string{"older than the database", "found beside it: " + side, want} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("the refusal %q does not contain %q", err, part)
		}
	}
	db.Close()

	code, out, _ := runCmd("status", "-db", path)
	if code != 1 || !strings.Contains(out, "New       refuses: ") || !strings.Contains(out, side+": the store's sidecar: incarnation ") || !strings.Contains(out, want) {
		t.Fatalf("status = %d:\n%s\nwant 1, the refusal, the sidecar and the command line", code, out)
	}

	args := command(t, err)
	code, out, errOut := runCmd(args[1:]...)
	if code != 0 || !strings.Contains(out, "re-armed") || !strings.Contains(out, "every claim is refused until") {
		t.Fatalf("%q = %d:\n%s%s\nwant 0 and re-armed with a fence", args, code, out, errOut)
	}
	s, err := start(t, openApp(t, path))
	if err != nil {
		t.Fatalf("after rearm, the application's start = %v; want it to serve", err)
	}
	_, err = s.Claim(t.Context(), "c", time.Now().Add(time.Minute))
	at, fenced := replay.RetryAt(err)
	if !fenced || at.Before(time.Now().Add(24*time.Hour)) {
		t.Fatalf("a claim inside the fence = %v (retry at %v); want refused for the printed 25h", err, at)
	}
}

// TestRefusalAfterDeletingTheFilesNamesTheHiddenSidecar: a user who
// deleted app.db* to reset a database meets a refusal naming the hidden
// sidecar and clean stop's record that survived; status shows it; the printed command lifts it;
// a second rearm with -fence 0 ends the fence, and claims are accepted.
func TestRefusalAfterDeletingTheFilesNamesTheHiddenSidecar(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.db")
	claims(t, path, "a")
	files, _ := filepath.Glob(path + "*") // what rm app.db* removes
	for _, f := range files {
		must(t, os.Remove(f))
	}

	db := openApp(t, path)
	_, err := start(t, db)
	side := filepath.Join(dir, ".app.db-ctoken")
	if !errors.Is(err, sqlitestore.ErrForgotten) || !strings.Contains(err.Error(), "found beside it: "+side+", "+side+"-stopped;") {
		t.Fatalf("the start after rm app.db* = %v; want ErrForgotten naming %s", err, side)
	}
	db.Close()
	if code, out, _ := runCmd("status", "-db", path); code != 1 || !strings.Contains(out, "marker    none") || !strings.Contains(out, side+": ") {
		t.Fatalf("status = %d:\n%s\nwant 1, no marker, the sidecar", code, out)
	}
	args := command(t, err)
	if code, out, errOut := runCmd(args[1:]...); code != 0 {
		t.Fatalf("%q = %d:\n%s%s", args, code, out, errOut)
	}
	if code, out, errOut := runCmd("rearm", "-db", path, "-fence", "0"); code != 0 || strings.Contains(out, "every claim is refused until") {
		t.Fatalf("rearm -fence 0 over a fence = %d:\n%s%s\nwant 0 and no fence", code, out, errOut)
	}
	code, out, _ := runCmd("status", "-db", path)
	if code != 0 || !strings.Contains(out, "New       serves") || !strings.Contains(out, "fence     ended") {
		t.Fatalf("status after rearm = %d:\n%s\nwant 0, serving, the fence ended", code, out)
	}
	s, err := start(t, openApp(t, path))
	must(t, err)
	if first, err := s.Claim(t.Context(), "a", time.Now().Add(time.Minute)); err != nil || !first {
		t.Fatalf("Claim after rearm -fence 0 = %v, %v; want first", first, err)
	}
}

// snapshot reads every file of dir but SQLite's -shm (its index of the
// WAL, which any reader updates).
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err)
	files := map[string]string{}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), "-shm") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		must(t, err)
		files[e.Name()] = string(b)
	}
	return files
}

// TestStatusChangesNothing: on a crash image whose WAL was then deleted
// (a copy of a running application's directory), status reports the kept
// WAL and the refusal, and leaves every file as it was, the WAL kept
// beside it included; on the image with its WAL, status leaves the WAL
// in place (a read-only connection never checkpoints it away).
func TestStatusChangesNothing(t *testing.T) {
	live := filepath.Join(t.TempDir(), "app.db")
	s, err := start(t, openApp(t, live))
	must(t, err)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := s.Claim(t.Context(), id, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	// The image: the database file last, so it holds no commit its WAL lacks.
	crash := t.TempDir()
	entries, err := os.ReadDir(filepath.Dir(live))
	must(t, err)
	for _, e := range entries {
		if e.Name() != "app.db" && !strings.HasSuffix(e.Name(), "-shm") {
			copyFile(t, filepath.Join(filepath.Dir(live), e.Name()), filepath.Join(crash, e.Name()))
		}
	}
	copyFile(t, live, filepath.Join(crash, "app.db"))
	path := filepath.Join(crash, "app.db")
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("the image has no WAL: %v", err)
	}

	before := snapshot(t, crash)
	if code, out, errOut := runCmd("status", "-db", path); code != 0 || !strings.Contains(out, "New       serves") {
		t.Fatalf("status on the image = %d:\n%s%s\nwant 0: serving", code, out, errOut)
	}
	if after := snapshot(t, crash); !maps.Equal(before, after) {
		t.Fatalf("status changed the files: %v before, %v after", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}

	must(t, os.Remove(path+"-wal"))
	os.Remove(path + "-shm")
	before = snapshot(t, crash)
	code, out, _ := runCmd("status", "-db", path)
	if code != 1 || !strings.Contains(out, "a WAL the store kept, with commits the database lacks") || !strings.Contains(out, "New       refuses: ") {
		t.Fatalf("status after the WAL's deletion = %d:\n%s\nwant 1, the kept WAL, the refusal", code, out)
	}
	if after := snapshot(t, crash); !maps.Equal(before, after) {
		t.Fatalf("status changed the files: %v before, %v after", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to, b, 0o644))
}

// TestRearmRefusesADatabaseInUse: with an application's store open on the
// file, status reads it, and rearm refuses and writes nothing.
func TestRearmRefusesADatabaseInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	s, err := start(t, openApp(t, path))
	must(t, err)
	if code, out, errOut := runCmd("status", "-db", path); code != 0 || !strings.Contains(out, "New       serves") {
		t.Fatalf("status beside a running store = %d:\n%s%s\nwant 0, serving", code, out, errOut)
	}
	code, _, errOut := runCmd("rearm", "-db", path, "-fence", "0")
	if code != 1 || !strings.Contains(errOut, "the database is in use") {
		t.Fatalf("rearm beside a running store = %d: %s; want 1, in use", code, errOut)
	}
	if first, err := s.Claim(t.Context(), "a", time.Now().Add(time.Minute)); err != nil || !first {
		t.Fatalf("the running store's Claim = %v, %v; want first: rearm changed the table", first, err)
	}
}

// TestRearmRefusesWhatItDoesNotLift: a table New serves, and a refusal
// that is no loss (the table was never made), are not re-armed.
func TestRearmRefusesWhatItDoesNotLift(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	claims(t, path, "a")
	code, _, errOut := runCmd("rearm", "-db", path, "-fence", "0")
	if code != 1 || !strings.Contains(errOut, "nothing to lift") {
		t.Fatalf("rearm of a serving table = %d: %s; want 1, nothing to lift", code, errOut)
	}
	code, out, errOut := runCmd("rearm", "-db", path, "-table", "other", "-fence", "0")
	if code != 1 || !strings.Contains(errOut, "not a loss") || !strings.Contains(out, "run Migrate") {
		t.Fatalf("rearm of a table never made = %d:\n%s%s\nwant 1, not a loss", code, out, errOut)
	}
}

// TestUsageErrors: a command line the tool cannot run exits 2 and creates
// no file; a database that does not exist exits 1 and is not created.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"vacuum"}, "unknown command"},
		{[]string{"status"}, "-db is required"},
		{[]string{"rearm", "-db", path}, "-fence is required"},
		{[]string{"rearm", "-db", path, "-fence", "-1s"}, "negative -fence"},
		{[]string{"status", "-db", path, "extra"}, "unexpected argument"},
		{[]string{"status", "-db", path, "-fence", "0"}, "flag provided but not defined"},
	} {
		if code, _, errOut := runCmd(tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q = %d: %s; want 2, %q", tc.args, code, errOut, tc.want)
		}
	}
	for _, cmd := range [][]string{{"status", "-db", path}, {"rearm", "-db", path, "-fence", "0"}} {
		if code, _, errOut := runCmd(cmd...); code != 1 || !strings.Contains(errOut, "no such file") {
			t.Errorf("%q = %d: %s; want 1, no such file", cmd, code, errOut)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("the refused command lines left %d files", len(entries))
	}
	if code, out, _ := runCmd("help"); code != 0 || !strings.Contains(out, "usage") {
		t.Fatalf("help = %d: %s", code, out)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestARunningStoresRefusalNamesTheCommand: a store that finds its file
// replaced while it runs refuses every call, naming the command line too.
func TestARunningStoresRefusalNamesTheCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db := openApp(t, path)
	must(t, sqlitestore.Migrate(t.Context(), db, ""))
	events := make(chan replay.Event, 16)
	s, err := sqlitestore.New(t.Context(), db, sqlitestore.Options{
		Logger: discardLogger(), RecheckInterval: 10 * time.Millisecond, Horizon: time.Hour,
		Observer: func(e replay.Event) {
			select {
			case events <- e:
			default:
			}
		},
	})
	must(t, err)
	defer s.Close()
	must(t, os.Rename(path, path+".old"))
	must(t, os.WriteFile(path, nil, 0o644))
	for e := range events {
		if e.Kind == replay.EventRefusing {
			break
		}
	}
	_, err = s.Claim(t.Context(), "a", time.Now().Add(time.Minute))
	want := "and run: ctoken-sqlite rearm -db " + path + " -table ctoken_replay -fence 1h0m0s"
	if !errors.Is(err, sqlitestore.ErrForgotten) || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("Claim after the file's replacement = %v; want ErrForgotten ending %q", err, want)
	}
}

// TestInspectRefusesAnInMemoryDatabase: no file, no store to inspect.
func TestInspectRefusesAnInMemoryDatabase(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	must(t, err)
	defer db.Close()
	if _, err := sqlitestore.Inspect(t.Context(), db, sqlitestore.Options{}); !errors.Is(err, sqlitestore.ErrConfig) || !strings.Contains(err.Error(), "open a file") {
		t.Fatalf("Inspect of :memory: = %v; want ErrConfig", err)
	}
}

// TestARunningStoresRefusalSurvivesARestart: an older copy renamed over
// the database while the application runs makes its store refuse; after
// a clean stop New refuses with the loss the store recorded, status
// prints that very refusal, and with the -wal and -shm deleted as it
// says, the printed command lifts it: New serves, fenced.
func TestARunningStoresRefusalSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	claims(t, path, "a")
	copyFile(t, path, path+".older")
	db := openApp(t, path)
	refusing := make(chan struct{}, 1)
	opts := sqlitestore.Options{Logger: discardLogger(), RecheckInterval: 10 * time.Millisecond, Observer: func(e replay.Event) {
		if e.Kind == replay.EventRefusing {
			select {
			case refusing <- struct{}{}:
			default:
			}
		}
	}}
	s, err := sqlitestore.New(t.Context(), db, opts)
	must(t, err)
	if first, err := s.Claim(t.Context(), "b", time.Now().Add(time.Hour)); !first || err != nil {
		t.Fatalf("Claim(b) = %v, %v; want first", first, err)
	}
	must(t, os.Rename(path+".older", path))
	<-refusing
	s.Close()
	must(t, db.Close())

	db = openApp(t, path)
	_, err = sqlitestore.New(t.Context(), db, sqlitestore.Options{Logger: discardLogger()})
	if !errors.Is(err, sqlitestore.ErrForgotten) || !strings.Contains(err.Error(), "found a loss, recorded in its sidecar") || !strings.Contains(err.Error(), "was deleted or replaced while the store ran") {
		t.Fatalf("New after the stop = %v; want ErrForgotten naming the loss the store found", err)
	}
	must(t, db.Close())
	code, out, _ := runCmd("status", "-db", path)
	if code != 1 || !strings.Contains(out, "New       refuses: "+err.Error()+"\n") || !strings.Contains(out, "a loss a running store found, at ") {
		t.Fatalf("status = %d:\n%s\nwant 1 and New's refusal %q", code, out, err)
	}
	for _, f := range []string{path + "-wal", path + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	args := command(t, err)
	if code, out, errOut := runCmd(args[1:]...); code != 0 || !strings.Contains(out, "re-armed") {
		t.Fatalf("%q = %d:\n%s%s\nwant 0 and re-armed", args, code, out, errOut)
	}
	s, err = start(t, openApp(t, path))
	if err != nil {
		t.Fatalf("after rearm, the application's start = %v; want it to serve", err)
	}
	if first, err := s.Claim(t.Context(), "b", time.Now().Add(time.Minute)); first {
		t.Fatalf("Claim(b) after rearm = %v, %v; want refused (fenced)", first, err)
	}
}

// TestStatusNamesAReaderThatHoldsTheWAL: after the application claimed
// while another process (the sqlite3 shell) held a read transaction
// open, status names the reader that holds the WAL; once the read ends,
// it names none.
func TestStatusNamesAReaderThatHoldsTheWAL(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("the sqlite3 shell is not installed (.ci/sqlite.sh installs it)")
	}
	path := filepath.Join(t.TempDir(), "app.db")
	db := openApp(t, path)
	s, err := start(t, db)
	must(t, err)
	shell := exec.Command("sqlite3", path)
	in, err := shell.StdinPipe()
	must(t, err)
	out, err := shell.StdoutPipe()
	must(t, err)
	must(t, shell.Start())
	t.Cleanup(func() { in.Close(); shell.Wait() })
	if _, err := io.WriteString(in, "BEGIN;\nSELECT 'reading', count(*) FROM ctoken_replay;\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "reading") {
		t.Fatalf("the sqlite3 shell's read = %q, %v", line, err)
	}
	for i := range 20 {
		if first, err := s.Claim(t.Context(), fmt.Sprint("c-", i), time.Now().Add(time.Hour)); err != nil || !first {
			t.Fatalf("Claim = %v, %v; want first", first, err)
		}
	}
	// status runs in this process: no connection of it stays on the file.
	s.Close()
	must(t, db.Close())
	if code, stdout, _ := runCmd("status", "-db", path); code != 0 || !strings.Contains(stdout, "reader    a read transaction of another process holds the WAL") {
		t.Fatalf("status while another process reads = %d:\n%s\nwant 0 and a line naming the reader", code, stdout)
	}
	must(t, in.Close())
	must(t, shell.Wait())
	if code, stdout, _ := runCmd("status", "-db", path); code != 0 || strings.Contains(stdout, "reader ") {
		t.Fatalf("status once the read ended = %d:\n%s\nwant 0 and no reader", code, stdout)
	}
}
