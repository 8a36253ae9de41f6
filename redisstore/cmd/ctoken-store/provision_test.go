package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/redisstore"
)

// A restart of a Redis without persistence while no application runs,
// then the runbook followed literally: status says the history is
// unknown, when the server started and what provision does; provision
// without -new fences the key space for one lifetime (-horizon: the
// record was lost with the data) and exits 1 naming the fence's end;
// status then says FENCED and when reopening becomes safe; the earlier
// claims are refused until they expire, and Open serves once the fence
// ends, unattended.
func TestProvisionAfterAnUnwatchedRestartFences(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	const lifetime = 3 * time.Second
	if code, _, stderr := ctokenStore("provision", "-addr", srv.addr, "-prefix", "pay:", "-horizon", lifetime.String(), "-new"); code != 0 {
		t.Fatalf("provision -new = %d: %s", code, stderr)
	}
	opts := redisstore.Options{Prefix: "pay:", Logger: quiet(), Horizon: lifetime, MaxSkew: time.Second}
	app, err := redisstore.Open(ctx, srv.client(), opts)
	must(t, err)
	const n = 200
	until := time.Now().Add(lifetime - 100*time.Millisecond)
	for i := range n {
		wantFirst(t, app, fmt.Sprint("before-", i), until)
	}
	app.Close()
	srv.kill()
	srv.start()
	code, stdout, _ := ctokenStore("status", "-addr", srv.addr, "-prefix", "pay:", "-horizon", lifetime.String())
	wantOutput(t, "status after the restart", code, 0, stdout, "HISTORY UNKNOWN", "keeps no data across a restart and started",
		"`ctoken-store provision` fences it for one lifetime (3s, -horizon", "safe to serve from", "provision -new", "started ")
	t.Logf("status after the restart:\n%s", stdout)
	t0 := time.Now()
	code, _, stderr := ctokenStore("provision", "-addr", srv.addr, "-prefix", "pay:", "-horizon", lifetime.String())
	wantOutput(t, "provision after the restart", code, 1, stderr, "is fenced until", "history unknown")
	code, stdout, _ = ctokenStore("status", "-addr", srv.addr, "-prefix", "pay:")
	wantOutput(t, "status after provision", code, 0, stdout, "FENCED", "safe to reopen from", "history unknown", "64 fenced")
	waiting, err := redisstore.New(srv.client(), opts)
	must(t, err)
	defer waiting.Close()
	twice := 0
	for i := range n {
		if time.Now().After(until) {
			break
		}
		if first, err := waiting.Claim(ctx, fmt.Sprint("before-", i), until); first {
			twice++
		} else if !errors.Is(err, redisstore.ErrFenced) && !errors.Is(err, redisstore.ErrInvalidClaim) {
			t.Fatalf("claim of an earlier ID: %v", err)
		}
	}
	if twice != 0 {
		t.Fatalf("%d earlier IDs accepted twice after provision; want 0", twice)
	}
	for {
		s, err := redisstore.Open(ctx, srv.client(), opts)
		if err == nil {
			s.Close()
			break
		}
		if !errors.Is(err, redisstore.ErrFenced) || time.Since(t0) > lifetime+5*time.Second {
			t.Fatalf("Open %v after provision: %v", time.Since(t0), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if served := time.Since(t0); served < lifetime-100*time.Millisecond {
		t.Fatalf("Open served %v after provision; want one lifetime, %v", served, lifetime)
	}
}

// After a restart without persistence while no application ran, the key
// space's recorded lifetime is gone with its data: provision without
// -new and without -horizon refuses with exit 2, naming -horizon and
// -new, and writes nothing, rather than fence for the flag's default
// (25 h); status says the same instead of a "safe to serve from" computed
// from that default. With a recorded lifetime, -horizon is not needed.
func TestProvisionWithoutHorizonOnUnknownHistoryRefuses(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	if code, _, stderr := ctokenStore("provision", "-addr", srv.addr, "-prefix", "pay:", "-horizon", "3s", "-new"); code != 0 {
		t.Fatalf("provision -new = %d: %s", code, stderr)
	}
	app, err := redisstore.Open(ctx, srv.client(), redisstore.Options{Prefix: "pay:", Logger: quiet(), Horizon: 3 * time.Second, MaxSkew: time.Second})
	must(t, err)
	wantFirst(t, app, "before", time.Now().Add(2*time.Second))
	app.Close()
	srv.kill()
	srv.start()
	def := redisstore.DefaultHorizon.String()
	code, stdout, _ := ctokenStore("status", "-addr", srv.addr, "-prefix", "pay:")
	if code != 0 || !strings.Contains(stdout, "HISTORY UNKNOWN") || !strings.Contains(stdout, "needs -horizon <the longest lifetime") ||
		strings.Contains(stdout, "safe to serve from") || strings.Contains(stdout, def) {
		t.Fatalf("status without -horizon = %d:\n%s\nwant HISTORY UNKNOWN naming -horizon, no safe-to-serve instant, no %s", code, stdout, def)
	}
	code, _, stderr := ctokenStore("provision", "-addr", srv.addr, "-prefix", "pay:")
	wantOutput(t, "provision without -horizon", code, 2, stderr, "no lifetime recorded",
		"give -horizon <the longest lifetime of any claim under this prefix", "or -new if it never held claims", "nothing written")
	if n, err := srv.client().DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("provision that refused left %d keys (%v); want none written", n, err)
	}
	// A recorded lifetime is what provision fences for; -horizon is then
	// not needed.
	must(t, srv.client().Set(ctx, "pay:lifetime", "3000", 0).Err())
	code, _, stderr = ctokenStore("provision", "-addr", srv.addr, "-prefix", "pay:")
	wantOutput(t, "provision with a recorded lifetime", code, 1, stderr, "is fenced until", "(in 3s)")
}
