package mcptoken

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// idemKeys seal the recorded results of the tests' idempotent tools.
var idemKeys = func() *ctoken.Keyring {
	kr, err := ctoken.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		panic(err)
	}
	return kr
}()

// testIdempotency returns an Idempotency on a fresh memory store with key
// argument "key" and _meta keys accepted, changed by edit.
func testIdempotency(t testing.TB, log *bytes.Buffer, edit func(*IdempotencyConfig)) *Idempotency {
	t.Helper()
	cfg := IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(1000), KeyArgument: "key", KeyFromMeta: true, Lease: 2 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	i, err := NewIdempotency(cfg, testIntegration(log))
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// counted returns a RunFunc answering a result that names how many times
// it ran, and the counter.
func counted() (RunFunc, *atomic.Int32) {
	var n atomic.Int32
	return func(context.Context) ([]byte, error) {
		return []byte(fmt.Sprintf(`{"content":[{"type":"text","text":"run %d"}]}`, n.Add(1))), nil
	}, &n
}

func TestIdempotency(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"replays the first result to the same caller", idempotencyReplaysTheFirstResultToTheSameCaller},
		{"refuses a changed call under a used key", idempotencyRefusesAChangedCallUnderAUsedKey},
		{"scopes keys to the caller and the tool", idempotencyScopesKeysToTheCallerAndTheTool},
		{"answers a concurrent duplicate", idempotencyAnswersAConcurrentDuplicate},
		{"releases the key when the tool fails", idempotencyReleasesTheKeyWhenTheToolFails},
		{"a tool with no effect frees its key", idempotencyToolWithNoEffectFreesItsKey},
		{"logs once what it records", idempotencyLogsOnceWhatItRecords},
		{"a caller gone before the call runs nothing", idempotencyCallerGoneBeforeTheCallRunsNothing},
		{"refuses missing and malformed keys", idempotencyRefusesMissingAndMalformedKeys},
		{"refuses an empty caller", idempotencyRefusesAnEmptyCaller},
		{"new idempotency refuses bad config", newIdempotencyRefusesBadConfig},
		{"store failures", idempotencyStoreFailures},
		{"transactional outcomes", idempotencyTransactionalOutcomes},
		{"answers of stores outside the contract", idempotencyAnswersOfStoresOutsideTheContract},
		{"seals recorded results", idempotencySealsRecordedResults},
		{"wait ends when the caller goes away", idempotencyWaitEndsWhenTheCallerGoesAway},
		{"transactional with a work acquirer", idempotencyTransactionalWithAWorkAcquirer},
	} {
		t.Run(tc.name, tc.test)
	}
}

func idempotencyReplaysTheFirstResultToTheSameCaller(t *testing.T) {
	cases := []struct {
		name          string
		first, second string
		meta1, meta2  any
	}{
		{"key argument", `{"key":"k-1","amount":5}`, `{"amount":5,"key":"k-1"}`, nil, nil},
		{"key in _meta", `{"amount":5}`, ` { "amount" : 5 } `, "k-1", "k-1"},
		{"same key in both", `{"key":"k-1","amount":5}`, `{"amount":5}`, "k-1", "k-1"},
		{"argument then _meta", `{"key":"k-1","amount":5}`, `{"amount":5}`, nil, "k-1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			i := testIdempotency(t, &bytes.Buffer{}, nil)
			run, n := counted()
			r1, err := i.Call(context.Background(), "alice", "pay", []byte(c.first), c.meta1, run)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := i.Call(context.Background(), "alice", "pay", []byte(c.second), c.meta2, run)
			if err != nil {
				t.Fatal(err)
			}
			if n.Load() != 1 || !bytes.Equal(r1, r2) {
				t.Fatalf("ran %d times; first %q, retry %q", n.Load(), r1, r2)
			}
		})
	}
}

func idempotencyRefusesAChangedCallUnderAUsedKey(t *testing.T) {
	var log bytes.Buffer
	i := testIdempotency(t, &log, nil)
	run, n := counted()
	if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k-4b1d","amount":5}`), nil, run); err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{`{"key":"k-4b1d","amount":6}`, `{"key":"k-4b1d"}`, `{"key":"k-4b1d","amount":5,"to":"bob"}`} {
		t.Run(args, func(t *testing.T) {
			_, err := i.Call(context.Background(), "alice", "pay", []byte(args), nil, run)
			if !errors.Is(err, ErrKeyReused) {
				t.Fatalf("err = %v, want ErrKeyReused", err)
			}
		})
	}
	if n.Load() != 1 {
		t.Fatalf("ran %d times", n.Load())
	}
	// Refused keys reach the log (slog.Default when none is set), never
	// the key itself.
	i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k 4b1d"}`), nil, run)
	if got := log.String(); strings.Count(got, "level=WARN msg=\"test: idempotent call refused: idempotency key reused") != 3 ||
		!strings.Contains(got, "refused: missing or malformed idempotency key") || strings.Contains(got, "4b1d") {
		t.Fatalf("log %q", got)
	}
}

