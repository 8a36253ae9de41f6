package redisstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// acquireRecord is AcquireRecord failing the test on an error or a state
// other than want.
func acquireRecord(t *testing.T, s *Store, id string, fp []byte, want replay.LeaseState) replay.Record {
	t.Helper()
	r, err := s.AcquireRecord(context.Background(), id, time.Minute, fp)
	if err != nil || r.State != want {
		t.Fatalf("AcquireRecord(%q) = %+v, %v; want %v", id, r, err, want)
	}
	return r
}

// TestRecord pins the record steps (AcquireRecord, ConfirmRecord, Replay)
// against the test Redis: the entry layout, resent steps, guards, releases
// and the staging and side keys they leave.
func TestRecord(t *testing.T) {
	subtests(t, []subtest{
		{"entry layout", recordEntryLayout},
		{"reads entries without a record", recordReadsEntriesWithoutARecord},
		{"plain steps on record entries", plainStepsOnRecordEntries},
		{"resent acquire keeps its lease", resentAcquireRecordKeepsItsRemainingLease},
		{"confirm past the horizon by redis clock", recordConfirmPastTheHorizonByRedisClockIsRefused},
		{"one slot scripts", recordStepsSendOneSlotScripts},
		{"fail closed", recordStepsFailClosed},
		{"unknown outcome released with its token", acquireRecordWithUnknownOutcomeIsReleasedWithItsToken},
		{"earlier layout still replays", recordOfTheEarlierLayoutStillReplays},
		{"confirm leaves no staging key", confirmRecordLeavesNoStagingKey},
		{"replay returns only its own side key", replayReturnsOnlyItsOwnLeasesSideKey},
		{"resent confirm keeps keys together", resentConfirmRecordKeepsSideKeyAndEntryExpiringTogether},
		{"bytes never pass through lua", recordBytesNeverPassThroughLua},
		{"steps wait for the implied AOF wait", recordStepsWaitForTheImpliedAOFWait},
	})
}

// The layout record.go documents, read back from Redis: the lease
// measured by Redis (PX); the done entry, a header of token, fingerprint,
// size and CRC-32C, and the side key, token + result, both at the
// absolute until (PXAT); no staging key left behind.
func recordEntryLayout(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	fp, result := []byte{0, 1, 2, 0xff}, []byte("res\x00ult")
	l := acquireRecord(t, s, "k", fp, replay.LeaseAcquired)
	if v, err := c.Get(ctx, s.key("k")).Result(); err != nil || v != "L"+l.Token+string(fp) {
		t.Fatalf("leased entry = %q, %v; want L + token + fingerprint", v, err)
	}
	if p, err := c.PTTL(ctx, s.key("k")).Result(); err != nil || p <= 59*time.Second || p > time.Minute {
		t.Fatalf("lease PTTL = %v, %v", p, err)
	}
	until := time.Now().Add(90 * time.Second).Truncate(time.Millisecond)
	must(t, s.ConfirmRecord(ctx, "k", l.Token, until, fp, result))
	want := "D" + l.Token + "\x84" + string(fp) + "\x00\x00\x00\x07" + string(binary.BigEndian.AppendUint32(nil, crc32.Checksum(result, crc32.MakeTable(crc32.Castagnoli))))
	side := s.tags[shardOf("k")] + "r:k"
	for _, k := range []struct{ key, want string }{{s.key("k"), want}, {side, l.Token + string(result)}} {
		if v, err := c.Get(ctx, k.key).Result(); err != nil || v != k.want {
			t.Fatalf("%s = %q, %v; want %q", k.key, v, err, k.want)
		}
		if got, err := c.Do(ctx, "PEXPIRETIME", k.key).Int64(); err != nil || got != until.UnixMilli() {
			t.Fatalf("PEXPIRETIME %s = %d, %v; want %d", k.key, got, err, until.UnixMilli())
		}
	}
	n := 0
	for _, k := range keysOf(t, c, s) {
		if strings.Contains(k, "{") { // not the store's ledger or servers
			n++
		}
	}
	if n != 2+Shards {
		t.Fatalf("%d keys of shards under the prefix; want the markers, the entry and the side key", n)
	}
}

