package redisstore

import (
	"context"
	"crypto/fips140"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// TestScriptDigestsAreSHA1 checks the EVALSHA names against the
// scripts. Under GODEBUG=fips140=only crypto/sha1 refuses to run (the reason
// the digests are constants), so there the test asserts that refusal instead.
func TestScriptDigestsAreSHA1(t *testing.T) {
	for _, s := range []script{claimLua, acquireLua, confirmLua, renewLua, releaseLua, cancelLua, acquireRecordLua, confirmRecordLua, readRecordLua} {
		got, refused := sha1Hex(s.src)
		if refused {
			if !fips140.Enabled() {
				t.Fatal("crypto/sha1 refused to run outside FIPS 140-3 mode")
			}
			continue
		}
		if got != s.sha {
			t.Errorf("script digest %s, want SHA-1 %s of\n%s", s.sha, got, s.src)
		}
	}
}

func sha1Hex(src string) (digest string, refused bool) {
	defer func() {
		if recover() != nil {
			refused = true
		}
	}()
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:]), false
}

// TestRedisClock pins that expiry is judged by Redis's clock, not the
// instance's.
func TestRedisClock(t *testing.T) {
	subtests(t, []subtest{
		{"instance two minutes behind", instanceTwoMinutesBehindRefusesAndNeverAcceptsTwice},
		{"until past by redis clock", untilPastByRedisClockIsRefusedAsExpired},
		{"refusal reports the clock the call sent", lagRefusalReportsTheClockTheCallSent},
	})
}

// An instance whose clock runs 2 minutes behind Redis's would accept a
// token whose claim Redis has already let expire (it still thinks the
// token live). It is refused — at Open, and at every claim, lease and
// record step of a Store from New, each with an event — writes nothing
// and never accepts an ID twice.
func instanceTwoMinutesBehindRefusesAndNeverAcceptsTwice(t *testing.T) {
	good, c := newTestStore(t)
	behind := func() time.Time { return time.Now().Add(-2 * time.Minute) }
	ctx := context.Background()

	if _, err := Open(ctx, c, Options{Prefix: good.Prefix(), Now: behind}); !errors.Is(err, ErrClockSkew) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open with a clock 2 minutes behind = %v; want ErrClockSkew", err)
	}
	var ev events
	lag := mustNew(t, c, Options{Prefix: good.Prefix(), Now: behind, Observer: ev.observe})
	lag.checked.Store(true) // as if its clock had jumped back after the checks passed

	// The good instance redeems a token and holds the claim a short while
	// (its expiry plus margin); Redis lets the claim expire.
	wantClaim(t, good, "tok", time.Now().Add(200*time.Millisecond), true)
	time.Sleep(300 * time.Millisecond)
	// The lagging instance still sees the token as live, and would claim it
	// for its own expiry plus margin: refused.
	for _, id := range []string{"tok", "fresh"} {
		first, err := lag.Claim(ctx, id, behind().Add(time.Minute))
		if first || !errors.Is(err, ErrClockSkew) || Reason(err) != whySkew {
			t.Fatalf("claim of %s from the lagging instance = %v, %v; want ErrClockSkew", id, first, err)
		}
		if l, err := lag.AcquireLease(ctx, id, time.Minute); !errors.Is(err, ErrClockSkew) || l.State != 0 {
			t.Fatalf("acquire of %s from the lagging instance = %+v, %v; want ErrClockSkew", id, l, err)
		}
		if r, err := lag.AcquireRecord(ctx, id, time.Minute, []byte("fp")); !errors.Is(err, ErrClockSkew) || Reason(err) != whySkew || r.State != 0 {
			t.Fatalf("AcquireRecord of %s from the lagging instance = %+v, %v; want ErrClockSkew", id, r, err)
		}
	}
	wantErr(t, lag.ConfirmRecord(ctx, "fresh", newToken(), behind().Add(time.Hour), []byte("fp"), []byte("result")), ErrClockSkew, "ConfirmRecord from the lagging instance")
	if n := ev.count(replay.EventClockSkew); n != 7 {
		t.Fatalf("%d clock_skew events, want one per refused step (7)", n)
	}
	wantNoKeys(t, c, "entry left by the refused steps", good.key("fresh"))
	// The good instance is unaffected.
	wantClaim(t, good, "fresh", time.Now().Add(time.Minute), true)
}

// An instance behind by less than MaxSkew is served, but an until that has
// already passed by Redis's clock is refused as expired, by a claim and
// by a record's confirmation, never recorded as first (Redis would record
// nothing for it).
func untilPastByRedisClockIsRefusedAsExpired(t *testing.T) {
	c := newTestClient(t)
	s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c),
		Now: func() time.Time { return time.Now().Add(-30 * time.Second) }})
	ctx := context.Background()
	first, err := s.Claim(ctx, "late", time.Now().Add(-20*time.Second))
	if first || !errors.Is(err, ErrInvalidClaim) || !errors.Is(err, replay.ErrExpired) || Reason(err) != whyPastRedis {
		t.Fatalf("claim past by Redis's clock = %v, %v; want ErrInvalidClaim and ErrExpired", first, err)
	}
	err = s.ConfirmRecord(ctx, "p", newToken(), time.Now().Add(-20*time.Second), []byte("fp"), []byte("result"))
	if !errors.Is(err, ErrInvalidClaim) || !errors.Is(err, replay.ErrExpired) || Reason(err) != whyPastRedis {
		t.Fatalf("ConfirmRecord past by Redis's clock = %v; want ErrInvalidClaim and ErrExpired", err)
	}
	wantClaim(t, s, "live", time.Now().Add(time.Minute), true)
}

// A claim refused as lagging reports how far the clock it sent was behind
// Redis's when the script ran, not the instance's clock once the reply is
// in: here the clock lags 2 minutes until the script's reply arrives (as a
// call that waited that long in transit would see), and the refusal says
// 2 minutes, not 0.
func lagRefusalReportsTheClockTheCallSent(t *testing.T) {
	good, _ := newTestStore(t)
	var lagging atomic.Bool
	lagging.Store(true)
	hooked := newTestClient(t)
	// Only the claim's own script ends the lag: the background checks
	// (the rights check is an EVAL too) may run before it.
	hooked.AddHook(cmdHook{after: func(cmd redis.Cmder) {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && strings.Contains(fmt.Sprint(cmd.Args()...), "late") {
			lagging.Store(false)
		}
	}})
	lag := closing(t, mustNew(t, hooked, Options{Prefix: good.Prefix(), Logger: quietLogger(), Now: func() time.Time {
		if lagging.Load() {
			return time.Now().Add(-2 * time.Minute)
		}
		return time.Now()
	}}))
	lag.checked.Store(true) // as if its clock had jumped back after the checks passed
	first, err := lag.Claim(context.Background(), "late", time.Now().Add(time.Minute))
	if first || !errors.Is(err, ErrClockSkew) || !strings.Contains(err.Error(), "behind by 2m0") {
		t.Fatalf("claim sent with a clock 2 minutes behind = %v, %v; want ErrClockSkew behind by 2m0…", first, err)
	}
}