func idempotencyScopesKeysToTheCallerAndTheTool(t *testing.T) {
	i := testIdempotency(t, &bytes.Buffer{}, nil)
	run, n := counted()
	args := []byte(`{"key":"k","amount":5}`)
	for _, c := range []struct{ caller, tool string }{{"alice", "pay"}, {"bob", "pay"}, {"alice", "refund"}, {"alice\x00", "pay"}} {
		t.Run(c.caller+"/"+c.tool, func(t *testing.T) {
			before := n.Load()
			if _, err := i.Call(context.Background(), c.caller, c.tool, args, nil, run); err != nil {
				t.Fatal(err)
			}
			if n.Load() != before+1 {
				t.Fatal("another caller's or tool's key did not run the tool")
			}
		})
	}
	if storeIDOfCall("a", "bc", "k") == storeIDOfCall("ab", "c", "k") {
		t.Fatal("store IDs of different triples collide")
	}
}

func idempotencyAnswersAConcurrentDuplicate(t *testing.T) {
	for _, wait := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprintf("wait %v", wait), func(t *testing.T) {
			i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.Wait = wait })
			started, finish := make(chan struct{}), make(chan struct{})
			var n atomic.Int32
			run := func(context.Context) ([]byte, error) {
				n.Add(1)
				close(started)
				<-finish
				return []byte(`{"content":[]}`), nil
			}
			args := []byte(`{"key":"k"}`)
			var wg sync.WaitGroup
			wg.Add(1)
			var first []byte
			go func() {
				defer wg.Done()
				first, _ = i.Call(context.Background(), "alice", "pay", args, nil, run)
			}()
			<-started
			if wait == 0 {
				_, err := i.Call(context.Background(), "alice", "pay", args, nil, run)
				d, ok := RetryAfter(err)
				if !errors.Is(err, ErrInProgress) || !ok || d <= 0 || d > time.Second {
					t.Fatalf("err = %v, retry after %v", err, d)
				}
				close(finish)
				wg.Wait()
			} else {
				time.AfterFunc(50*time.Millisecond, func() { close(finish) })
				got, err := i.Call(context.Background(), "alice", "pay", args, nil, run)
				wg.Wait()
				if err != nil || !bytes.Equal(got, first) {
					t.Fatalf("waiting duplicate got %q, %v; first %q", got, err, first)
				}
			}
			if n.Load() != 1 {
				t.Fatalf("ran %d times", n.Load())
			}
		})
	}
}

func idempotencyReleasesTheKeyWhenTheToolFails(t *testing.T) {
	i := testIdempotency(t, &bytes.Buffer{}, nil)
	boom := errors.New("boom")
	var n atomic.Int32
	run := func(context.Context) ([]byte, error) {
		if n.Add(1) == 1 {
			return nil, boom
		}
		return []byte(`{"content":[]}`), nil
	}
	args := []byte(`{"key":"k"}`)
	if _, err := i.Call(context.Background(), "alice", "pay", args, nil, run); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the tool's", err)
	}
	if _, err := i.Call(context.Background(), "alice", "pay", args, nil, run); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 2 {
		t.Fatalf("ran %d times, want 2 (the failure released the key)", n.Load())
	}
	t.Run("a failure after the tool began is recorded and replayed", func(t *testing.T) {
		var runs atomic.Int32
		failed := func(context.Context) ([]byte, error) {
			runs.Add(1)
			return nil, &Failure{Record: []byte(`{"m":"charged, then failed"}`), Err: boom}
		}
		args := []byte(`{"key":"f"}`)
		if _, err := i.Call(context.Background(), "alice", "pay", args, nil, failed); !errors.Is(err, boom) {
			t.Fatalf("err = %v, want the tool's", err)
		}
		for range 2 {
			_, err := i.Call(context.Background(), "alice", "pay", args, nil, failed)
			var f *Failure
			if !errors.As(err, &f) || f.Err != nil || string(f.Record) != `{"m":"charged, then failed"}` {
				t.Fatalf("the retry: %v; want the recorded Failure", err)
			}
		}
		if runs.Load() != 1 {
			t.Fatalf("ran %d times, want 1", runs.Load())
		}
		if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"f","cents":1}`), nil, failed); !errors.Is(err, ErrKeyReused) {
			t.Fatalf("other arguments under the key of a failure: %v; want ErrKeyReused", err)
		}
	})
	t.Run("panic", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic was swallowed")
			}
			if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"p"}`), nil, run); err != nil {
				t.Fatalf("the key was not released after a panic: %v", err)
			}
		}()
		i.Call(context.Background(), "alice", "pay", []byte(`{"key":"p"}`), nil, func(context.Context) ([]byte, error) { panic("tool") })
	})
}