// keysOf lists the keys under s's prefix that hold one of marks (every
// key when none is given).
func keysOf(t *testing.T, c *redis.Client, s *Store, marks ...string) []string {
	t.Helper()
	keys, err := c.Keys(context.Background(), s.Prefix()+"*").Result()
	must(t, err)
	if len(marks) == 0 {
		return keys
	}
	var out []string
	for _, k := range keys {
		for _, m := range marks {
			if strings.Contains(k, m) {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// wantNoKeys fails the test unless none of keys exists on c; what names
// them.
func wantNoKeys(t testing.TB, c *redis.Client, what string, keys ...string) {
	t.Helper()
	if n, err := c.Exists(context.Background(), keys...).Result(); err != nil || n != 0 {
		t.Fatalf("%s: %d exist, %v; want none", what, n, err)
	}
}

// Entries written without a record — by ConfirmLease, Claim, or older
// versions ("D" + token, "1" + nonce, "1") — read as done with an empty
// (nil) record; a lease without one as busy with a nil fingerprint. (This
// store's own Claim and ConfirmLease on them: the record kit's
// ClaimAndLeaseEntriesHaveEmptyRecord, in TestStore.)
func recordReadsEntriesWithoutARecord(t *testing.T) {
	s, c := newTestStore(t)
	tok := "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name, value string
		want        replay.LeaseState
	}{
		{"older confirmation", "D" + tok, replay.LeaseDone},
		{"claim with a nonce", "1" + "0011223344556677.1z", replay.LeaseDone},
		{"claim of an older version", "1", replay.LeaseDone},
		{"lease without a fingerprint", "L" + tok, replay.LeaseBusy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "old-" + tc.name
			must(t, c.Set(context.Background(), s.key(id), tc.value, time.Minute).Err())
			r := acquireRecord(t, s, id, []byte("fp"), tc.want)
			if r.Fingerprint != nil || r.Result != nil || r.Token != "" {
				t.Fatalf("record of %q = %+v; want empty", tc.value, r)
			}
		})
	}
}

// The plain steps read record entries by their first byte, and find the
// caller's own lease taken by AcquireRecord. (Releasing or confirming it,
// and the plain steps on a recorded ID: the record kit in TestStore.)
func plainStepsOnRecordEntries(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	fp, result := []byte("fp"), []byte("result")
	acquireRecord(t, s, "r", fp, replay.LeaseAcquired)
	acquireLease(t, s, "r", time.Minute, replay.LeaseBusy)
	wantClaim(t, s, "r", time.Now().Add(time.Hour), false)
	t.Run("ReleaseLease of another token keeps it", func(t *testing.T) {
		b := acquireRecord(t, s, "r2", fp, replay.LeaseAcquired)
		must(t, s.ReleaseLease(ctx, "r2", "0123456789abcdef0123456789abcdef"))
		acquireRecord(t, s, "r2", fp, replay.LeaseBusy)
		// Nor does a token that is a prefix of the entry's.
		must(t, s.ReleaseLease(ctx, "r2", b.Token[:31]+"g"))
		acquireRecord(t, s, "r2", fp, replay.LeaseBusy)
	})
	t.Run("done with a record", func(t *testing.T) {
		b := acquireRecord(t, s, "r4", fp, replay.LeaseAcquired)
		must(t, s.ConfirmRecord(ctx, "r4", b.Token, time.Now().Add(time.Hour), fp, result))
		// A plain confirmation of the same token is not this one: lost,
		// and the record stays.
		wantErr(t, s.ConfirmLease(ctx, "r4", b.Token, time.Now().Add(time.Hour)), replay.ErrLeaseLost, "ConfirmLease over a record")
		if d := acquireRecord(t, s, "r4", fp, replay.LeaseDone); !bytes.Equal(d.Result, result) {
			t.Fatal("ConfirmLease changed the record")
		}
	})
}

// A resent acquire writes its lease again (so the WAIT after it covers
// it), with its remaining time, not a fresh lease.
func resentAcquireRecordKeepsItsRemainingLease(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	token := "0123456789abcdef0123456789abcdef"
	if code, _, _, _, err := s.acquireRecord(ctx, "k", 60000, token, []byte("fp")); code != 1 || err != nil {
		t.Fatal(code, err)
	}
	must(t, c.PExpire(ctx, s.key("k"), 5*time.Second).Err())
	if code, _, _, _, err := s.acquireRecord(ctx, "k", 60000, token, []byte("fp")); code != 1 || err != nil {
		t.Fatalf("resent acquire = %d, %v; want 1", code, err)
	}
	if p, err := c.PTTL(ctx, s.key("k")).Result(); err != nil || p > 5*time.Second || p < 4*time.Second {
		t.Fatalf("PTTL after the resend = %v, %v; want the remaining 5 s", p, err)
	}
}

// An instance 30 s ahead passes its own check of an until 59m50s away;
// by Redis's clock it lies past the one-hour horizon: the record's
// confirmation is refused as the other steps are.
func recordConfirmPastTheHorizonByRedisClockIsRefused(t *testing.T) {
	fp := []byte("fp")
	c := newTestClient(t)
	ahead := func() time.Time { return time.Now().Add(30 * time.Second) }
	s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Now: ahead, Horizon: time.Hour})
	l := acquireRecord(t, s, "h", fp, replay.LeaseAcquired)
	if err := s.ConfirmRecord(context.Background(), "h", l.Token, ahead().Add(time.Hour-10*time.Second), fp, []byte("result")); !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyHorizon {
		t.Fatalf("ConfirmRecord past the horizon by Redis's clock = %v; want ErrInvalidClaim (%s)", err, whyHorizon)
	}
}

// recordingCommands is a scripted client answering the server checks, that
// records every other command and answers it with reply.
type recordingCommands struct {
	mu    sync.Mutex
	calls [][]any
}

