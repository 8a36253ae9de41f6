package redisstore

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/webhook"
	"github.com/redis/go-redis/v9"
)

// TestWebhook pins what Redis adds to the webhook contract
// (TestStore: copies across instances handled once, a failed
// delivery handled again on the other): a busy Redis releases the late
// lease for the delivery's retry. (A Redis that is down or stopped
// processes nothing: TestLease/"fail closed", the webhook package's
// TestAcquireStoreFailureHasReasonAndWrapsStoreError, and the fault
// suite's TestPausedRedisFailsClosedWithinTimeout.)
func TestWebhook(t *testing.T) {
	subtests(t, []subtest{
		{"busy redis, late lease released", webhookBusyRedisLateLeaseIsReleasedAndRetryProcessed},
	})
}

// The busy-Redis case: Redis is busy for 600 ms, the store's
// timeout is 200 ms, the lease 5 s. The delivery is refused (503), and the
// acquire the store sent is executed when Redis recovers; the store then
// releases that lease in the background (its token was chosen before
// sending), so the sender's next retry is processed — exactly once, never
// acknowledged without processing — instead of waiting out the lease.
func webhookBusyRedisLateLeaseIsReleasedAndRetryProcessed(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	released := make(chan struct{}, 16)
	store := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Timeout: 200 * time.Millisecond,
		Observer: func(e replay.Event) {
			if e.Kind == replay.EventLeaseReleased {
				released <- struct{}{}
			}
		}})
	next := &countingHandler{}
	const lease = 5 * time.Second
	f := newWHFleet(t, store, 2, lease, next)
	// Load the scripts first, so the busy period meets the one command.
	if code, _ := f.send(0, "warm-up"); code != http.StatusNoContent {
		t.Fatalf("warm-up: status %d", code)
	}

	for round := range 2 {
		id := "busy-" + string(rune('a'+round))
		busy := busyRedis(t, 600*time.Millisecond)
		start := time.Now()
		code, _ := f.send(0, id)
		if code != http.StatusServiceUnavailable {
			t.Fatalf("round %d: delivery while Redis is busy: status %d, want 503", round, code)
		}
		if el := time.Since(start); el > 450*time.Millisecond {
			t.Fatalf("round %d: the refusal took %v, want about the 200ms store timeout", round, el)
		}
		<-busy
		select {
		case <-released:
		case <-time.After(3 * time.Second):
			t.Fatalf("round %d: the late lease was not released", round)
		}
		if time.Since(start) >= lease {
			t.Fatalf("round %d: released after %v, not before the lease ended", round, time.Since(start))
		}
		// The late acquire's lease is gone: the first retry is processed.
		if code, _ := f.send(1, id); code != http.StatusNoContent || next.processed(id) != 1 {
			t.Fatalf("round %d: retry after the release: status %d, processed %d times; want 204 after processing once", round, code, next.processed(id))
		}
		if code, _ := f.send(0, id); code != http.StatusOK || next.processed(id) != 1 {
			t.Fatalf("round %d: copy after processing: status %d, processed %d", round, code, next.processed(id))
		}
	}
}

const whSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// whFleet is n webhook receivers (verifiers) sharing one Redis store, and a
// sender.
type whFleet struct {
	t      *testing.T
	mws    []http.Handler
	signer *webhook.Signer
}

func newWHFleet(t *testing.T, store *Store, n int, lease time.Duration, next http.Handler) *whFleet {
	t.Helper()
	f := &whFleet{t: t}
	for range n {
		v, err := webhook.NewVerifier(webhook.Config{
			Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}, Replay: store, Namespace: "endpoint", Lease: lease,
		})
		must(t, err)
		f.mws = append(f.mws, v.Middleware(next))
	}
	s, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}})
	must(t, err)
	f.signer = s
	return f
}

// send delivers a copy of delivery id to instance i and returns the
// status and body.
func (f *whFleet) send(i int, id string) (int, string) {
	body := `{"event":"` + id + `"}`
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	if err := f.signer.Sign(req.Header, id, []byte(body)); err != nil {
		f.t.Error(err)
		return 0, ""
	}
	rec := httptest.NewRecorder()
	f.mws[i%len(f.mws)].ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// countingHandler counts processed deliveries by ID and answers 204.
type countingHandler struct {
	mu    sync.Mutex
	count map[string]int
}

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d, _ := webhook.DeliveryFrom(r.Context())
	h.mu.Lock()
	if h.count == nil {
		h.count = map[string]int{}
	}
	h.count[d.ID]++
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *countingHandler) processed(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count[id]
}

// busyRedis keeps the test Redis busy in a Lua loop for d (under Redis's
// busy-reply threshold, so other clients' commands wait rather than fail)
// and returns a channel closed when it is done. It returns once the loop
// runs.
func busyRedis(t *testing.T, d time.Duration) <-chan struct{} {
	t.Helper()
	// No read deadline: the loop ends by itself, and a spell of CPU time
	// (os.clock, on Valkey) takes several times as long on a loaded
	// machine.
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ReadTimeout: -1, MaxRetries: -1})
	// Valkey (8.0) freezes TIME for the length of a script, so a loop on
	// TIME would spin until the busy-reply threshold there; it has
	// os.clock (CPU time, which a spinning script spends at least as fast
	// as wall time), which Redis 7.0 lacks.
	const spin = `local ok, c0 = pcall(function() return os.clock() end)
if ok then
  repeat until os.clock() - c0 >= tonumber(ARGV[1]) / 1000000
  return 1
end
local t = redis.call('TIME')
local stop = t[1] * 1000000 + t[2] + tonumber(ARGV[1])
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop
return 1`
	done := make(chan struct{})
	started := make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close()
		close(started)
		if err := c.Eval(context.Background(), spin, nil, d.Microseconds()).Err(); err != nil {
			t.Errorf("busy loop: %v", err)
		}
	}()
	<-started
	// Let the script reach the server and start spinning.
	probe := redis.NewClient(&redis.Options{Addr: redisAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer probe.Close()
	// Three pings in a row that wait behind the script: one alone can be
	// late on a loaded machine before the script reached the server.
	for waited, deadline := 0, time.Now().Add(5*time.Second); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := probe.Ping(ctx).Err()
		cancel()
		if err == nil {
			waited = 0
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if waited++; waited == 3 { // the script is running
			return done
		}
	}
	t.Fatal("the busy loop never started")
	return nil
}