// idempotencyToolWithNoEffectFreesItsKey: a tool whose database refused
// the connection says ErrNoEffect; nothing is recorded, the caller is told
// when to retry, and the same key then runs it once: one effect.
func idempotencyToolWithNoEffectFreesItsKey(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*IdempotencyConfig)
	}{
		{"recorded calls", nil},
		{"transactional calls", func(c *IdempotencyConfig) {
			c.Store = &fakeTx{MemoryStore: replay.NewMemoryStore(10)}
			c.Transactional = true
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := testIdempotency(t, &bytes.Buffer{}, c.edit)
			refused := errors.New("dial tcp: connection refused")
			var runs, effects atomic.Int32
			run := func(context.Context) ([]byte, error) {
				if runs.Add(1) == 1 {
					return nil, fmt.Errorf("%w: %w", ErrNoEffect, refused)
				}
				return []byte(fmt.Sprintf(`{"content":[],"effect":%d}`, effects.Add(1))), nil
			}
			args := []byte(`{"key":"k-down","amount":5}`)
			_, err := i.Call(context.Background(), "alice", "pay", args, nil, run)
			if !errors.Is(err, ErrNoEffect) || !errors.Is(err, refused) {
				t.Fatalf("err = %v; want ErrNoEffect around the cause", err)
			}
			if d, ok := RetryAfter(err); !ok || d != defaultBusyRetryAfter {
				t.Fatalf("RetryAfter = %v, %v; want the hint of a busy key", d, ok)
			}
			for range 2 { // the retry runs it; the next replays it
				res, err := i.Call(context.Background(), "alice", "pay", args, nil, run)
				if err != nil || string(res) != `{"content":[],"effect":1}` {
					t.Fatalf("%s, %v", res, err)
				}
			}
			if runs.Load() != 2 || effects.Load() != 1 {
				t.Fatalf("ran %d times, %d effects; want 2 and 1", runs.Load(), effects.Load())
			}
		})
	}
}

// idempotencyLogsOnceWhatItRecords: a failure recorded for every retry,
// and a key freed for one, are logged once each with the tool, never the
// key; the retries that replay the failure log nothing more.
func idempotencyLogsOnceWhatItRecords(t *testing.T) {
	var log bytes.Buffer
	i := testIdempotency(t, &log, nil)
	failed := func(context.Context) ([]byte, error) {
		return nil, &Failure{Record: []byte(`charged, then failed`), Err: errors.New("charged, then failed")}
	}
	for range 3 {
		i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k-c4f3"}`), nil, failed)
	}
	noEffect := func(context.Context) ([]byte, error) { return nil, fmt.Errorf("%w: down", ErrNoEffect) }
	i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k-d0w9"}`), nil, noEffect)
	got := log.String()
	if n := strings.Count(got, "its failure is recorded"); n != 1 {
		t.Fatalf("the recorded failure logged %d times: %s", n, got)
	}
	if n := strings.Count(got, "the tool had no effect: nothing recorded"); n != 1 {
		t.Fatalf("the freed key logged %d times: %s", n, got)
	}
	if strings.Count(got, "tool=pay") != 2 || strings.Contains(got, "k-c4f3") || strings.Contains(got, "k-d0w9") {
		t.Fatalf("want the tool twice and no key: %s", got)
	}
}

// ctxBlindRecorder is a store that takes a lease whatever its context:
// the engine, not the store, must see that the caller has gone.
type ctxBlindRecorder struct{ *replay.MemoryStore }

func (s ctxBlindRecorder) AcquireRecord(_ context.Context, id string, d time.Duration, fp []byte) (replay.Record, error) {
	return s.MemoryStore.AcquireRecord(context.Background(), id, d, fp)
}

// idempotencyCallerGoneBeforeTheCallRunsNothing: a call whose context
// ended before it reached Call runs nothing, takes nothing and records
// nothing, even on a store that would take the lease.
func idempotencyCallerGoneBeforeTheCallRunsNothing(t *testing.T) {
	mem := replay.NewMemoryStore(10)
	var log bytes.Buffer
	i := testIdempotency(t, &log, func(c *IdempotencyConfig) { c.Store = ctxBlindRecorder{mem} })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	run, n := counted()
	if _, err := i.Call(ctx, "alice", "pay", []byte(`{"key":"k"}`), nil, run); !errors.Is(err, ErrIdempotencyStore) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want ErrIdempotencyStore around the context's end", err)
	}
	if n.Load() != 0 || mem.Len() != 0 || strings.Contains(log.String(), "level=ERROR") {
		t.Fatalf("ran %d times, store holds %d entries; log %s", n.Load(), mem.Len(), log.String())
	}
	if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run); err != nil || n.Load() != 1 {
		t.Fatalf("the same key afterwards: %v, ran %d times", err, n.Load())
	}
}