func (r *recordingCommands) client(reply func(n int, args []any) (any, error)) Client {
	return answerChecks(func(ctx context.Context, args ...any) *redis.Cmd {
		r.mu.Lock()
		r.calls = append(r.calls, args)
		n := len(r.calls)
		r.mu.Unlock()
		cmd := redis.NewCmd(ctx, args...)
		v, err := reply(n, args)
		cmd.SetVal(v)
		cmd.SetErr(err)
		return cmd
	})
}

func (r *recordingCommands) get(i int) []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.calls) {
		return nil
	}
	return r.calls[i]
}

// Every record step is one script on the shard's marker and the ID's entry
// (and, for a confirmation, the staging and side keys), with a plain SET or
// GET of the record's bytes beside it, every key under one hash tag (one
// Redis Cluster slot); the script is loaded with EVAL after NOSCRIPT, and
// no script argument carries the result. A CROSSSLOT or MOVED answer is
// refused as unavailable.
func recordStepsSendOneSlotScripts(t *testing.T) {
	var rc recordingCommands
	s := mustNew(t, rc.client(func(n int, args []any) (any, error) {
		switch {
		case n == 1:
			return nil, errors.New("NOSCRIPT No matching script. Please use EVAL.")
		case args[0] == "GET":
			return nil, redis.Nil
		case args[0] == "SET":
			return "OK", nil
		}
		return []any{int64(1), int64(0)}, nil
	}), Options{Prefix: "p:"})
	ctx := context.Background()
	l := acquireRecord(t, s, "id", []byte("fp"), replay.LeaseAcquired)
	result := []byte("the-result")
	must(t, s.ConfirmRecord(ctx, "id", l.Token, time.Now().Add(time.Hour), []byte("fp"), result))
	tag := fmt.Sprintf("p:{%02d}", shardOf("id"))
	header := "D" + l.Token + "\x82fp" + "\x00\x00\x00\x0a" + string(binary.BigEndian.AppendUint32(nil, crc32.Checksum(result, crc32.MakeTable(crc32.Castagnoli))))
	staging := recordArg(t, rc.get(3)[1])
	if !strings.HasPrefix(staging, tag+"s:") || len(staging) != len(tag)+2+32 {
		t.Fatalf("staging key %q; want %ss: + a nonce", staging, tag)
	}
	for i, want := range [][]string{
		{"EVALSHA", acquireRecordLua.sha, "2", tag, tag + ":id", "*", "*", "*", "60000", l.Token, "fp", "*"},
		{"EVAL", acquireRecordLua.src, "2", tag, tag + ":id", "*", "*", "*", "60000", l.Token, "fp", "*"},
		{"GET", tag + "r:id"},
		{"SET", staging, l.Token + string(result), "PXAT", "*"},
		{"EVALSHA", confirmRecordLua.sha, "4", tag, tag + ":id", staging, tag + "r:id", "*", "*", "*", "*", l.Token, header},
	} {
		c := rc.get(i)
		if len(c) != len(want) {
			t.Fatalf("command %d = %v; want %d arguments", i, c, len(want))
		}
		for j, w := range want {
			if got := recordArg(t, c[j]); w != "*" && got != w {
				t.Fatalf("command %d argument %d = %q; want %q", i, j, got, w)
			}
		}
	}
	if c := rc.get(5); c != nil {
		t.Fatalf("a sixth command %v", c)
	}
	for _, e := range []error{redis.ErrCrossSlot, errors.New("MOVED 3999 127.0.0.1:6381")} {
		var rc recordingCommands
		s := mustNew(t, rc.client(func(int, []any) (any, error) { return nil, e }), Options{})
		if r, err := s.AcquireRecord(ctx, "id", time.Minute, nil); !errors.Is(err, ErrUnavailable) || r.State != 0 {
			t.Fatalf("AcquireRecord answered %v = %+v, %v; want ErrUnavailable", e, r, err)
		}
		if err := s.ConfirmRecord(ctx, "id", l.Token, time.Now().Add(time.Hour), nil, []byte("r")); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("ConfirmRecord answered %v = %v; want ErrUnavailable", e, err)
		}
		s.Close()
	}
}

// recordArg is argText that also reads the []byte and int64 arguments of
// the record steps.
func recordArg(t *testing.T, a any) string {
	t.Helper()
	switch v := a.(type) {
	case []byte:
		return string(v)
	case int64:
		return fmt.Sprint(v)
	}
	return argText(t, a)
}

