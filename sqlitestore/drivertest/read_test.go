package drivertest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// readStore is a store on a fresh file whose checker and sweeper stay
// still, so that nothing but the test's calls writes to the file.
func readStore(t *testing.T, d Driver) (*sqlitestore.Store, *sql.DB, string) {
	t.Helper()
	db, path := openMigrated(t, d)
	return mustStore(t, db, sqlitestore.Options{RecheckInterval: time.Hour, SweepInterval: -1}), db, path
}

// files returns the bytes of the database file and of its WAL.
func files(t *testing.T, path string) (db, wal []byte) {
	t.Helper()
	return readFile(t, path), readFile(t, path+"-wal")
}

// pollCaller is the caller pollTasks's tasks are bound to.
const pollCaller = "alice"

// taskPoll is a tasks/get poll: of the task id, on ts, that reports status.
type taskPoll struct {
	name, status, id string
	ts               *mcptoken.Tasks
}

// get polls p's task, and says how its answer differs from p's status.
func (p taskPoll) get() error {
	if st, err := p.ts.Get(context.Background(), pollCaller, p.id); err != nil || st.Status != p.status {
		return fmt.Errorf("Get = %q, %v; want %s", st.Status, err, p.status)
	}
	return nil
}

// pollTasks returns the polls of two of pollCaller's tasks on Tasks of s
// that touch the store only when called (PollInterval an hour: no look
// for a cancel; Hold 10 minutes: no renewal within a test or a
// benchmark): "working", whose tool waits for its context, polled on the
// instance running it (one read: its entry) and on another instance
// ("working-elsewhere": its entry and its first round's), and
// "completed". When tb ends, before s closes, the working task is
// cancelled and the Tasks shut down.
func pollTasks(tb testing.TB, s *sqlitestore.Store) []taskPoll {
	tb.Helper()
	ctx := context.Background()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(tb, err)
	wait := mcptoken.TaskTool{Name: "wait", Run: func(ctx context.Context, _ *mcptoken.TaskCall) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}}
	answer := mcptoken.TaskTool{Name: "answer", Run: func(context.Context, *mcptoken.TaskCall) (json.RawMessage, error) {
		return json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`), nil
	}}
	instance := func() *mcptoken.Tasks {
		ts, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: s, PollInterval: time.Hour, Hold: 10 * time.Minute, Logger: slog.New(slog.DiscardHandler)})
		must(tb, err)
		for _, tool := range []mcptoken.TaskTool{wait, answer} {
			must(tb, ts.Add(tool))
		}
		return ts
	}
	// The completed task runs on an instance of its own, whose Shutdown
	// returns once its outcome is recorded; ts answers for it as any
	// instance of a fleet (the same keys and store) does.
	fin := instance()
	done, err := fin.Create(ctx, answer, &mcptoken.TaskCall{Caller: pollCaller})
	if err != nil {
		tb.Fatalf("Create of the completed task: %v", err)
	}
	if err := fin.Shutdown(ctx); err != nil {
		tb.Fatalf("Shutdown after the completed task: %v", err)
	}
	ts, other := instance(), instance()
	working, err := ts.Create(ctx, wait, &mcptoken.TaskCall{Caller: pollCaller})
	if err != nil {
		tb.Fatalf("Create of the working task: %v", err)
	}
	tb.Cleanup(func() {
		if err := ts.Cancel(ctx, pollCaller, working.ID); err != nil {
			tb.Errorf("Cancel: %v", err)
		}
		if err := ts.Shutdown(ctx); err != nil {
			tb.Errorf("Shutdown: %v", err)
		}
	})
	polls := []taskPoll{
		{"working", "working", working.ID, ts},
		{"working-elsewhere", "working", working.ID, other},
		{"completed", "completed", done.ID, ts},
	}
	for _, p := range polls {
		must(tb, p.get())
	}
	return polls
}

// TestReadsWriteNothing: 100 reads leave the database file and its WAL
// byte for byte as they were (no frame appended, none rewritten):
// ReadRecord of a free ID, of a live lease and of a done entry with its
// record, reading what AcquireRecord then finds (and the lease is still
// its holder's), and polls (Tasks.Get) of a working task, on the
// instance running it and on another, and of a completed one.
func TestReadsWriteNothing(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		s, _, path := readStore(t, d)
		fp, result := []byte("fingerprint"), bytes.Repeat([]byte("r"), 10_000)
		l, err := s.AcquireRecord(ctx, "leased", time.Minute, fp)
		if err != nil || l.State != replay.LeaseAcquired {
			t.Fatal(l.Lease, err)
		}
		dn, err := s.AcquireRecord(ctx, "done", time.Minute, fp)
		if err != nil || dn.State != replay.LeaseAcquired {
			t.Fatal(dn.Lease, err)
		}
		must(t, s.ConfirmRecord(ctx, "done", dn.Token, time.Now().Add(time.Hour), fp, result))
		type read struct {
			name string
			read func() error
		}
		var reads []read
		for _, tc := range []struct {
			id     string
			want   replay.LeaseState
			result []byte
		}{
			{"free", replay.LeaseFree, nil},
			{"leased", replay.LeaseBusy, nil},
			{"done", replay.LeaseDone, result},
		} {
			reads = append(reads, read{"ReadRecord of " + tc.id, func() error {
				if r, err := s.ReadRecord(ctx, tc.id); err != nil || r.State != tc.want || !bytes.Equal(r.Result, tc.result) {
					return fmt.Errorf("ReadRecord(%q) = %v with %d result bytes, %v; want %v with %d", tc.id, r.State, len(r.Result), err, tc.want, len(tc.result))
				}
				return nil
			}})
		}
		for _, p := range pollTasks(t, s) {
			reads = append(reads, read{"poll of " + p.name, p.get})
		}
		for _, r := range reads {
			t.Run(r.name, func(t *testing.T) {
				dbBefore, walBefore := files(t, path)
				for range 100 {
					must(t, r.read())
				}
				dbAfter, walAfter := files(t, path)
				if !bytes.Equal(walBefore, walAfter) {
					t.Errorf("the WAL changed over 100 reads (%s): %d bytes before, %d after", r.name, len(walBefore), len(walAfter))
				}
				if !bytes.Equal(dbBefore, dbAfter) {
					t.Errorf("the database file changed over 100 reads (%s)", r.name)
				}
			})
		}
		if err := s.RenewLease(ctx, "leased", l.Token, time.Minute); err != nil {
			t.Fatalf("RenewLease after the reads: %v", err)
		}
	})
}

// TestReadRecordChecksTheMarker: a read checks the table's marker in its
// own snapshot, as a write checks it in its transaction, so a database
// that forgot acknowledged claims (the marker deleted, another
// incarnation, the sequence gone back) or is fenced is refused with
// ErrUnavailable, never read as free, before the store's next check.
func TestReadRecordChecksTheMarker(t *testing.T) {
	tests := []struct {
		name, tamper string
		forgotten    bool
	}{
		{"marker deleted", `DELETE FROM ctoken_replay WHERE key = x'0000'`, true},
		{"another incarnation", `UPDATE ctoken_replay SET token = 'another' WHERE key = x'0000'`, true},
		{"fenced", `UPDATE ctoken_replay SET until = 9223372036854775807 WHERE key = x'0000'`, false},
		{"sequence gone back", `UPDATE ctoken_replay SET seq = 0 WHERE key = x'0000'`, true},
		{"rows gone with the marker", `DELETE FROM ctoken_replay`, true},
	}
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				s, db, _ := readStore(t, d)
				claimAll(t, s, []string{"a"}, time.Now().Add(time.Hour))
				mustExec(t, ctx, db, tc.tamper)
				for _, id := range []string{"a", "never-claimed"} {
					r, err := s.ReadRecord(ctx, id)
					if !errors.Is(err, sqlitestore.ErrUnavailable) || errors.Is(err, sqlitestore.ErrForgotten) != tc.forgotten || r.State != 0 {
						t.Fatalf("ReadRecord(%q) after %q = %v, %v; want ErrUnavailable (ErrForgotten: %v)", id, tc.tamper, r.State, err, tc.forgotten)
					}
				}
			})
		}
	})
}