func idempotencyRefusesMissingAndMalformedKeys(t *testing.T) {
	cases := []struct {
		name string
		args string
		meta any
	}{
		{"no key", `{"amount":5}`, nil},
		{"no arguments", ``, nil},
		{"empty key", `{"key":""}`, nil},
		{"too long", `{"key":"` + strings.Repeat("z", 256) + `"}`, nil},
		{"space", `{"key":"zz zz"}`, nil},
		{"comma", `{"key":"zz,zz"}`, nil},
		{"non-ASCII", `{"key":"zzé"}`, nil},
		{"control byte", `{"key":"zz\u0001"}`, nil},
		{"number", `{"key":5}`, nil},
		{"meta not a string", `{}`, 5},
		{"argument and meta differ", `{"key":"a"}`, "b"},
		{"arguments not an object", `[1]`, nil},
		{"arguments not JSON", `{`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			i := testIdempotency(t, &log, nil)
			run, n := counted()
			_, err := i.Call(context.Background(), "alice", "pay", []byte(c.args), c.meta, run)
			if !errors.Is(err, ErrIdempotencyKey) || n.Load() != 0 {
				t.Fatalf("err = %v, ran %d", err, n.Load())
			}
			if strings.Contains(err.Error(), "zz") {
				t.Fatal("the error holds the key")
			}
		})
	}
	t.Run("NonIdempotentWithoutKey runs an unkeyed call each time", func(t *testing.T) {
		var log bytes.Buffer
		i := testIdempotency(t, &log, func(c *IdempotencyConfig) { c.NonIdempotentWithoutKey = true })
		run, n := counted()
		for range 2 {
			if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"amount":5}`), nil, run); err != nil {
				t.Fatal(err)
			}
		}
		if n.Load() != 2 || strings.Count(log.String(), "NonIdempotentWithoutKey") != 3 {
			t.Fatalf("ran %d times; log %s", n.Load(), log.String())
		}
		if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":""}`), nil, run); !errors.Is(err, ErrIdempotencyKey) {
			t.Fatalf("a malformed key ran: %v", err)
		}
	})
	t.Run("meta ignored unless KeyFromMeta", func(t *testing.T) {
		i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.KeyFromMeta = false })
		run, n := counted()
		if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{}`), "k", run); !errors.Is(err, ErrIdempotencyKey) || n.Load() != 0 {
			t.Fatalf("err = %v", err)
		}
	})
}

func idempotencyRefusesAnEmptyCaller(t *testing.T) {
	i := testIdempotency(t, &bytes.Buffer{}, nil)
	run, n := counted()
	if _, err := i.Call(context.Background(), "", "pay", []byte(`{"key":"k"}`), nil, run); !errors.Is(err, errTestNoCaller) || n.Load() != 0 {
		t.Fatalf("err = %v, ran %d", err, n.Load())
	}
}

func newIdempotencyRefusesBadConfig(t *testing.T) {
	mem := replay.NewMemoryStore(10)
	cases := []struct {
		name string
		cfg  IdempotencyConfig
	}{
		{"no keys", IdempotencyConfig{Store: mem, KeyArgument: "key"}},
		{"zero keyring", IdempotencyConfig{Keys: &ctoken.Keyring{}, Store: mem, KeyArgument: "key"}},
		{"no store", IdempotencyConfig{Keys: idemKeys, KeyArgument: "key"}},
		{"no key source", IdempotencyConfig{Keys: idemKeys, Store: mem}},
		{"negative lease", IdempotencyConfig{Keys: idemKeys, Store: mem, KeyArgument: "key", Lease: -1}},
		{"negative wait", IdempotencyConfig{Keys: idemKeys, Store: mem, KeyArgument: "key", Wait: -1}},
		{"window not over lease", IdempotencyConfig{Keys: idemKeys, Store: mem, KeyArgument: "key", Window: time.Minute}},
		{"wait not under lease", IdempotencyConfig{Keys: idemKeys, Store: mem, KeyArgument: "key", Wait: time.Minute}},
		{"key cap too large", IdempotencyConfig{Keys: idemKeys, Store: mem, KeyArgument: "key", MaxKeyBytes: 5000}},
		{"transactional memory store", IdempotencyConfig{Keys: idemKeys, Store: mem, KeyArgument: "key", Transactional: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := NewIdempotency(c.cfg, testIntegration(&bytes.Buffer{})); !errors.Is(err, ctoken.ErrConfig) {
				t.Fatalf("err = %v, want ErrConfig", err)
			}
		})
	}
	t.Run("incomplete integration", func(t *testing.T) {
		if _, err := NewIdempotency(IdempotencyConfig{Keys: idemKeys, Store: mem, KeyArgument: "key"}, &Integration{}); err == nil {
			t.Fatal("accepted")
		}
	})
	t.Run("zero Idempotency refuses", func(t *testing.T) {
		run, n := counted()
		if _, err := new(Idempotency).Call(context.Background(), "a", "t", nil, "k", run); !errors.Is(err, ErrIdempotencyStore) || n.Load() != 0 {
			t.Fatalf("err = %v", err)
		}
	})
}

// failingRecorder fails every call with err.
type failingRecorder struct {
	replay.Recorder
	acquire, confirm error
}

func (s failingRecorder) AcquireRecord(ctx context.Context, id string, d time.Duration, fp []byte) (replay.Record, error) {
	if s.acquire != nil {
		return replay.Record{}, s.acquire
	}
	return s.Recorder.AcquireRecord(ctx, id, d, fp)
}

func (s failingRecorder) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	if s.confirm != nil {
		return s.confirm
	}
	return s.Recorder.ConfirmRecord(ctx, id, token, until, fp, result)
}

func idempotencyStoreFailures(t *testing.T) {
	t.Run("acquire fails: nothing runs, nothing taken", func(t *testing.T) {
		mem := replay.NewMemoryStore(10)
		var log bytes.Buffer
		i := testIdempotency(t, &log, func(c *IdempotencyConfig) { c.Store = failingRecorder{Recorder: mem, acquire: errors.New("down")} })
		run, n := counted()
		if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run); !errors.Is(err, ErrIdempotencyStore) || n.Load() != 0 {
			t.Fatalf("err = %v, ran %d", err, n.Load())
		}
		if mem.Len() != 0 || strings.Contains(log.String(), `"k"`) {
			t.Fatalf("store holds %d entries; log %s", mem.Len(), log.String())
		}
	})
	t.Run("result too large: retries refused, never run again", func(t *testing.T) {
		i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) {
			c.Store = failingRecorder{Recorder: replay.NewMemoryStore(10), confirm: replay.ErrTooLarge}
		})
		// The first confirm is refused for its size; the marker is refused
		// too by this store, so the key stays leased: busy, not run.
		run, n := counted()
		if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run); err != nil {
			t.Fatal(err)
		}
		if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run); !errors.Is(err, ErrInProgress) || n.Load() != 1 {
			t.Fatalf("err = %v, ran %d", err, n.Load())
		}
	})
	t.Run("result over MaxResultBytes: retries get ErrNotRecorded", func(t *testing.T) {
		i := testIdempotency(t, &bytes.Buffer{}, nil)
		var n atomic.Int32
		big := func(context.Context) ([]byte, error) {
			n.Add(1)
			return bytes.Repeat([]byte(" "), replay.MaxResultBytes+1), nil
		}
		if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, big); err != nil {
			t.Fatal(err)
		}
		if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, big); !errors.Is(err, ErrNotRecorded) || n.Load() != 1 {
			t.Fatalf("err = %v, ran %d", err, n.Load())
		}
	})
}

// FuzzIdempotencyExtract: no input panics; a key that is accepted is one
// checkIdempotencyKey accepts, and the arguments without it fingerprint.
func FuzzIdempotencyExtract(f *testing.F) {
	f.Add([]byte(`{"key":"k-1","amount":5}`), "")
	f.Add([]byte(`{"amount":5}`), "k")
	f.Add([]byte(`{"key":"a","key":"b"}`), "b")
	f.Add([]byte(`[]`), "")
	f.Add([]byte(`{"key":null}`), "")
	i := testIdempotency(f, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.NonIdempotentWithoutKey = true })
	f.Fuzz(func(t *testing.T, args []byte, meta string) {
		var m any
		if meta != "" {
			m = meta
		}
		key, rest, err := i.extract(args, m)
		if err != nil {
			if !errors.Is(err, ErrIdempotencyKey) {
				t.Fatalf("err = %v, want ErrIdempotencyKey", err)
			}
			return
		}
		if key != "" {
			if checkIdempotencyKey(key, DefaultMaxIdempotencyKeyBytes) != nil {
				t.Fatalf("accepted key %q", key)
			}
			var obj map[string]json.RawMessage
			if json.Unmarshal(rest, &obj) == nil {
				if _, ok := obj["key"]; ok {
					t.Fatalf("rest %q still holds the key argument", rest)
				}
			}
		}
	})
}

// fakeTx is a replay.Transactor over a memory store whose BeginWork and
// Commit fail as told; a Commit that does not fail confirms the record.
type fakeTx struct {
	*replay.MemoryStore
	begin, commit error
	rolledBack    atomic.Int32
}

type fakeWork struct {
	tx        *fakeTx
	id, token string
}

type fakeTxKey struct{}

func (f *fakeTx) BeginWork(ctx context.Context, id, token string) (replay.Work, error) {
	if f.begin != nil {
		return nil, f.begin
	}
	return &fakeWork{tx: f, id: id, token: token}, nil
}

func (w *fakeWork) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, fakeTxKey{}, w)
}

func (w *fakeWork) Commit(ctx context.Context, until time.Time, fp, result []byte) error {
	if w.tx.commit != nil {
		return w.tx.commit
	}
	return w.tx.ConfirmRecord(ctx, w.id, w.token, until, fp, result)
}

func (w *fakeWork) Rollback(context.Context) error {
	w.tx.rolledBack.Add(1)
	return nil
}

func idempotencyTransactionalOutcomes(t *testing.T) {
	cases := []struct {
		name       string
		begin      error
		commit     error
		toolErr    bool
		wantErr    error
		retryRuns  bool // the key was released: a retry runs the tool
		rolledBack int32
	}{
		{"committed: the retry is replayed", nil, nil, false, nil, false, 0},
		{"begin fails: nothing runs, key released", errors.New("down"), nil, false, ErrIdempotencyStore, true, 0},
		{"tool fails: rolled back, key released", nil, nil, true, nil, true, 1},
		{"tool fails after it began: rolled back, key released, not recorded", nil, nil, true, nil, true, 1},
		{"rolled back by the store: key released", nil, fmt.Errorf("x: %w", replay.ErrRolledBack), false, ErrIdempotencyStore, true, 0},
		{"lease lost: refused, result not returned", nil, replay.ErrLeaseLost, false, ErrIdempotencyStore, false, 0},
		{"unknown outcome: told so, key left leased", nil, errors.New("connection lost during COMMIT"), false, ErrOutcomeUnknown, false, 0},
	}
	boom := errors.New("tool")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx := &fakeTx{MemoryStore: replay.NewMemoryStore(100), begin: c.begin, commit: c.commit}
			i := testIdempotency(t, &bytes.Buffer{}, func(cfg *IdempotencyConfig) { cfg.Store = tx; cfg.Transactional = true })
			var runs atomic.Int32
			run := func(ctx context.Context) ([]byte, error) {
				runs.Add(1)
				if ctx.Value(fakeTxKey{}) == nil {
					t.Error("the tool's context carries no transaction")
				}
				if c.toolErr && runs.Load() == 1 {
					if strings.Contains(c.name, "after it began") {
						return nil, &Failure{Record: []byte("x"), Err: boom}
					}
					return nil, boom
				}
				return []byte(`{"content":[]}`), nil
			}
			res, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run)
			switch {
			case c.toolErr && !errors.Is(err, boom):
				t.Fatalf("err = %v, want the tool's", err)
			case !c.toolErr && c.wantErr == nil && err != nil:
				t.Fatal(err)
			case c.wantErr != nil && (!errors.Is(err, c.wantErr) || res != nil):
				t.Fatalf("err = %v, result %q", err, res)
			}
			// Only an unknown outcome is one, and it says when a retry
			// learns it: the lease, taken apart from the transaction
			// (BeginWork), ends within the 2 s of testIdempotency.
			if unknown := errors.Is(err, ErrOutcomeUnknown); unknown != (c.wantErr == ErrOutcomeUnknown) || errors.Is(err, ErrIdempotencyStore) && unknown {
				t.Fatalf("err = %v: outcome unknown %v", err, unknown)
			}
			if d, ok := RetryAfter(err); c.wantErr == ErrOutcomeUnknown && (!ok || d <= 0 || d > 2*time.Second) {
				t.Fatalf("RetryAfter(%v) = %v, %v; want the lease's remainder", err, d, ok)
			}
			tx.begin, tx.commit = nil, nil
			before := runs.Load()
			_, err = i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run)
			ran := runs.Load() > before
			if ran != c.retryRuns {
				t.Fatalf("the retry ran: %v (err %v), want %v", ran, err, c.retryRuns)
			}
			if !ran && c.wantErr != nil && !errors.Is(err, ErrInProgress) {
				t.Fatalf("the retry of a leased key: %v, want ErrInProgress", err)
			}
			if tx.rolledBack.Load() != c.rolledBack {
				t.Fatalf("%d rollbacks, want %d", tx.rolledBack.Load(), c.rolledBack)
			}
		})
	}
}

func idempotencyAnswersOfStoresOutsideTheContract(t *testing.T) {
	t.Run("done without a record", func(t *testing.T) {
		mem := replay.NewMemoryStore(10)
		i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.Store = mem })
		if _, err := mem.Claim(context.Background(), storeIDOfCall("alice", "pay", "k"), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		run, n := counted()
		if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run); !errors.Is(err, ErrNotRecorded) || n.Load() != 0 {
			t.Fatalf("err = %v, ran %d", err, n.Load())
		}
	})
	t.Run("confirm fails: the result is returned, the key runs again after its lease", func(t *testing.T) {
		var log bytes.Buffer
		i := testIdempotency(t, &log, func(c *IdempotencyConfig) {
			c.Store = failingRecorder{Recorder: replay.NewMemoryStore(10), confirm: replay.ErrExpired}
		})
		run, n := counted()
		if res, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run); err != nil || res == nil || n.Load() != 1 {
			t.Fatalf("%q, %v", res, err)
		}
		if !strings.Contains(log.String(), "not recorded") {
			t.Fatalf("not logged: %s", log.String())
		}
	})
}

// recordingStore keeps the last result confirmed, and can replace what
// AcquireRecord reports as the result of a done ID.
type recordingStore struct {
	replay.Recorder
	mu      sync.Mutex
	last    []byte
	replace func([]byte) []byte
}

func (s *recordingStore) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	s.mu.Lock()
	s.last = append([]byte(nil), result...)
	s.mu.Unlock()
	return s.Recorder.ConfirmRecord(ctx, id, token, until, fp, result)
}

func (s *recordingStore) AcquireRecord(ctx context.Context, id string, d time.Duration, fp []byte) (replay.Record, error) {
	rec, err := s.Recorder.AcquireRecord(ctx, id, d, fp)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && rec.State == replay.LeaseDone && s.replace != nil {
		rec.Result = s.replace(rec.Result)
	}
	return rec, err
}

func idempotencySealsRecordedResults(t *testing.T) {
	secret := `{"content":[{"type":"text","text":"card 4242 4242 4242 4242"}]}`
	other, err := ctoken.NewKeyring([]byte("fedcba9876543210fedcba9876543210"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		replace func(stored []byte) []byte
		keys    *ctoken.Keyring // the keys of the retry's server
		want    error
	}{
		{"authentic record: replayed", nil, idemKeys, nil},
		{"rotated: the previous key still opens", nil, nil, nil},
		{"one bit flipped", func(b []byte) []byte { c := bytes.Clone(b); c[len(c)-1] ^= 1; return c }, idemKeys, ErrNotRecorded},
		{"in clear", func([]byte) []byte { return []byte(secret) }, idemKeys, ErrNotRecorded},
		{"truncated", func(b []byte) []byte { return b[:10] }, idemKeys, ErrNotRecorded},
		{"another call's record", func([]byte) []byte { return nil }, idemKeys, ErrNotRecorded},
		{"sealed under a key no longer in the ring", nil, other, ErrNotRecorded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := &recordingStore{Recorder: replay.NewMemoryStore(100)}
			i := testIdempotency(t, &bytes.Buffer{}, func(cfg *IdempotencyConfig) { cfg.Store = store })
			var n atomic.Int32
			run := func(context.Context) ([]byte, error) { n.Add(1); return []byte(secret), nil }
			if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run); err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(store.last, []byte("4242")) {
				t.Fatal("the store holds the result in clear")
			}
			if c.name == "another call's record" {
				// the record of another caller's call, moved under this ID
				i.Call(context.Background(), "bob", "pay", []byte(`{"key":"k"}`), nil, run)
				moved := store.last
				c.replace = func([]byte) []byte { return moved }
			}
			store.replace = c.replace
			keys := c.keys
			if keys == nil {
				if keys, err = ctoken.NewKeyring([]byte("fedcba9876543210fedcba9876543210"), []byte("0123456789abcdef0123456789abcdef")); err != nil {
					t.Fatal(err)
				}
			}
			retry := testIdempotency(t, &bytes.Buffer{}, func(cfg *IdempotencyConfig) { cfg.Store = store; cfg.Keys = keys })
			before := n.Load()
			res, err := retry.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run)
			if n.Load() != before {
				t.Fatal("the tool ran again")
			}
			if c.want == nil {
				if err != nil || string(res) != secret {
					t.Fatalf("%q, %v", res, err)
				}
				return
			}
			if !errors.Is(err, c.want) || res != nil {
				t.Fatalf("%q, %v; want %v", res, err, c.want)
			}
		})
	}
}

// FuzzRecordOpen: no record panics the opener, and only a record sealed
// for the same store ID and fingerprint opens, to the sealed result.
func FuzzRecordOpen(f *testing.F) {
	s, ok := newRecordSealer(idemKeys)
	if !ok {
		f.Fatal("no sealer")
	}
	good, err := s.seal("id", []byte("fp"), []byte(`{"content":[]}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, "id", []byte("fp"))
	f.Add(good[:recordOverhead], "id", []byte("fp"))
	f.Add([]byte{1, 0, 0, 0, 0}, "", []byte(nil))
	f.Fuzz(func(t *testing.T, record []byte, id string, fp []byte) {
		pt, err := s.open(id, fp, record)
		if err != nil {
			if !errors.Is(err, errRecordForged) || pt != nil {
				t.Fatalf("%q, %v", pt, err)
			}
			return
		}
		// Only a record sealed here (the seeds; each fuzz worker seals its
		// own, under a fresh nonce) opens, for its ID and fingerprint.
		if id != "id" || string(fp) != "fp" || string(pt) != `{"content":[]}` {
			t.Fatalf("opened %q for id %q fp %q", pt, id, fp)
		}
	})
}