// Any reply the store does not expect — including an entry that does not
// decode — is refused as unavailable, never read as a state.
func recordStepsFailClosed(t *testing.T) {
	tok := "0123456789abcdef0123456789abcdef"
	sideHdr := "D" + tok + "\x82fp\x00\x00\x00\x06crc!"
	tests := []struct {
		name string
		val  any
		err  error
		side any // the GET of the side key; nil is a nil reply
	}{
		{"error reply", nil, errors.New("ERR something"), nil},
		{"nil", nil, redis.Nil, nil},
		{"string", "OK", nil, nil},
		{"integer", int64(1), nil, nil},
		{"short array", []any{int64(1)}, nil, nil},
		{"long array", []any{int64(3), int64(0), "1", "x"}, nil, nil},
		{"unknown state", []any{int64(7), int64(0)}, nil, nil},
		{"cancelled by a note", []any{int64(4), int64(0)}, nil, nil},
		{"wrong types", []any{"1", "0"}, nil, nil},
		{"busy without its entry", []any{int64(2), int64(10)}, nil, nil},
		{"done without its entry", []any{int64(3), int64(0)}, nil, nil},
		{"an entry with an acquisition", []any{int64(1), int64(0), "L" + tok}, nil, nil},
		{"entry not a string", []any{int64(3), int64(0), int64(1)}, nil, nil},
		{"busy with a done entry", []any{int64(2), int64(10), "D" + tok}, nil, nil},
		{"done with a lease", []any{int64(3), int64(0), "L" + tok}, nil, nil},
		{"empty entry", []any{int64(3), int64(0), ""}, nil, nil},
		{"short lease", []any{int64(2), int64(10), "L0123"}, nil, nil},
		{"lease with an oversize fingerprint", []any{int64(2), int64(10), "L" + tok + strings.Repeat("f", replay.MaxFingerprintBytes+1)}, nil, nil},
		{"done with a short token", []any{int64(3), int64(0), "D0123"}, nil, nil},
		{"done with a token not hex", []any{int64(3), int64(0), "D" + strings.Repeat("z", 32)}, nil, nil},
		{"done with a fingerprint length past the end", []any{int64(3), int64(0), "D" + tok + "\x05fp"}, nil, nil},
		{"done with an empty result", []any{int64(3), int64(0), "D" + tok + "\x02fp"}, nil, nil},
		{"done with an oversize fingerprint length", []any{int64(3), int64(0), "D" + tok + "\x51" + strings.Repeat("f", 81) + "r"}, nil, nil},
		{"unknown entry", []any{int64(3), int64(0), "Zsomething"}, nil, nil},
		{"a cancel note as done", []any{int64(3), int64(0), "X" + tok}, nil, nil},
		{"recorded, its side key missing", []any{int64(3), int64(0), sideHdr}, nil, nil},
		{"recorded, the side key another lease's", []any{int64(3), int64(0), sideHdr}, nil, strings.Repeat("a", 32) + "result"},
		{"recorded, the side key without a result", []any{int64(3), int64(0), sideHdr}, nil, tok},
		{"recorded, the side key over the limit", []any{int64(3), int64(0), sideHdr}, nil, tok + strings.Repeat("r", replay.MaxResultBytes+1)},
		{"side key not a string", []any{int64(2), int64(10), "L" + tok + "fp"}, nil, []any{"x"}},
		{"recorded with a size of zero", []any{int64(3), int64(0), "D" + tok + "\x82fp\x00\x00\x00\x00crc!"}, nil, tok + "result"},
		{"recorded with a short trailer", []any{int64(3), int64(0), "D" + tok + "\x82fp\x00\x00\x00\x06"}, nil, tok + "result"},
		{"recorded with a fingerprint length past the end", []any{int64(3), int64(0), "D" + tok + "\x89fp\x00\x00\x00\x06crc!"}, nil, tok + "result"},
		{"recorded with an oversize fingerprint", []any{int64(3), int64(0), "D" + tok + "\xd1" + strings.Repeat("f", 81) + "\x00\x00\x00\x06crc!"}, nil, tok + "result"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rc recordingCommands
			s := closing(t, mustNew(t, rc.client(func(_ int, args []any) (any, error) {
				switch {
				case args[0] == "GET" && tt.side == nil:
					return nil, redis.Nil
				case args[0] == "GET":
					return tt.side, nil
				case args[0] == "SET":
					return "OK", nil
				}
				return tt.val, tt.err
			}), Options{}))
			ctx := context.Background()
			if r, err := s.AcquireRecord(ctx, "id", time.Minute, nil); !errors.Is(err, ErrUnavailable) || r.State != 0 || r.Fingerprint != nil || r.Result != nil {
				t.Fatalf("AcquireRecord = %+v, %v; want nothing and ErrUnavailable", r, err)
			}
			wantErr(t, s.ConfirmRecord(ctx, "id", tok, time.Now().Add(time.Hour), nil, []byte("r")), ErrUnavailable, "ConfirmRecord")
		})
	}
	// The bytes' SET answered anything but OK, or the script finding its
	// staging key gone: the confirmation is refused.
	for _, tt := range []struct {
		name   string
		set    any
		setErr error
		script any
	}{
		{"SET error", nil, errors.New("OOM command not allowed"), []any{int64(1), int64(0)}},
		{"SET nil", nil, redis.Nil, []any{int64(1), int64(0)}},
		{"SET integer", int64(1), nil, []any{int64(1), int64(0)}},
		{"staging key gone", "OK", nil, []any{int64(-7), int64(0)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var rc recordingCommands
			s := closing(t, mustNew(t, rc.client(func(_ int, args []any) (any, error) {
				if args[0] == "SET" {
					return tt.set, tt.setErr
				}
				return tt.script, nil
			}), Options{}))
			wantErr(t, s.ConfirmRecord(context.Background(), "id", tok, time.Now().Add(time.Hour), nil, []byte("r")), ErrUnavailable, "ConfirmRecord")
		})
	}
}

