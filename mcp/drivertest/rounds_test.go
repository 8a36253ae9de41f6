package drivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
)

// TestAnswersTheRetryOfALostRound: three instances of a server, each with
// a Store of its own on one key space (one SQLite file; the memory store:
// one store shared by the three), answer the retry of a round whose response was lost
// (mcptoken.States with AnswerRetries, the engine of both MCP
// integrations).
func TestAnswersTheRetryOfALostRound(t *testing.T) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	fleets := []struct {
		name   string
		stores func(t *testing.T) []replay.Store
	}{
		{"memory", func(*testing.T) []replay.Store {
			s := replay.NewMemoryStore(1 << 10)
			return []replay.Store{s, s, s}
		}},
		{"redis", func(t *testing.T) []replay.Store {
			var fleet []replay.Store
			for _, s := range redisFleet(t, 3) {
				fleet = append(fleet, s)
			}
			return fleet
		}},
		{"postgres", func(t *testing.T) []replay.Store {
			pool, prefix := pgPool(t), uniquePrefix()
			return []replay.Store{pgStoreAt(t, pool, prefix), pgStoreAt(t, pool, prefix), pgStoreAt(t, pool, prefix)}
		}},
		{"sqlite", func(t *testing.T) []replay.Store {
			db := sqliteDB(t)
			return []replay.Store{sqliteStore(t, db), sqliteStore(t, db), sqliteStore(t, db)}
		}},
	}
	for _, f := range fleets {
		t.Run(f.name, func(t *testing.T) {
			testAnswersTheRetryOfALostRound(t, keys, f.stores(t))
		})
	}
}

// recordStore is a replay store that records results.
type recordStore interface {
	replay.Store
	replay.Recorder
}

// confirmedRecords is a Recorder that keeps the ID and result of every
// record it confirms: what the store was given to hold.
type confirmedRecords struct {
	recordStore
	mu      sync.Mutex
	ids     []string
	results [][]byte
}

func (c *confirmedRecords) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	c.mu.Lock()
	c.ids, c.results = append(c.ids, id), append(c.results, bytes.Clone(result))
	c.mu.Unlock()
	return c.recordStore.ConfirmRecord(ctx, id, token, until, fp, result)
}

// only returns the one record confirmed.
func (c *confirmedRecords) only(t *testing.T) (string, []byte) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ids) != 1 {
		t.Fatalf("%d records confirmed; want one", len(c.ids))
	}
	return c.ids[0], c.results[0]
}

// answerRefused is the error of answerIntegration for a refusal.
type answerRefused struct{ r mcptoken.Refusal }

func (e *answerRefused) Error() string { return e.r.Message }

// answerIntegration reports a refusal as an *answerRefused.
var answerIntegration = &mcptoken.Integration{
	Name:     "fleet",
	NoCaller: func() error { return errors.New("no caller") },
	Refused:  func(r mcptoken.Refusal) error { return &answerRefused{r} },
}

func answerCode(err error) int {
	var re *answerRefused
	if !errors.As(err, &re) {
		return -1
	}
	return re.r.Code
}

// testAnswersTheRetryOfALostRound runs a continuation that answers its
// retry on three instances whose single-use codecs share the keys and the
// replay stores given (mcptoken.States with AnswerRetries, the engine of
// both MCP integrations): the round runs on instance 0 and is held; the
// same call on instance 1 is busy (1027, with a retry hint of at most a
// second); the round ends (its response lost); every store holds its
// result sealed, never in clear; the retry on instance 2 gets the same
// bytes without a second run; another caller and a changed argument are
// refused as invalid (1023) on every instance; a round that failed is
// already used (1026).
func testAnswersTheRetryOfALostRound(t *testing.T, keys *ctoken.Keyring, stores []replay.Store) {
	var states []*mcptoken.States
	var confirmed []*confirmedRecords
	for _, s := range stores {
		c := &confirmedRecords{recordStore: s.(recordStore)}
		confirmed = append(confirmed, c)
		codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keys, Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, TTL: time.Minute, Replay: c})
		if err != nil {
			t.Fatal(err)
		}
		st, err := mcptoken.NewStates(codec, mcptoken.StatesConfig{AnswerRetries: true}, answerIntegration)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, st)
	}
	ctx := context.Background()
	args := []byte(`{"service":"api"}`)
	wire, err := states[0].Seal("alice", "tools/call", "deploy", args, "confirmed")
	if err != nil {
		t.Fatal(err)
	}
	var effects atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	deploy := func(_ context.Context, state string) ([]byte, error) {
		close(entered)
		<-release
		return fmt.Appendf(nil, `{"deployed":%q,"deploy":%d}`, state, effects.Add(1)), nil
	}
	ran := func(context.Context, string) ([]byte, error) {
		effects.Add(1)
		return nil, errors.New("ran twice")
	}
	var lost []byte
	done := make(chan error, 1)
	go func() {
		var err error
		lost, err = states[0].Answer(ctx, "alice", "tools/call", "deploy", args, wire, deploy)
		done <- err
	}()
	<-entered
	_, err = states[1].Answer(ctx, "alice", "tools/call", "deploy", args, wire, ran)
	var busy *answerRefused
	if !errors.As(err, &busy) || busy.r.Code != mcptoken.CodeStateBusy || busy.r.RetryAfter <= 0 || busy.r.RetryAfter > time.Second {
		t.Fatalf("the same call during the round: %v; want busy, with a hint in (0, 1s]", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// What the store was given to record, and holds (read back as every
	// instance's store answers it), is sealed: no byte of the result
	// shows through.
	id, record := confirmed[0].only(t)
	if len(record) <= len(lost) || bytes.Contains(record, lost) || bytes.Contains(record, []byte(`"deployed"`)) {
		t.Fatalf("recorded %q; want the result sealed", record)
	}
	for i, s := range stores {
		rec, err := s.(replay.Recorder).AcquireRecord(ctx, id, time.Minute, make([]byte, 32))
		if err != nil || rec.State != replay.LeaseDone || !bytes.Equal(rec.Result, record) {
			t.Fatalf("store %d holds %+v (%v); want the sealed record", i, rec, err)
		}
	}
	for i, st := range states {
		again, err := st.Answer(ctx, "alice", "tools/call", "deploy", args, wire, ran)
		if err != nil || string(again) != string(lost) {
			t.Fatalf("retry on instance %d: %q, %v; want %q", i, again, err, lost)
		}
		if _, err := st.Answer(ctx, "bob", "tools/call", "deploy", args, wire, ran); answerCode(err) != mcptoken.CodeStateInvalid {
			t.Fatalf("another caller on instance %d: %v", i, err)
		}
		if _, err := st.Answer(ctx, "alice", "tools/call", "deploy", []byte(`{"service":"db"}`), wire, ran); answerCode(err) != mcptoken.CodeStateInvalid {
			t.Fatalf("a changed argument on instance %d: %v", i, err)
		}
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("%d deploys", n)
	}
	failed, err := states[0].Seal("alice", "tools/call", "deploy", args, "fails")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := states[1].Answer(ctx, "alice", "tools/call", "deploy", args, failed, func(context.Context, string) ([]byte, error) {
		return nil, errors.New("deploy failed")
	}); err == nil || answerCode(err) != -1 {
		t.Fatalf("the failing round: %v", err)
	}
	if _, err := states[2].Answer(ctx, "alice", "tools/call", "deploy", args, failed, ran); answerCode(err) != mcptoken.CodeStateUsed {
		t.Fatalf("the retry of a failed round: %v; want already used", err)
	}
}