func idempotencyWaitEndsWhenTheCallerGoesAway(t *testing.T) {
	var log bytes.Buffer
	i := testIdempotency(t, &log, func(c *IdempotencyConfig) { c.Wait = time.Second })
	started, finish := make(chan struct{}), make(chan struct{})
	defer close(finish)
	go i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, func(context.Context) ([]byte, error) {
		close(started)
		<-finish
		return []byte(`{"content":[]}`), nil
	})
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	run, n := counted()
	if _, err := i.Call(ctx, "alice", "pay", []byte(`{"key":"k"}`), nil, run); !errors.Is(err, ErrIdempotencyStore) || n.Load() != 0 {
		t.Fatalf("err = %v, ran %d", err, n.Load())
	}
	if strings.Contains(log.String(), "level=ERROR") {
		t.Fatalf("a caller going away was logged as a store failure: %s", log.String())
	}
}

// fakeAcquirer is a fakeTx that is also a replay.WorkAcquirer: AcquireWork
// takes the memory store's lease and returns a Work whose Rollback frees
// it, as a store whose lease is the transaction.
type fakeAcquirer struct {
	*fakeTx
	noWork    bool // acquired without a Work
	extraWork bool // a Work with a busy or done answer
	extra     atomic.Int32
	releases  atomic.Int32
}