// An acquire whose reply is lost (the client gave up) may still land: the
// store sends the cancel script with the very token the acquire carried,
// in the background, so the lease it may have taken is freed.
func acquireRecordWithUnknownOutcomeIsReleasedWithItsToken(t *testing.T) {
	var rc recordingCommands
	released := make(chan struct{}, 1)
	s := closing(t, mustNew(t, rc.client(func(n int, args []any) (any, error) {
		if n == 1 {
			return nil, errors.New("i/o timeout")
		}
		return int64(1), nil // the cancel script freed the lease
	}), Options{Observer: func(e replay.Event) {
		if e.Kind == replay.EventLeaseReleased {
			released <- struct{}{}
		}
	}}))
	if r, err := s.AcquireRecord(context.Background(), "id", time.Minute, []byte("fp")); !errors.Is(err, ErrUnavailable) || r.State != 0 {
		t.Fatalf("AcquireRecord = %+v, %v; want ErrUnavailable", r, err)
	}
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("no background release")
	}
	acq, cancel := rc.get(0), rc.get(1)
	if len(cancel) != 6 || argText(t, cancel[1]) != cancelLua.sha || argText(t, cancel[3]) != argText(t, acq[4]) || argText(t, cancel[4]) != argText(t, acq[9]) {
		t.Fatalf("release = %v; want the cancel script on the acquire's entry with its token %v", cancel, acq[9])
	}
	// A refusal took nothing: no release.
	var rc2 recordingCommands
	s2 := closing(t, mustNew(t, rc2.client(func(_ int, args []any) (any, error) {
		if args[0] == "GET" {
			return nil, redis.Nil
		}
		return []any{int64(-3), int64(0)}, nil
	}), Options{}))
	_, err := s2.AcquireRecord(context.Background(), "id", time.Minute, nil)
	wantErr(t, err, ErrClockSkew, "AcquireRecord")
	time.Sleep(50 * time.Millisecond)
	if c := rc2.get(2); c != nil {
		t.Fatalf("a refused acquire sent %v after its GET", c)
	}
}

func TestParseEntry(t *testing.T) {
	tok := "0123456789abcdef0123456789abcdef"
	tests := []struct {
		name, v    string
		state      replay.LeaseState
		fp, result string
		ok         bool
	}{
		{"lease", "L" + tok, replay.LeaseBusy, "", "", true},
		{"lease with a fingerprint", "L" + tok + "fp", replay.LeaseBusy, "fp", "", true},
		{"lease with the longest fingerprint", "L" + tok + strings.Repeat("f", 80), replay.LeaseBusy, strings.Repeat("f", 80), "", true},
		{"confirmation", "D" + tok, replay.LeaseDone, "", "", true},
		{"record", "D" + tok + "\x02fpresult", replay.LeaseDone, "fp", "result", true},
		{"record without a fingerprint", "D" + tok + "\x00r", replay.LeaseDone, "", "r", true},
		{"claim", "1abc.1", replay.LeaseDone, "", "", true},
		{"older claim", "1", replay.LeaseDone, "", "", true},
		{"empty", "", 0, "", "", false},
		{"note", "X" + tok, 0, "", "", false},
		{"unknown", "Q", 0, "", "", false},
		{"short lease", "L" + tok[:31], 0, "", "", false},
		{"lease token not hex", "L" + strings.ToUpper(tok), 0, "", "", false},
		{"lease fingerprint too long", "L" + tok + strings.Repeat("f", 81), 0, "", "", false},
		{"short confirmation", "D" + tok[:31], 0, "", "", false},
		{"record without a result", "D" + tok + "\x02fp", 0, "", "", false},
		{"record length past the end", "D" + tok + "\x09fp", 0, "", "", false},
		{"record fingerprint too long", "D" + tok + "\x51" + strings.Repeat("f", 81) + "r", 0, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state, fp, result, ok := parseEntry(tt.v)
			if ok != tt.ok || state != tt.state || string(fp) != tt.fp || string(result) != tt.result {
				t.Fatalf("parseEntry = %v, %q, %q, %v; want %v, %q, %q, %v", state, fp, result, ok, tt.state, tt.fp, tt.result, tt.ok)
			}
			if (tt.fp == "") != (fp == nil) || (tt.result == "") != (result == nil) {
				t.Fatalf("empty parts = %#v, %#v; want nil", fp, result)
			}
		})
	}
	t.Run("result over the limit", func(t *testing.T) {
		if _, _, _, ok := parseEntry("D" + tok + "\x00" + strings.Repeat("r", replay.MaxResultBytes+1)); ok {
			t.Fatal("accepted")
		}
		if _, _, r, ok := parseEntry("D" + tok + "\x00" + strings.Repeat("r", replay.MaxResultBytes)); !ok || len(r) != replay.MaxResultBytes {
			t.Fatal("refused the longest result")
		}
	})
}

