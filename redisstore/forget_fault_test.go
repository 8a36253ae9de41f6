//go:build fault

package redisstore

import (
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// fenceHorizon is the store horizon of the fence tests: short, so a test
// waits the fence out, and longer than every claim (ttl + directMargin).
const fenceHorizon = 3 * time.Second

// fenceCfg is the fence tests' workload: IDs living 2 s, held 0.5 s more.
var fenceCfg = wlConfig{workers: 24, ttl: 2 * time.Second, lease: time.Second, timeout: 2 * time.Second}

// TestStoreThatForgets runs issue 26's workload (fenceCfg) against one
// Redis without persistence and makes Redis lose everything mid-load (a
// SIGKILL and restart, or FLUSHALL), every token and delivery sent again
// right after. No token is accepted twice and no delivery processed twice;
// the store reports the loss and refuses (ErrFenced) until the fence's end
// it reports, at most one horizon, and accepts new tokens after it.
func TestStoreThatForgets(t *testing.T) {
	tests := []struct {
		name    string
		disrupt func(t *testing.T, rp *server)
	}{
		{"restart without persistence", func(t *testing.T, rp *server) { rp.restart(syscall.SIGKILL) }},
		{"FLUSHALL", func(t *testing.T, rp *server) { mustDo(t, rp.addr(), "FLUSHALL") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rp := newServer(t)
			var raised, fenced atomic.Int64
			opts := Options{
				Prefix: randomPrefix(), Timeout: 2 * time.Second, Horizon: fenceHorizon,
				Observer: func(e replay.Event) {
					switch e.Kind {
					case replay.EventFenceRaised:
						raised.Add(1)
					case replay.EventFenced:
						fenced.Add(1)
					}
				},
			}
			stores := []*Store{faultStoreWith(t, rp.client(), opts), faultStoreWith(t, rp.client(), opts)}
			wl := newDirectWorkload(t, fenceCfg, stores)
			wl.start()
			time.Sleep(time.Second)
			m0 := wl.mark()
			before := time.Now()
			tt.disrupt(t, rp)
			lost := time.Now()
			waitFor(t, 5*time.Second, "a fence raised after the loss", func() bool { return raised.Load() != 0 })
			raisedAt := time.Now()
			during := wl.recheck(0) // one pass, no retry: inside the fence
			inFence := time.Now()
			time.Sleep(time.Until(raisedAt.Add(fenceHorizon + 1500*time.Millisecond)))
			wl.stop()
			r := wl.recheck(5 * time.Second)
			first, last, back := wl.fenceWindow(before)
			t.Logf("%s: %d tokens accepted before the loss; Redis lost everything at +%v, fence raised %v later; recheck inside the fence took %v: %d of %d token redeems and delivery copies refused",
				tt.name, m0.accepts, lost.Sub(wl.began).Round(time.Millisecond), raisedAt.Sub(lost).Round(time.Millisecond),
				inFence.Sub(raisedAt).Round(time.Millisecond), during.undecided, 2*(during.tokens+during.deliveries))
			t.Logf("%s: fenced refusals from +%v to +%v after the loss, %v apart (horizon %v); service back (a token accepted) %v after the loss; %d fences raised, %d fenced refusals",
				tt.name, first.Sub(lost).Round(time.Millisecond), last.Sub(lost).Round(time.Millisecond), last.Sub(first).Round(time.Millisecond),
				fenceHorizon, back.Sub(lost).Round(time.Millisecond), raised.Load(), fenced.Load())
			t.Logf("%s: %v", tt.name, r)
			logReasons(t, r)
			if r.acceptedTwice != 0 || r.processedTwice != 0 {
				t.Fatalf("%d tokens accepted twice, %d deliveries processed twice; want 0", r.acceptedTwice, r.processedTwice)
			}
			if raised.Load() == 0 || fenced.Load() == 0 {
				t.Fatalf("the store reported %d fences raised and %d fenced refusals, want both > 0", raised.Load(), fenced.Load())
			}
			if during.undecided == 0 {
				t.Fatal("the recheck inside the fence was never refused: it ran after the fence, or the loss was not seen")
			}
			if n := wl.refusedBefore(before); n != 0 {
				t.Fatalf("%d redeems refused before the loss", n)
			}
			if first.IsZero() {
				t.Fatal("no redeem refused as fenced")
			}
			// Each fence's end is the store's (replay.RetryAt, by Redis's
			// clock), so the bounds below hold however slowly the machine
			// answers: a fence rises before its first refusal's reply and
			// refuses nothing sent after it ends. clockSlack covers the
			// rounding of Redis's TIME against time.Now.
			const clockSlack = 50 * time.Millisecond
			spans := wl.fenceSpans(before)
			if len(spans) == 0 {
				t.Fatal("no fenced refusal carried its fence's end (replay.RetryAt)")
			}
			for end, sp := range spans {
				switch {
				case end.After(sp.firstReply.Add(fenceHorizon + clockSlack)):
					t.Fatalf("a fence ends %v after its first refusal, want within one horizon (%v)", end.Sub(sp.firstReply), fenceHorizon)
				case sp.lastSent.After(end.Add(clockSlack)):
					t.Fatalf("a redeem sent %v after its fence ended was refused as fenced", sp.lastSent.Sub(end))
				}
			}
			if back.IsZero() {
				t.Fatal("no token accepted after the fence opened")
			}
		})
	}
}