type heldWork struct{ fakeWork }

func (w *heldWork) Rollback(ctx context.Context) error {
	w.tx.rolledBack.Add(1)
	return w.tx.MemoryStore.ReleaseLease(ctx, w.id, w.token)
}

func (f *fakeAcquirer) ReleaseLease(ctx context.Context, id, token string) error {
	f.releases.Add(1)
	return f.MemoryStore.ReleaseLease(ctx, id, token)
}

func (f *fakeAcquirer) AcquireWork(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, replay.Work, error) {
	rec, err := f.MemoryStore.AcquireRecord(ctx, id, lease, fp)
	switch {
	case err != nil:
		return rec, nil, err
	case rec.State != replay.LeaseAcquired && f.extraWork:
		f.extra.Add(1)
		return rec, &heldWork{fakeWork{tx: f.fakeTx, id: id}}, nil
	case rec.State != replay.LeaseAcquired || f.noWork:
		return rec, nil, nil
	}
	return rec, &heldWork{fakeWork{tx: f.fakeTx, id: id, token: rec.Token}}, nil
}

// idempotencyTransactionalWithAWorkAcquirer: with a store that takes
// the lease in the work's transaction, the call runs in the Work
// AcquireWork returned (never BeginWork), a failed tool frees the ID by
// the Work's Rollback alone (no ReleaseLease), an acquired answer without
// a Work is refused without running the tool, and a Work given with a
// done answer is rolled back.
func idempotencyTransactionalWithAWorkAcquirer(t *testing.T) {
	boom := errors.New("tool")
	tests := []struct {
		name       string
		store      func(*fakeAcquirer)
		toolErr    bool
		wantErr    error
		runs       int32 // of the call and its retry
		rolledBack int32
	}{
		{"committed: the retry is replayed", nil, false, nil, 1, 0},
		{"tool fails: rolled back, which frees the ID", nil, true, boom, 2, 1},
		{"acquired without a Work: refused, nothing runs", func(f *fakeAcquirer) { f.noWork = true }, false, ErrIdempotencyStore, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &fakeAcquirer{fakeTx: &fakeTx{MemoryStore: replay.NewMemoryStore(100), begin: errors.New("BeginWork must not be called")}}
			if tt.store != nil {
				tt.store(st)
			}
			i := testIdempotency(t, &bytes.Buffer{}, func(cfg *IdempotencyConfig) { cfg.Store = st; cfg.Transactional = true })
			var runs atomic.Int32
			run := func(ctx context.Context) ([]byte, error) {
				if runs.Add(1) == 1 && tt.toolErr {
					return nil, boom
				}
				if ctx.Value(fakeTxKey{}) == nil {
					t.Error("the tool's context carries no transaction")
				}
				return []byte(`{"content":[]}`), nil
			}
			if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run); !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run)
			if runs.Load() != tt.runs || st.rolledBack.Load() != tt.rolledBack || st.releases.Load() != 0 {
				t.Fatalf("runs %d, rollbacks %d, releases %d; want %d, %d, 0", runs.Load(), st.rolledBack.Load(), st.releases.Load(), tt.runs, tt.rolledBack)
			}
		})
	}
	t.Run("an unknown outcome says a retry learns it within a second", func(t *testing.T) {
		// The lease was committed or not with the work: no need to wait
		// for the lease to end.
		st := &fakeAcquirer{fakeTx: &fakeTx{MemoryStore: replay.NewMemoryStore(100), commit: errors.New("connection lost during COMMIT")}}
		i := testIdempotency(t, &bytes.Buffer{}, func(cfg *IdempotencyConfig) {
			cfg.Store, cfg.Transactional, cfg.Lease = st, true, time.Hour
		})
		run, _ := counted()
		_, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run)
		if d, ok := RetryAfter(err); !errors.Is(err, ErrOutcomeUnknown) || !ok || d != time.Second {
			t.Fatalf("err = %v, RetryAfter %v, %v; want ErrOutcomeUnknown after 1s", err, d, ok)
		}
	})
	t.Run("a Work given with a done answer is rolled back", func(t *testing.T) {
		st := &fakeAcquirer{fakeTx: &fakeTx{MemoryStore: replay.NewMemoryStore(100)}}
		i := testIdempotency(t, &bytes.Buffer{}, func(cfg *IdempotencyConfig) { cfg.Store = st; cfg.Transactional = true })
		run, n := counted()
		first, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run)
		if err != nil {
			t.Fatal(err)
		}
		st.extraWork = true
		again, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k"}`), nil, run)
		if err != nil || !bytes.Equal(again, first) || n.Load() != 1 {
			t.Fatalf("retry = %q, %v (runs %d); want the replay", again, err, n.Load())
		}
		if st.extra.Load() != 1 || st.rolledBack.Load() != 1 {
			t.Fatalf("%d Works given, %d rolled back; want 1 and 1", st.extra.Load(), st.rolledBack.Load())
		}
	})
}