// A record written by the layout before side keys ("D" + token + n +
// fingerprint + result, all in the entry) still replays byte for byte, for
// AcquireRecord, and is done for the plain steps.
func recordOfTheEarlierLayoutStillReplays(t *testing.T) {
	// Up to 10 s a call: a 1 MiB record through a Lua script, under -race
	// on a loaded machine, has taken longer than the default second.
	c := newTestClient(t)
	s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Timeout: 10 * time.Second})
	ctx := context.Background()
	tok := "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name       string
		fp, result []byte
	}{
		{"small", []byte("fp"), []byte(`{"id":"pay_1"}`)},
		{"no fingerprint", nil, []byte{0}},
		{"the largest", bytes.Repeat([]byte{0xfe}, replay.MaxFingerprintBytes), bytes.Repeat([]byte{0x80}, replay.MaxResultBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "earlier-" + tc.name
			old := append(append(append([]byte("D"+tok), byte(len(tc.fp))), tc.fp...), tc.result...)
			must(t, c.Set(ctx, s.key(id), old, time.Minute).Err())
			d := acquireRecord(t, s, id, []byte("other"), replay.LeaseDone)
			if !bytes.Equal(d.Fingerprint, tc.fp) || !bytes.Equal(d.Result, tc.result) {
				t.Fatalf("replay of an earlier record = %d-byte fingerprint, %d-byte result; want %d and %d", len(d.Fingerprint), len(d.Result), len(tc.fp), len(tc.result))
			}
			acquireLease(t, s, id, time.Minute, replay.LeaseDone)
			wantErr(t, s.ConfirmRecord(ctx, id, tok, time.Now().Add(time.Hour), tc.fp, []byte("x")), replay.ErrLeaseLost, "ConfirmRecord over an earlier record")
			if d := acquireRecord(t, s, id, nil, replay.LeaseDone); !bytes.Equal(d.Result, tc.result) {
				t.Fatal("the earlier record changed")
			}
		})
	}
}

// Whatever a confirmation decides — recorded, resent, lost, refused by
// the fence or by Redis's clock — its staging key is gone when it returns,
// and a lost or refused one leaves no side key.
func confirmRecordLeavesNoStagingKey(t *testing.T) {
	ctx := context.Background()
	fp, result := []byte("fp"), bytes.Repeat([]byte("r"), 4096)
	t.Run("recorded, resent, lost", func(t *testing.T) {
		s, c := newTestStore(t)
		l := acquireRecord(t, s, "a", fp, replay.LeaseAcquired)
		for _, want := range []error{nil, nil} { // recorded, then resent
			wantErr(t, s.ConfirmRecord(ctx, "a", l.Token, time.Now().Add(time.Hour), fp, result), want, "ConfirmRecord")
		}
		wantErr(t, s.ConfirmRecord(ctx, "a", l.Token, time.Now().Add(time.Hour), fp, []byte("other")), replay.ErrLeaseLost, "ConfirmRecord of another result")
		must(t, s.ConfirmRecord(ctx, "b", newToken(), time.Now().Add(time.Hour), fp, result))
		m := acquireRecord(t, s, "c", fp, replay.LeaseAcquired)
		wantErr(t, s.ConfirmRecord(ctx, "c", newToken(), time.Now().Add(time.Hour), fp, result), replay.ErrLeaseLost, "ConfirmRecord with a foreign token")
		if got := keysOf(t, c, s, "}s:"); len(got) != 0 {
			t.Fatalf("staging keys left: %q", got)
		}
		wantNoKeys(t, c, "a lost confirmation left a side key", sideKey(s.tags[shardOf("c")], "c"))
		must(t, s.ConfirmRecord(ctx, "c", m.Token, time.Now().Add(time.Hour), fp, result))
	})
	t.Run("until past by Redis's clock", func(t *testing.T) {
		c := newTestClient(t)
		s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Now: func() time.Time { return time.Now().Add(-30 * time.Second) }})
		wantErr(t, s.ConfirmRecord(ctx, "p", newToken(), time.Now().Add(-20*time.Second), fp, result), replay.ErrExpired, "ConfirmRecord")
		if got := keysOf(t, c, s, "}s:", "}r:"); len(got) != 0 {
			t.Fatalf("staging or side keys left: %q", got)
		}
	})
	// The confirm raises the fence, then finds it: neither leaves a key.
	t.Run("on a lost shard", func(t *testing.T) {
		c := newTestClient(t)
		s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Logger: quietLogger()})
		must(t, c.Del(ctx, s.tags[shardOf("a")]).Err())
		for range 2 {
			wantErr(t, s.ConfirmRecord(ctx, "a", newToken(), time.Now().Add(time.Hour), fp, result), ErrFenced, "ConfirmRecord on a lost shard")
		}
		if got := keysOf(t, c, s, "}s:", "}r:"); len(got) != 0 {
			t.Fatalf("keys left beside the fence marker: %q", got)
		}
	})
}

// A side key is returned only under the done entry that names its token:
// one left by another lease (or edited to another token) is refused as
// unavailable, never replayed; Release deletes the entry and its side key
// together, so nothing of the record is left for a later holder.
func replayReturnsOnlyItsOwnLeasesSideKey(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	fp, result := []byte("fp"), []byte("result-1")
	l := acquireRecord(t, s, "a", fp, replay.LeaseAcquired)
	must(t, s.ConfirmRecord(ctx, "a", l.Token, time.Now().Add(time.Hour), fp, result))
	side := sideKey(s.tags[shardOf("a")], "a")
	other := newToken()
	must(t, c.Set(ctx, side, other+"result-2", redis.KeepTTL).Err())
	if r, err := s.AcquireRecord(ctx, "a", time.Minute, fp); !errors.Is(err, ErrUnavailable) || r.Result != nil {
		t.Fatalf("replay under another lease's side key = %+v, %v; want ErrUnavailable", r, err)
	}
	must(t, c.Del(ctx, side).Err())
	if r, err := s.AcquireRecord(ctx, "a", time.Minute, fp); !errors.Is(err, ErrUnavailable) || r.Result != nil {
		t.Fatalf("replay without its side key = %+v, %v; want ErrUnavailable", r, err)
	}

	b := acquireRecord(t, s, "b", fp, replay.LeaseAcquired)
	must(t, s.ConfirmRecord(ctx, "b", b.Token, time.Now().Add(time.Hour), fp, result))
	must(t, s.Release(ctx, "b"))
	wantNoKeys(t, c, "the entry and side key after Release", s.key("b"), sideKey(s.tags[shardOf("b")], "b"))
	acquireRecord(t, s, "b", fp, replay.LeaseAcquired)
}

// A confirmation resent with a later until (the idempotency middleware
// computes until again per attempt) moves the entry's and the side key's
// expiry together, and leaves the recorded bytes as they were.
func resentConfirmRecordKeepsSideKeyAndEntryExpiringTogether(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	fp, result := []byte("fp"), []byte("result")
	l := acquireRecord(t, s, "a", fp, replay.LeaseAcquired)
	first := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	must(t, s.ConfirmRecord(ctx, "a", l.Token, first, fp, result))
	later := first.Add(time.Minute)
	must(t, s.ConfirmRecord(ctx, "a", l.Token, later, fp, result))
	side := sideKey(s.tags[shardOf("a")], "a")
	for _, k := range []string{s.key("a"), side} {
		if got, err := c.Do(ctx, "PEXPIRETIME", k).Int64(); err != nil || got != later.UnixMilli() {
			t.Fatalf("PEXPIRETIME %s = %d, %v; want %d", k, got, err, later.UnixMilli())
		}
	}
	if v, err := c.Get(ctx, side).Result(); err != nil || v != l.Token+string(result) {
		t.Fatalf("side key = %q, %v", v, err)
	}
}

// scriptSizes records, for every script command the store sends (its note
// under a cmdHook), the bytes of its arguments and of its reply.
type scriptSizes struct {
	mu             sync.Mutex
	args, replies  []int
	plainArgsBytes int
	// confirms counts the confirm script's runs.
	confirms int
}

func (h *scriptSizes) note(cmd redis.Cmder) {
	args := cmd.Args()
	name := strings.ToUpper(fmt.Sprint(args[0]))
	size := 0
	for i, a := range args[1:] {
		if name == "EVAL" && i == 0 {
			continue // the script's source
		}
		switch v := a.(type) {
		case []byte:
			size += len(v)
		case *string:
			size += len(*v)
		default:
			size += len(fmt.Sprint(v))
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if name != "EVALSHA" && name != "EVAL" {
		h.plainArgsBytes += size
		return
	}
	if a, ok := args[1].(*string); (ok && *a == confirmRecordLua.sha) || args[1] == confirmRecordScript {
		h.confirms++
	}
	h.args = append(h.args, size)
	reply := 0
	if c, ok := cmd.(*redis.Cmd); ok {
		reply = len(fmt.Sprint(c.Val()))
	}
	h.replies = append(h.replies, reply)
}

// The point: a record write and a replay never hand the result to
// Lua. Every script the store sends for a 64 KiB record carries and
// returns a few hundred bytes at most; the result travels in plain
// commands, through the confirm script's staging key.
func recordBytesNeverPassThroughLua(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprint("durable=", durable), func(t *testing.T) {
			var c *redis.Client
			opts := Options{}
			if durable {
				t.Parallel()
				primary := newServer(t)
				newReplica(t, primary)
				c = primary.client()
				opts.Durability = Durability{Replicas: 1}
			} else {
				c = newTestClient(t)
			}
			opts.Prefix = uniquePrefix(t, c)
			hook := new(scriptSizes)
			c.AddHook(cmdHook{after: hook.note})
			s := provisioned(t, c, opts)
			fp, result := bytes.Repeat([]byte{1}, replay.MaxFingerprintBytes), bytes.Repeat([]byte("R"), 64<<10)
			hook.mu.Lock()
			hook.args, hook.replies, hook.plainArgsBytes, hook.confirms = nil, nil, 0, 0
			hook.mu.Unlock()
			l := acquireRecord(t, s, "big", fp, replay.LeaseAcquired)
			must(t, s.ConfirmRecord(context.Background(), "big", l.Token, time.Now().Add(time.Hour), fp, result))
			if d := acquireRecord(t, s, "big", nil, replay.LeaseDone); !bytes.Equal(d.Result, result) {
				t.Fatal("replay differs")
			}
			hook.mu.Lock()
			defer hook.mu.Unlock()
			if hook.confirms == 0 {
				t.Fatal("no confirm script sent; want the script (EVALSHA, EVAL)")
			}
			for i := range hook.args {
				if hook.args[i] > 512 || hook.replies[i] > 512 {
					t.Fatalf("script %d: %d bytes of arguments, %d of reply; want a few hundred at most", i, hook.args[i], hook.replies[i])
				}
			}
			if hook.plainArgsBytes < len(result) {
				t.Fatalf("plain commands carried %d bytes; want the %d-byte result", hook.plainArgsBytes, len(result))
			}
		})
	}
}