// TestMetaKeyOf: the key comes from the reverse-DNS member, else from the
// legacy one (read until 1.0); two different keys are refused by Call.
func TestMetaKeyOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		meta map[string]any
		want any
	}{
		{"none", nil, nil},
		{"the member", map[string]any{MetaIdempotencyKey: "k"}, "k"},
		{"the legacy member", map[string]any{LegacyMetaIdempotencyKey: "k"}, "k"},
		{"both, the same", map[string]any{MetaIdempotencyKey: "k", LegacyMetaIdempotencyKey: "k"}, "k"},
	} {
		if got := MetaKeyOf(tc.meta); got != tc.want {
			t.Errorf("%s: MetaKeyOf = %v; want %v", tc.name, got, tc.want)
		}
	}
	i := testIdempotency(t, &bytes.Buffer{}, func(cfg *IdempotencyConfig) { cfg.KeyFromMeta = true })
	run, n := counted()
	args := []byte(`{"amount":1}`)
	for _, meta := range []map[string]any{{LegacyMetaIdempotencyKey: "k"}, {MetaIdempotencyKey: "k"}} {
		if _, err := i.Call(context.Background(), "alice", "pay", args, MetaKeyOf(meta), run); err != nil {
			t.Fatal(err)
		}
	}
	if n.Load() != 1 {
		t.Fatalf("ran %d times; want 1: the legacy member and the new one carry the same key", n.Load())
	}
	_, err := i.Call(context.Background(), "alice", "pay", args, MetaKeyOf(map[string]any{MetaIdempotencyKey: "k", LegacyMetaIdempotencyKey: "j"}), run)
	if !errors.Is(err, ErrIdempotencyKey) || n.Load() != 1 {
		t.Fatalf("two different keys: %v; want ErrIdempotencyKey", err)
	}
}