// parseSide reads back every header doneHeader writes, and refuses what
// is not one: the earlier layout, a plain confirmation, a short or long
// header, a size of zero or over the limit, a fingerprint over the limit.
func TestParseSide(t *testing.T) {
	tok := "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		fp     []byte
		result []byte
	}{
		{nil, []byte{0}},
		{[]byte("fp"), []byte("result")},
		{bytes.Repeat([]byte{0xff}, replay.MaxFingerprintBytes), make([]byte, replay.MaxResultBytes)},
	} {
		h := string(doneHeader(tok, tc.fp, tc.result))
		gotTok, fp, ok := parseSide(h)
		if !ok || gotTok != tok || !bytes.Equal(fp, tc.fp) || (fp == nil) != (len(tc.fp) == 0) {
			t.Fatalf("parseSide(doneHeader(%d-byte fingerprint)) = %q, %q, %v", len(tc.fp), gotTok, fp, ok)
		}
		if _, _, _, ok := parseEntry(h); ok {
			t.Fatalf("parseEntry accepted the header %q as an entry of the earlier layout", h)
		}
	}
	size := func(n uint32) string { return string(binary.BigEndian.AppendUint32(nil, n)) }
	for _, tc := range []struct{ name, v string }{
		{"empty", ""},
		{"plain confirmation", "D" + tok},
		{"earlier layout", "D" + tok + "\x02fpresult"},
		{"lease", "L" + tok + "\x82fp" + size(6) + "crc!"},
		{"token not hex", "D" + strings.Repeat("z", 32) + "\x82fp" + size(6) + "crc!"},
		{"short", "D" + tok + "\x82fp" + size(6) + "crc"},
		{"long", "D" + tok + "\x82fp" + size(6) + "crc!!"},
		{"size zero", "D" + tok + "\x82fp" + size(0) + "crc!"},
		{"size over the limit", "D" + tok + "\x82fp" + size(replay.MaxResultBytes+1) + "crc!"},
		{"fingerprint over the limit", "D" + tok + "\xd1" + strings.Repeat("f", 81) + size(6) + "crc!"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tok, fp, ok := parseSide(tc.v); ok || tok != "" || fp != nil {
				t.Fatalf("parseSide(%q) = %q, %q, %v; want refused", tc.v, tok, fp, ok)
			}
		})
	}
}

// The implied WAITAOF (durability.go) is documented as covering "every
// write" (SECURITY.md, docs/fleet-reference.md): once AOF is switched off at run
// time, the server refuses WAITAOF and the write is refused before the
// recheck fences. A record's steps (AcquireRecord, ConfirmRecord) must be
// refused like a Claim; the recheck is held off (RecheckInterval one
// minute) so only the wait can refuse. Needs WAITAOF (Redis 7.2+, Valkey 8).
func recordStepsWaitForTheImpliedAOFWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newServer(t, "--appendonly", "yes", "--appendfsync", "always").client()
	s := provisioned(t, c, Options{Prefix: "implied-rec:", Logger: quietLogger(), Timeout: 5 * time.Second, RecheckInterval: time.Minute})
	if s.dur.implied == nil || !s.dur.implied.on.Load() {
		t.Skip("the implied local AOF wait is off (no WAITAOF on this server)")
	}
	leased := acquireRecord(t, s, "rec-1", []byte("fp"), replay.LeaseAcquired)
	must(t, c.ConfigSet(ctx, "appendonly", "no").Err())
	t.Run("Claim", func(t *testing.T) {
		if first, err := s.Claim(ctx, "claim-after", time.Now().Add(time.Minute)); !errors.Is(err, ErrNotDurable) {
			t.Fatalf("Claim after appendonly no = %v, %v; want ErrNotDurable", first, err)
		}
	})
	t.Run("ConfirmRecord", func(t *testing.T) {
		wantErr(t, s.ConfirmRecord(ctx, "rec-1", leased.Token, time.Now().Add(time.Minute), []byte("fp"), []byte("result")), ErrNotDurable, "ConfirmRecord after appendonly no")
	})
	t.Run("AcquireRecord", func(t *testing.T) {
		_, err := s.AcquireRecord(ctx, "rec-2", time.Minute, []byte("fp"))
		wantErr(t, err, ErrNotDurable, "AcquireRecord after appendonly no")
	})
}
