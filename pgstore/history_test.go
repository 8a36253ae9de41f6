package pgstore

// A promoted standby whose history is unknown is fenced (issue 56): the
// record of the primary's synchronous standbys that Stores keep in the
// marker row, the verdict on a server that is primary on a new timeline,
// and the fault tests on real servers (an asynchronous standby attached at
// run time and promoted; a planned failover to a synchronous standby,
// which is not fenced).

import (
	"errors"
	"fmt"
	"math/bits"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func strp(s string) *string { return &s }

// TestHistory pins the history record and its judgement, without a server.
func TestHistory(t *testing.T) {
	subtests(t, []subtest{
		{"judge", judgeHistoryCases},
		{"unknown history is fenced for the horizon, never a stale copy's", unknownHistoryIsFencedForTheHorizon},
		{"longest rounds up by at most an eighth", longestRoundsUpByAtMostAnEighth},
		{"records who could acknowledge", historyRecordsWhoCouldAcknowledge},
		{"parse synchronous standby names", parseSyncNamesCases},
		{"conninfo application name", conninfoAppCases},
		{"self name follows the walreceiver", selfNameFollowsTheWalreceiver},
		{"fenced refusal states its end when known", fencedRefusalStatesItsEndWhenKnown},
	})
}

func judgeHistoryCases(t *testing.T) {
	rec := func(h history) string { return h.encode() }
	syncA := history{V: 1, TL: 1, Longest: 64, Sync: []member{{App: "a"}}}
	syncSlot := history{V: 1, TL: 1, Longest: 64, Sync: []member{{App: "walreceiver", Slot: "s1"}}, Other: []member{{App: "walreceiver", Slot: "s2"}}}
	twoA := history{V: 1, TL: 1, Longest: 64, Sync: []member{{App: "a"}}, Other: []member{{App: "a"}}}
	none := history{V: 1, TL: 1, Longest: 2}
	syncPotential := history{V: 1, TL: 1, Longest: 64, Sync: []member{{App: "a"}}, Other: []member{{App: "b"}}, Potential: 1}
	quorum2 := history{V: 1, TL: 1, Longest: 64, Sync: []member{{App: "a"}, {App: "b"}}, Quorum: 2}
	quorum1 := history{V: 1, TL: 1, Longest: 64, Sync: []member{{App: "a"}, {App: "b"}}, Quorum: 1}
	cases := []struct {
		name      string
		st        serverState
		fence     bool
		wantFence time.Duration
		write     bool
	}{
		{"a standby writes nothing", serverState{recovery: true, record: rec(none)}, false, 0, false},
		{"no record on timeline 1: written, not fenced", serverState{timeline: 1, self: self{app: "a"}}, false, 0, true},
		{"no record on a later timeline: fenced", serverState{timeline: 3, self: self{app: "a"}, longest: 100}, true, 104*time.Second + replay.SkewMargin, true},
		{"a fresh record of another timeline: fenced", serverState{timeline: 2, record: `{"v":1,"tl":1,"longest":0}`}, true, time.Second + replay.SkewMargin, true},
		{"new timeline, named sync beside a potential one: fenced", serverState{timeline: 2, record: rec(syncPotential), self: self{app: "a"}}, true, 64*time.Second + replay.SkewMargin, true},
		{"new timeline, named in a quorum as large as ANY n: not fenced", serverState{timeline: 2, record: rec(quorum2), self: self{app: "a"}}, false, 0, true},
		{"new timeline, named in a quorum larger than ANY n: fenced", serverState{timeline: 2, record: rec(quorum1), self: self{app: "a"}}, true, 64*time.Second + replay.SkewMargin, true},
		{"same timeline, same state: nothing", serverState{timeline: 1, record: rec(none), longest: 1.5}, false, 0, false},
		{"same timeline, a synchronous standby appears: rewritten", serverState{timeline: 1, record: rec(none),
			standbys: []standby{{App: strp("a"), State: strp("sync")}}}, false, 0, true},
		{"same timeline, a longer claim: rewritten", serverState{timeline: 1, record: rec(none), longest: 3}, false, 0, true},
		{"new timeline, named synchronous: not fenced", serverState{timeline: 2, record: rec(syncA), self: self{app: "a"}}, false, 0, true},
		{"new timeline, named by its slot: not fenced", serverState{timeline: 2, record: rec(syncSlot), self: self{app: "walreceiver", slot: "s1"}}, false, 0, true},
		{"new timeline, the other slot: fenced", serverState{timeline: 2, record: rec(syncSlot), self: self{app: "walreceiver", slot: "s2"}}, true, 64*time.Second + replay.SkewMargin, true},
		{"new timeline, no standby in the record: fenced", serverState{timeline: 2, record: rec(none), self: self{app: "walreceiver"}}, true, 2*time.Second + replay.SkewMargin, true},
		{"new timeline, another name: fenced", serverState{timeline: 2, record: rec(syncA), self: self{app: "b"}}, true, 64*time.Second + replay.SkewMargin, true},
		{"new timeline, its name twice in the record: fenced", serverState{timeline: 2, record: rec(twoA), self: self{app: "a"}}, true, 64*time.Second + replay.SkewMargin, true},
		{"new timeline, longer live rows than recorded: the longer wins", serverState{timeline: 2, record: rec(none), longest: 1000}, true, 1024*time.Second + replay.SkewMargin, true},
		{"a recorded lifetime past any fence: the longest fence", serverState{timeline: 2, record: rec(history{V: 1, TL: 1, Longest: 1 << 60})}, true, maxFence, true},
		{"unreadable record: fenced", serverState{timeline: 1, record: "{not json"}, true, time.Second + replay.SkewMargin, true},
		{"a record of another version: fenced", serverState{timeline: 1, record: `{"v":2,"tl":1}`}, true, time.Second + replay.SkewMargin, true},
		{"a record of another cluster: fenced", serverState{timeline: 1, sys: 7, record: rec(history{V: 1, TL: 1, Sys: 8, Longest: 64})}, true, 64*time.Second + replay.SkewMargin, true},
		{"a record of another cluster naming it sync: fenced", serverState{timeline: 2, sys: 7, record: rec(history{V: 1, TL: 1, Sys: 8, Longest: 64, Sync: []member{{App: "a"}}}), self: self{app: "a"}}, true, 64*time.Second + replay.SkewMargin, true},
		{"a record of its own cluster: nothing", serverState{timeline: 1, sys: 7, record: rec(history{V: 1, TL: 1, Sys: 7, Longest: 2})}, false, 0, false},
		{"a record without the cluster (an earlier version's) on its timeline: rewritten with it, not fenced", serverState{timeline: 1, sys: 7, record: `{"v":1,"tl":1,"longest":2}`}, false, 0, true},
		{"a record without the cluster on another timeline: judged by the timeline", serverState{timeline: 2, sys: 7, record: `{"v":1,"tl":1,"longest":2}`}, true, 2*time.Second + replay.SkewMargin, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := judgeHistory(c.st, time.Second)
			if (v.fence > 0) != c.fence || c.fence && v.fence != c.wantFence || (v.write != "") != c.write {
				t.Fatalf("judgeHistory = fence %v (%q), write %q; want fence %v %v, write %v", v.fence, v.why, v.write, c.fence, c.wantFence, c.write)
			}
			if v.write == "" {
				return
			}
			h, ok := parseHistory(v.write)
			if !ok || h.TL != c.st.timeline || h.Sys != c.st.sys || (h.Fence != "") != c.fence {
				t.Fatalf("record written = %q (%v); want timeline %d, fence %v", v.write, ok, c.st.timeline, c.fence)
			}
		})
	}
}

// unknownHistoryIsFencedForTheHorizon: a promoted standby whose copy of
// the record knows only 60 s claims (it was away while the fleet claimed
// for an hour), or another cluster's record, is fenced for the Stores'
// Horizon when it is longer than what the copy shows, for the copy's
// longest lifetime when that is longer, and without a horizon until
// Rearm: never for the stale copy's 60 s alone.
func unknownHistoryIsFencedForTheHorizon(t *testing.T) {
	stale := history{V: 1, TL: 1, Sys: 7, Longest: 60}.encode()
	for _, c := range []struct {
		name    string
		st      serverState
		horizon time.Duration
		fence   time.Duration
		forever bool
	}{
		{"promoted, stale copy, horizon of 2 h", serverState{timeline: 2, sys: 7, record: stale}, 2 * time.Hour, 2*time.Hour + replay.SkewMargin, false},
		{"promoted, stale copy, no horizon: until Rearm", serverState{timeline: 2, sys: 7, record: stale}, 0, 0, true},
		{"another cluster, horizon of 2 h", serverState{timeline: 1, sys: 9, record: stale}, 2 * time.Hour, 2*time.Hour + replay.SkewMargin, false},
		{"another cluster, no horizon: until Rearm", serverState{timeline: 1, sys: 9, record: stale}, 0, 0, true},
		{"live rows longer than the horizon: the longer", serverState{timeline: 2, sys: 7, record: stale, longest: 3 * 3600}, time.Hour, 11264*time.Second + replay.SkewMargin, false},
		{"known history: no fence, whatever the horizon", serverState{timeline: 1, sys: 7, record: stale}, 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := judgeHistory(c.st, c.horizon)
			if v.fence != c.fence || v.forever != c.forever || (v.why != "") != (c.forever || c.fence > 0) {
				t.Fatalf("judgeHistory = fence %v, forever %v (%q); want %v, %v", v.fence, v.forever, v.why, c.fence, c.forever)
			}
		})
	}
}

// longestRoundsUpByAtMostAnEighth pins the record's rounding of the
// longest lifetime: never below it (a fence covers every live row), at
// most an eighth above it plus the rounding to a second (a day's window
// is a fence of about 25 h, not 36.4 h), monotonic (the record's max-merge
// stays the rounding of the max), and at most 8 values per doubling (the
// record is rewritten at most that often as the longest lifetime grows).
func longestRoundsUpByAtMostAnEighth(t *testing.T) {
	for _, c := range []struct {
		seconds float64
		want    int64
	}{
		{0.2, 1}, {1, 1}, {1.5, 2}, {8, 8}, {8.1, 9}, {100, 104}, {599.9, 640}, {600, 640},
		{1000, 1024}, {1024, 1024}, {1024.5, 1152}, {86400, 90112}, {86400 + 60, 90112},
		{maxFence.Seconds() * 2, int64(maxFence / time.Second)},
		// Just below the cap, rounding up would pass it: capped too, so
		// the rounding stays monotonic up to and past the cap.
		{maxFence.Seconds() - 1, int64(maxFence / time.Second)},
		{maxFence.Seconds(), int64(maxFence / time.Second)},
	} {
		if got := ceilLongest(c.seconds); got != c.want {
			t.Errorf("ceilLongest(%v) = %d; want %d", c.seconds, got, c.want)
		}
	}
	prev, values := int64(0), map[int]map[int64]bool{}
	for s := 0.25; s < 1<<22; s *= 1.0001 {
		got := ceilLongest(s)
		if float64(got) < s || float64(got) > s*9/8+1 {
			t.Fatalf("ceilLongest(%v) = %d; want within [s, s*9/8 + 1]", s, got)
		}
		if got < prev {
			t.Fatalf("ceilLongest(%v) = %d, below %d for a shorter lifetime", s, got, prev)
		}
		prev = got
		octave := bits.Len64(uint64(got))
		if values[octave] == nil {
			values[octave] = map[int64]bool{}
		}
		if values[octave][got] = true; octave > 4 && len(values[octave]) > 8 {
			t.Fatalf("%d values between %d and %d; want at most 8 record rewrites per doubling", len(values[octave]), 1<<(octave-1), 1<<octave)
		}
	}
	h := judgeHistory(serverState{timeline: 2, record: history{V: 1, TL: 1}.encode(), longest: 86400}, time.Second)
	if want := 90112*time.Second + replay.SkewMargin; h.fence != want {
		t.Fatalf("fence for a day's window = %v; want %v (25.0 h, not 36.4 h)", h.fence, want)
	}
}

func historyRecordsWhoCouldAcknowledge(t *testing.T) {
	any2 := Durability{SynchronousCommit: "on", SynchronousStandbyNames: "ANY 2 (a, b)"}
	first1 := Durability{SynchronousCommit: "on", SynchronousStandbyNames: "FIRST 1 (a, b)"}
	cases := []struct {
		name   string
		st     serverState
		want   history
		namesA bool // the record read back names a (or me)
		me     self // {app: "a"} when zero
	}{
		{"priority: sync and potential", serverState{timeline: 1, durable: first1, standbys: []standby{
			{App: strp("a"), State: strp("sync")}, {App: strp("b"), State: strp("potential")}}},
			history{V: 1, TL: 1, Sync: []member{{App: "a"}}, Other: []member{{App: "b"}}, Potential: 1}, false, self{}},
		{"priority: one sync, one async not listed", serverState{timeline: 1, durable: Durability{SynchronousCommit: "on", SynchronousStandbyNames: "a"},
			standbys: []standby{{App: strp("a"), State: strp("sync")}, {App: strp("c"), State: strp("async")}}},
			history{V: 1, TL: 1, Sync: []member{{App: "a"}}, Other: []member{{App: "c"}}}, true, self{}},
		{"priority: one listed name away", serverState{timeline: 1, durable: first1, standbys: []standby{{App: strp("a"), State: strp("sync")}}},
			history{V: 1, TL: 1, Sync: []member{{App: "a"}}, Away: 1}, false, self{}},
		{"priority over *: a slot no standby streams from", serverState{timeline: 1,
			durable:  Durability{SynchronousCommit: "on", SynchronousStandbyNames: "*", StandbySlots: 2},
			standbys: []standby{{App: strp("walreceiver"), Slot: strp("s1"), State: strp("sync")}}},
			history{V: 1, TL: 1, Sync: []member{{App: "walreceiver", Slot: "s1"}}, Away: 1}, false, self{app: "walreceiver", slot: "s1"}},
		{"priority over *: every slot streamed from", serverState{timeline: 1,
			durable:  Durability{SynchronousCommit: "on", SynchronousStandbyNames: "*", StandbySlots: 1},
			standbys: []standby{{App: strp("walreceiver"), Slot: strp("s1"), State: strp("sync")}}},
			history{V: 1, TL: 1, Sync: []member{{App: "walreceiver", Slot: "s1"}}}, true, self{app: "walreceiver", slot: "s1"}},
		{"names compared as PostgreSQL does, case aside", serverState{timeline: 1, durable: Durability{SynchronousCommit: "on", SynchronousStandbyNames: `FIRST 1 ("A")`},
			standbys: []standby{{App: strp("a"), State: strp("sync")}}},
			history{V: 1, TL: 1, Sync: []member{{App: "a"}}}, true, self{}},
		{"quorum of two, both streaming", serverState{timeline: 1, durable: any2, standbys: []standby{
			{App: strp("a"), State: strp("quorum")}, {App: strp("b"), State: strp("quorum")}}},
			history{V: 1, TL: 1, Sync: []member{{App: "a"}, {App: "b"}}, Quorum: 2}, true, self{}},
		{"quorum beside a listed standby catching up", serverState{timeline: 1, durable: Durability{SynchronousCommit: "on", SynchronousStandbyNames: "ANY 2 (a, b, c)"},
			standbys: []standby{{App: strp("a"), State: strp("quorum")}, {App: strp("b"), State: strp("quorum")}, {App: strp("c"), State: strp("potential")}}},
			history{V: 1, TL: 1, Sync: []member{{App: "a"}, {App: "b"}}, Other: []member{{App: "c"}}, Potential: 1, Quorum: 2}, false, self{}},
		{"quorum whose n cannot be read: no member counts", serverState{timeline: 1, durable: Durability{SynchronousStandbyNames: "ANY x (a)"},
			standbys: []standby{{App: strp("a"), State: strp("quorum")}}},
			history{V: 1, TL: 1, Other: []member{{App: "a"}}}, false, self{}},
		{"a role that may not read the states: no member counts", serverState{timeline: 1, durable: any2, standbys: []standby{{}}},
			history{V: 1, TL: 1, Other: []member{{}}}, false, self{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := judgeHistory(c.st, time.Second)
			if v.write != c.want.encode() {
				t.Fatalf("record = %s; want %s", v.write, c.want.encode())
			}
			me := c.me
			if me == (self{}) {
				me = self{app: "a"}
			}
			h, ok := parseHistory(v.write)
			if !ok || h.names(me) != c.namesA {
				t.Fatalf("the record read back (%v) names %+v: %v; want %v", ok, me, h.names(me), c.namesA)
			}
		})
	}
}

func parseSyncNamesCases(t *testing.T) {
	cases := []struct {
		in     string
		ok     bool
		quorum bool
		n      int
		names  string
	}{
		{"", false, false, 0, ""},
		{"*", true, false, 1, "[*]"},
		{"a, b", true, false, 1, "[a b]"},
		{"FIRST 2 (a, b)", true, false, 2, "[a b]"},
		{"2 (a, b)", true, false, 2, "[a b]"},
		{"ANY 2 (a, b)", true, true, 2, "[a b]"},
		{"any 1(a,\"B c\")", true, true, 1, "[a B c]"},
		{`  Any` + "\t" + `3  ( "x""y", y$1, 7 )`, true, true, 3, `[x"y y$1 7]`},
		{"first 1 (*)", true, false, 1, "[*]"},
		{"ANY (a)", false, false, 0, ""},
		{"ANY 2 a", false, false, 0, ""},
		{"ANY 0 (a)", false, false, 0, ""},
		{"ANY 99999999999999999999 (a)", false, false, 0, ""},
		{"a,", false, false, 0, ""},
		{"a b", false, false, 0, ""},
		{`"unterminated`, false, false, 0, ""},
		{`""`, false, false, 0, ""},
		{"a; b", false, false, 0, ""},
		{"ANY 1 (any)", false, false, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, ok := parseSyncNames(c.in)
			if ok != c.ok || ok && (got.quorum != c.quorum || got.n != c.n || fmt.Sprint(got.names) != c.names) {
				t.Fatalf("parseSyncNames(%q) = %+v, %v; want quorum %v, n %d, names %s, ok %v", c.in, got, ok, c.quorum, c.n, c.names, c.ok)
			}
		})
	}
}

func FuzzParseSyncNames(f *testing.F) {
	f.Add("ANY 2 (a, b)")
	f.Add(`FIRST 1 ("a""b", *)`)
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := parseSyncNames(s)
		if ok && (c.n < 1 || len(c.names) == 0) {
			t.Fatalf("parseSyncNames(%q) = %+v", s, c)
		}
		if !ok && (c.n != 0 || c.names != nil) {
			t.Fatalf("parseSyncNames(%q) refused with %+v", s, c)
		}
	})
}

func conninfoAppCases(t *testing.T) {
	cases := []struct {
		in, app string
		ok      bool
	}{
		{"user=postgres host=127.0.0.1 port=5432", "", false},
		{"user=postgres application_name=standby1 host=h", "standby1", true},
		{"application_name = 'my standby' port=1", "my standby", true},
		{`application_name='it\'s'`, "it's", true},
		{"application_name='unterminated", "", false},
		{"host", "", false},
		{"postgres://u@h:5432/db?application_name=s2&sslmode=disable", "s2", true},
		{"postgresql://u@h/db", "", false},
		{"postgres://h/db?application_name=%zz", "", false},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			if app, ok := conninfoApp(c.in); app != c.app || ok != c.ok {
				t.Fatalf("conninfoApp(%q) = %q, %v; want %q, %v", c.in, app, ok, c.app, c.ok)
			}
		})
	}
}

func selfNameFollowsTheWalreceiver(t *testing.T) {
	cases := []struct {
		name, cluster string
		conninfo      *string
		want          string
	}{
		{"nothing set", "", nil, "walreceiver"},
		{"cluster_name", "node2", nil, "node2"},
		{"conninfo wins", "node2", strp("host=h application_name=standby2"), "standby2"},
		{"conninfo without a name", "node2", strp("host=h"), "node2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := selfFrom("", c.cluster, c.conninfo); got.app != c.want {
				t.Fatalf("selfFrom = %+v; want app %q", got, c.want)
			}
		})
	}
}

// fencedRefusalStatesItsEndWhenKnown: the refusal of a table whose
// fence a check read carries the fence's end, the database's remaining
// duration from the instance's time of the read, for replay.RetryAt, and
// keeps the message and the sentinels of fmt.Errorf's wrapping; a
// refusal whose end is unknown (another Store wrote first, writing the
// fence failed) carries none.
func fencedRefusalStatesItsEndWhenKnown(t *testing.T) {
	readAt := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	left := 90*time.Second + 400*time.Millisecond
	st := serverState{timeline: 2, record: history{V: 1, TL: 2, Longest: 64, Fence: "why"}.encode(), fencedFor: left, readAt: readAt}
	err := (&Store{}).keepHistory(bg(), st, verdict{})
	want := fmt.Errorf("%w: %w: %s; %v left", ErrUnavailable, ErrFenced, "why", 90*time.Second).Error()
	if err == nil || err.Error() != want || !errors.Is(err, ErrFenced) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("keepHistory of a fenced record = %v; want %q matching ErrFenced and ErrUnavailable", err, want)
	}
	// Through the wrapping of a call's refusal too.
	if at, ok := replay.RetryAt(fmt.Errorf("claim: %w", err)); !ok || !at.Equal(readAt.Add(left)) {
		t.Fatalf("replay.RetryAt = %v, %v; want %v (the read's time plus what the database says is left)", at, ok, readAt.Add(left))
	}
	st.fencedFor = 0
	wantIs(t, (&Store{}).keepHistory(bg(), st, verdict{}), nil, "keepHistory of a fence that has passed = %v; want nil")
	unknown := fencedError(time.Time{}, "%s", "why")
	if want := fmt.Errorf("%w: %w: %s", ErrUnavailable, ErrFenced, "why").Error(); unknown.Error() != want ||
		!errors.Is(unknown, ErrFenced) || !errors.Is(unknown, ErrUnavailable) {
		t.Fatalf("refusal of an unknown end = %v; want %q matching ErrFenced and ErrUnavailable", unknown, want)
	}
	if at, ok := replay.RetryAt(unknown); ok {
		t.Fatalf("replay.RetryAt of a refusal whose end is unknown = %v; want none", at)
	}
}

func FuzzParseHistory(f *testing.F) {
	f.Add(history{V: 1, TL: 2, Longest: 8, Sync: []member{{App: "a", Slot: "s"}}}.encode())
	f.Add("")
	f.Add(`{"v":1,"tl":-1}`)
	f.Fuzz(func(t *testing.T, s string) {
		h, ok := parseHistory(s)
		if !ok {
			return
		}
		if h.V != 1 || h.TL <= 0 || h.Longest < 0 {
			t.Fatalf("parseHistory accepted %+v", h)
		}
		h.names(self{app: "a", slot: "s"})
		if again, ok := parseHistory(h.encode()); !ok || again.TL != h.TL || again.Longest != h.Longest {
			t.Fatalf("a record does not survive encoding: %+v", h)
		}
	})
}

func FuzzConninfoApp(f *testing.F) {
	f.Add("host=h application_name='a b\\' c'")
	f.Add("postgres://h/db?application_name=x")
	f.Fuzz(func(t *testing.T, s string) {
		app, ok := conninfoApp(s)
		if !ok && app != "" {
			t.Fatalf("conninfoApp(%q) = %q without a name", s, app)
		}
	})
}

// multiHostPoolPorts is a pool on whichever of the servers on 127.0.0.1
// at these ports accepts writes (target_session_attrs=read-write), as a
// failover-aware application configures it: after a promotion its new
// connections reach the new primary.
func multiHostPoolPorts(t *testing.T, ports ...string) *pgxpool.Pool {
	hosts := strings.TrimSuffix(strings.Repeat("127.0.0.1,", len(ports)), ",")
	return poolAt(t, fmt.Sprintf("host=%s port=%s user=postgres dbname=postgres sslmode=disable connect_timeout=5 target_session_attrs=read-write",
		hosts, strings.Join(ports, ",")), func(*pgxpool.Config) {})
}

// claimLoad runs n claimers of fresh IDs on s until stop is called, and
// returns the IDs acknowledged as first.
func claimLoad(s *Store, n int, until time.Time) (stop func() []string) {
	var (
		mu    sync.Mutex
		acked []string
		done  atomic.Bool
		wg    sync.WaitGroup
	)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done.Load(); i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				if first, err := s.Claim(bg(), id, until); err == nil && first {
					mu.Lock()
					acked = append(acked, id)
					mu.Unlock()
				} else if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	return func() []string {
		done.Store(true)
		wg.Wait()
		return acked
	}
}

// acceptedAgain claims every ID of acked on s and counts those accepted as
// first, and those refused as fenced; any other error than ErrFenced fails
// the test, unless refusals is set: then any refusal (ErrUnavailable) is
// counted as one (a running Store's claims on a promoted server before its
// recheck there: the marker is not found, or the refusal of the previous
// recheck stands).
func acceptedAgain(t *testing.T, s *Store, acked []string, until time.Time, refusals bool) (twice, fenced int) {
	t.Helper()
	for _, id := range acked {
		first, err := s.Claim(bg(), id, until)
		switch {
		case errors.Is(err, ErrFenced) && errors.Is(err, ErrUnavailable):
			fenced++
		case refusals && errors.Is(err, ErrUnavailable):
		case err != nil:
			t.Fatalf("Claim on the promoted server: %v", err)
		case first:
			twice++
		}
	}
	return twice, fenced
}

// markerFence is how long the marker row's fence still lasts on pool.
func markerFence(t *testing.T, pool *pgxpool.Pool) time.Duration {
	t.Helper()
	var secs float64
	must(t, pool.QueryRow(bg(), `SELECT CASE WHEN until > now() THEN extract(epoch FROM until - now())::float8 ELSE 0 END FROM ctoken_replay WHERE key = `+markerSQL).Scan(&secs))
	return time.Duration(secs * float64(time.Second))
}

// TestPromotion pins promotions against real servers: an asynchronous
// standby promoted is fenced, a planned failover to a synchronous one is
// not, and a claim on another timeline than the record is refused.
func TestPromotion(t *testing.T) {
	t.Parallel() // every row is parallel, as each was as a top-level test
	subtests(t, []subtest{
		{"promoted async standby is fenced", promotedAsyncStandbyIsFenced},
		{"planned failover to sync standby not fenced", plannedFailoverToSynchronousStandbyIsNotFenced},
		{"claim on another timeline is refused", claimOnAnotherTimelineThanTheRecordIsRefused},
		{"under quorum and priority commit", promotionUnderQuorumAndPriorityCommit},
		{"promoted table without record is fenced", promotedTableWithoutRecordIsFenced},
		{"logical replica is fenced", logicalReplicaIsFenced},
		{"promoted standby that was away is fenced for the fleet", promotedStandbyThatWasAwayIsFencedForTheFleet},
	})
}

// promotedAsyncStandbyIsFenced: an asynchronous standby attached at run
// time under load, cut off and promoted, names no synchronous standby in
// its last state, so a new store there and the running store both fence
// the table for the Horizon (the claims' lifetime) plus replay.SkewMargin: 0
// replays accepted twice.
func promotedAsyncStandbyIsFenced(t *testing.T) {
	t.Parallel() // servers of its own
	for _, running := range []bool{false, true} {
		t.Run(fmt.Sprintf("running store %v", running), func(t *testing.T) {
			primary := ownServer(t)
			var events atomic.Int32
			observe := func(e replay.Event) {
				if e.Kind == replay.EventRefusing && errors.Is(e.Reason, ErrFenced) {
					events.Add(1)
				}
			}
			const lifetime = 10 * time.Minute
			until := time.Now().Add(lifetime)
			pool, port := primary.pool(t), freePort()
			opts := func(o *Options) { o.Timeout = 2 * time.Second; o.Horizon = lifetime }
			if running {
				// The running store's pool names both servers; the
				// standby's port is chosen before it exists.
				pool = multiHostPoolPorts(t, primary.port, port)
				opts = func(o *Options) {
					o.Timeout = 2 * time.Second
					o.RecheckInterval = 100 * time.Millisecond
					o.Observer = observe
					o.Horizon = lifetime
				}
			}
			s := storeOn(t, pool, opts)
			stopLoad := claimLoad(s, 16, until)
			time.Sleep(500 * time.Millisecond)
			standby := addStandby(t, primary, false, "", port)
			time.Sleep(500 * time.Millisecond)
			primary.kill()
			acked := stopLoad()
			promoteStandby(t, standby)

			var p *Store
			if running {
				// At once, before the store's recheck on the promoted
				// server: the marker counts only on the timeline of its
				// record, so every claim finds none and is refused.
				p = s
				if twice, _ := acceptedAgain(t, p, acked, until, true); twice != 0 {
					t.Fatalf("%d of %d acknowledged claims accepted twice before the recheck; want 0", twice, len(acked))
				}
				waitFor(t, 10*time.Second, func() (bool, string) {
					_, err := s.Claim(bg(), "probe", time.Now().Add(time.Minute))
					return errors.Is(err, ErrFenced),
						fmt.Sprintf("the running store does not refuse with ErrFenced: %v", err)
				})
			} else {
				p = storeOn(t, standby.pool(t), func(o *Options) { o.Prefix = s.Prefix(); o.Observer = observe; o.Horizon = lifetime })
			}
			twice, fenced := acceptedAgain(t, p, acked, until, false)
			fence := markerFence(t, standby.pool(t))
			t.Logf("%d claims acknowledged on the primary; on the promoted server %d accepted twice, %d refused as fenced; fence %v left for claims of %v",
				len(acked), twice, fenced, fence.Round(time.Second), lifetime)
			if twice != 0 || len(acked) == 0 || fenced != len(acked) {
				t.Fatalf("%d of %d acknowledged claims accepted twice (%d fenced); want 0 and all fenced", twice, len(acked), fenced)
			}
			// 10 min rounds up to 640 s (an eighth of 512 s at a time); the
			// fence ends then plus the margin (less the seconds this test
			// took), never earlier.
			if want := 640*time.Second + replay.SkewMargin; fence > want || fence < want-time.Minute {
				t.Fatalf("fence lasts %v; want about %v (the longest claim's lifetime rounded up, plus SkewMargin)", fence, want)
			}
			if events.Load() == 0 {
				t.Fatalf("no replay.EventRefusing with ErrFenced")
			}
			wantIs(t, errOf(p.Claim(bg(), "fresh", time.Now().Add(time.Minute))), ErrFenced, "Claim of a fresh ID while fenced = %v; want ErrFenced")
			// The fence's end (simulated: the marker's until moved to now)
			// lets the store serve again without a restart, and the
			// record written on the new timeline does not fence again.
			// (The running store saw the asynchronous standby, which
			// counts until the store is replaced: a new store serves.)
			mustExec(t, standby.pool(t), `UPDATE ctoken_replay SET until = now() WHERE key = `+markerSQL)
			if running {
				p = storeOn(t, standby.pool(t), func(o *Options) { o.Prefix = s.Prefix() })
			}
			waitFor(t, 10*time.Second, func() (bool, string) {
				first, err := p.Claim(bg(), "after-the-fence", time.Now().Add(time.Minute))
				return err == nil && first,
					fmt.Sprintf("Claim after the fence ended = %v, %v; want first", first, err)
			})
		})
	}
}

// shutdown stops p as an operator's switchover does (SIGINT to the
// postmaster alone: a fast shutdown, which sends the standbys every WAL
// record before it exits; a SIGINT to a backend would cancel a commit's
// wait for the synchronous standby, which PostgreSQL then acknowledges
// locally) and waits for it to exit.
func shutdown(t *testing.T, p *pgServer) {
	t.Helper()
	p.mu.Lock()
	pid, exited := p.cmd.Process.Pid, p.exited
	p.mu.Unlock()
	syscall.Kill(pid, syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the primary did not shut down within 30 s")
	}
}

// promoteStandby promotes standby and waits for it.
func promoteStandby(t *testing.T, standby *pgServer) {
	t.Helper()
	mustExec(t, standby.pool(t), `SELECT pg_promote(wait => true)`)
}

// plannedFailoverToSynchronousStandbyIsNotFenced: a running store
// (its pool follows the primary), claimers, a synchronous standby; the
// primary is shut down cleanly and the standby promoted. A new store on
// the promoted server serves at once, the running store after its first
// recheck there: the last state the standby received names it the
// synchronous standby, so its history is known (no false fence), and
// every acknowledged claim is still refused.
func plannedFailoverToSynchronousStandbyIsNotFenced(t *testing.T) {
	t.Parallel() // servers of its own
	primary, standby := syncPair(t)
	s := storeOn(t, multiHostPoolPorts(t, primary.port, standby.port), func(o *Options) {
		o.Timeout = 2 * time.Second
		o.RecheckInterval = 100 * time.Millisecond
	})
	if !s.Durability().WaitsForStandby() {
		t.Fatalf("Durability() = %+v; want a synchronous standby", s.Durability())
	}
	until := time.Now().Add(time.Hour)
	stopLoad := claimLoad(s, 8, until)
	time.Sleep(time.Second)
	shutdown(t, primary) // fast shutdown: every WAL record reaches the standby
	acked := stopLoad()
	promoteStandby(t, standby)
	p := storeOn(t, standby.pool(t), func(o *Options) { o.Prefix = s.Prefix() })
	twice, fenced := acceptedAgain(t, p, acked, until, false)
	if twice != 0 || fenced != 0 || len(acked) == 0 {
		t.Fatalf("after a planned failover: %d of %d acknowledged claims accepted twice, %d fenced; want 0 and 0", twice, len(acked), fenced)
	}
	mustClaim(t, p, "fresh", until)
	if f := markerFence(t, standby.pool(t)); f != 0 {
		t.Fatalf("the promoted server's table is fenced for %v; want no fence", f)
	}
	// The running store reaches the promoted server and serves again
	// after its recheck there, never fenced.
	waitFor(t, 10*time.Second, func() (bool, string) {
		first, err := s.Claim(bg(), "running-probe", until)
		if errors.Is(err, ErrFenced) {
			t.Fatalf("the running store is fenced after a planned failover: %v", err)
		}
		return err == nil && first,
			fmt.Sprintf("the running store does not serve after a planned failover: %v, %v", first, err)
	})
	if twice, fenced := acceptedAgain(t, s, acked, until, false); twice != 0 || fenced != 0 {
		t.Fatalf("the running store after a planned failover: %d accepted twice, %d fenced; want 0 and 0", twice, fenced)
	}
}

// claimOnAnotherTimelineThanTheRecordIsRefused: every statement that
// decides on a claim, a lease or a record finds the marker only on the
// timeline its history record names, so a running Store refuses on a
// promoted server from its first claim there, before any recheck
// (RecheckInterval is an hour here); New then judges the history (the
// record names no standby: fenced) and the Store refuses with ErrFenced.
func claimOnAnotherTimelineThanTheRecordIsRefused(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t)
	pool := p.pool(t)
	s := storeOn(t, pool, func(o *Options) { o.RecheckInterval = time.Hour })
	mustClaim(t, s, "before", time.Now().Add(time.Minute))
	// Works whose lease was taken on the timeline of the record: their
	// commits come after the promotion below (the old path, a committed
	// lease then BeginWork, and AcquireWork, the lease inside the work).
	rec := mustRecord(t, s, "work-before", time.Minute, []byte("fp"))
	begun, err := s.BeginWork(bg(), "work-before", rec.Token)
	must(t, err)
	_, locked, err := s.AcquireWork(bg(), "locked-before", time.Minute, []byte("fp"))
	if err != nil || locked == nil {
		t.Fatalf("AcquireWork before = %v, %v", locked, err)
	}
	// The record of a timeline this server is not on: as a promoted
	// server holds the old primary's.
	mustExec(t, pool, `UPDATE ctoken_replay SET token = $1 WHERE key = `+markerSQL, history{V: 1, TL: 99, Longest: 64}.encode())
	for name, w := range map[string]replay.Work{"BeginWork's commit": begun, "AcquireWork's commit": locked} {
		t.Run(name, func(t *testing.T) {
			if err := w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r")); err == nil {
				t.Fatalf("%s on another timeline than the record's succeeded", name)
			}
		})
	}
	until := time.Now().Add(time.Minute)
	steps := []struct {
		name string
		run  func() error
	}{
		{"Claim", func() error { return refusalErr(s.Claim(bg(), "after", until)) }},
		{"AcquireLease", func() error {
			l, err := s.AcquireLease(bg(), "lease", time.Minute)
			return refusalErr(l.State == replay.LeaseAcquired, err)
		}},
		{"AcquireRecord", func() error {
			r, err := s.AcquireRecord(bg(), "record", time.Minute, []byte("fp"))
			return refusalErr(r.State == replay.LeaseAcquired, err)
		}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := st.run(); !errors.Is(err, ErrForgotten) || !errors.Is(err, ErrUnavailable) {
				t.Fatalf("%s on another timeline than the record's = %v; want ErrForgotten (refused)", st.name, err)
			}
		})
	}
	fence, slack := 64*time.Second+replay.SkewMargin, time.Second
	before := time.Now()
	n := storeOn(t, pool, func(o *Options) { o.Horizon = 64 * time.Second })
	_, err = n.Claim(bg(), "fresh", until)
	after := time.Now()
	wantIs(t, err, ErrFenced, "Claim on a store made after = %v; want ErrFenced")
	if f := markerFence(t, pool); f < fence-10*time.Second || f > fence {
		t.Fatalf("fence = %v; want the recorded 64 s plus SkewMargin", f)
	}
	// The refusal says when the fence New wrote ends, as does a Store
	// that reads it after.
	end, ok := replay.RetryAt(err)
	if !ok || end.Before(before.Add(fence-slack)) || end.After(after.Add(fence+slack)) {
		t.Fatalf("replay.RetryAt of the fenced refusal = %v, %v; want within [%v, %v]", end, ok, before.Add(fence-slack), after.Add(fence+slack))
	}
	_, err = storeOn(t, pool).Claim(bg(), "fresh", until)
	// Both ends are computed from readings of the clock at different
	// moments (each Store's own): 3 s apart at most, not slack.
	if at, ok := replay.RetryAt(err); !errors.Is(err, ErrFenced) || !ok || at.Sub(end).Abs() > 3*time.Second {
		t.Fatalf("Claim on a store made after the fence = %v, RetryAt %v, %v; want ErrFenced ending at %v", err, at, ok, end)
	}
}

// waitStates waits until the primary's pg_stat_replication shows exactly
// the standbys of want (application_name: sync_state).
func waitStates(t *testing.T, admin *pgxpool.Pool, want map[string]string) {
	t.Helper()
	waitFor(t, 30*time.Second, func() (bool, string) {
		got := map[string]string{}
		var app, state string
		rows, _ := admin.Query(bg(), `SELECT application_name, sync_state FROM pg_stat_replication`)
		_, err := pgx.ForEachRow(rows, []any{&app, &state}, func() error {
			got[app] = state
			return nil
		})
		return err == nil && fmt.Sprint(got) == fmt.Sprint(want),
			fmt.Sprintf("pg_stat_replication shows %v (%v); want %v", got, err, want)
	})
}

// missingOn counts the IDs of acked that s's table on server p does not
// hold.
func missingOn(t *testing.T, p *pgServer, s *Store, acked []string) int {
	t.Helper()
	keys := make([][]byte, len(acked))
	for i, id := range acked {
		keys[i] = s.key(id)
	}
	var n int
	must(t, p.pool(t).QueryRow(bg(), `SELECT count(*) FROM unnest($1::bytea[]) k WHERE NOT EXISTS (SELECT 1 FROM ctoken_replay WHERE key = k)`, keys).Scan(&n))
	return n
}

// promotionUnderQuorumAndPriorityCommit: standby a, promoted after the
// primary dies mid-load, serves at once where every commit waited for it
// (no false fence), and is fenced where b could acknowledge in its place
// and a was cut off (claims missing from a): 0 accepted twice either way.
func promotionUnderQuorumAndPriorityCommit(t *testing.T) {
	t.Parallel() // servers of its own
	cases := []struct {
		name, names string
		states      map[string]string // pg_stat_replication when the store starts
		bAway       bool              // b is stopped before the store starts
		cut         bool              // a is cut off before the primary dies (then fenced)
	}{
		{"ANY 2 of a and b", "ANY 2 (a, b)", map[string]string{"a": "quorum", "b": "quorum"}, false, false},
		{"FIRST 2 of a and b", "FIRST 2 (a, b)", map[string]string{"a": "sync", "b": "sync"}, false, false},
		{"ANY 1 of a and b, a cut off", "ANY 1 (a, b)", map[string]string{"a": "quorum", "b": "quorum"}, false, true},
		{"FIRST 1 of a and b, a cut off", "FIRST 1 (a, b)", map[string]string{"a": "sync", "b": "potential"}, false, true},
		{"FIRST 1 of a and b, b back after a was cut off", "FIRST 1 (a, b)", map[string]string{"a": "sync"}, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			primary := ownServer(t)
			admin := primary.pool(t)
			a := startStandby(t, primary, "", freePort(), "-c", "cluster_name=a")
			b := startStandby(t, primary, "", freePort(), "-c", "cluster_name=b")
			mustExec(t, admin, `ALTER SYSTEM SET synchronous_standby_names = '`+c.names+`'`)
			mustExec(t, admin, `SELECT pg_reload_conf()`)
			if c.bAway {
				b.kill()
			}
			waitStates(t, admin, c.states)
			s := storeOn(t, primary.pool(t), func(o *Options) {
				o.Timeout = 2 * time.Second
				o.RecheckInterval = 100 * time.Millisecond
			})
			const lifetime = 10 * time.Minute
			until := time.Now().Add(lifetime)
			stopLoad := claimLoad(s, 8, until)
			time.Sleep(time.Second)
			if c.cut {
				a.kill() // cut off: b acknowledges alone from now on
				if c.bAway {
					must(t, b.restart())
					waitStates(t, admin, map[string]string{"b": "sync"})
				}
				time.Sleep(time.Second)
			}
			primary.kill()
			acked := stopLoad()
			if c.cut {
				must(t, a.restart()) // a standby again, its primary gone
			}
			promoteStandby(t, a)
			missing := missingOn(t, a, s, acked)
			p := storeOn(t, a.pool(t), func(o *Options) { o.Prefix = s.Prefix(); o.Horizon = lifetime })
			twice, fenced := acceptedAgain(t, p, acked, until, false)
			fence := markerFence(t, a.pool(t))
			t.Logf("%s: %d claims acknowledged, %d missing from the promoted a; %d accepted twice, %d refused as fenced; fence %v",
				c.name, len(acked), missing, twice, fenced, fence.Round(time.Second))
			switch {
			case len(acked) == 0:
				t.Fatal("no claim acknowledged")
			case twice != 0:
				t.Fatalf("%d of %d acknowledged claims accepted twice; want 0", twice, len(acked))
			case c.cut && (missing == 0 || fenced != len(acked) || fence < time.Until(until)): // the fence outlasts every claim
				t.Fatalf("a cut off: %d missing, %d of %d fenced, fence %v; want some missing, all fenced for the claims' lifetime", missing, fenced, len(acked), fence)
			case !c.cut && (missing != 0 || fenced != 0 || fence != 0):
				t.Fatalf("every commit waited for a: %d missing, %d fenced, fence %v; want 0, 0, none", missing, fenced, fence)
			}
			if first, err := p.Claim(bg(), "fresh", until); c.cut && !errors.Is(err, ErrFenced) || !c.cut && (err != nil || !first) {
				t.Fatalf("Claim of a fresh ID on the promoted a = %v, %v; want fenced: %v", first, err, c.cut)
			}
		})
	}
}

// promotedTableWithoutRecordIsFenced: on a promoted server nothing shows
// the history of a table whose marker holds no record (an earlier
// version's), so the running store accepts nothing there and a new store
// is fenced (0 accepted twice); a table Migrate makes there serves at once.
func promotedTableWithoutRecordIsFenced(t *testing.T) {
	t.Parallel() // servers of its own
	primary := ownServer(t)
	port := freePort()
	standby := addStandby(t, primary, false, "", port)
	s := storeOn(t, multiHostPoolPorts(t, primary.port, port), func(o *Options) {
		o.AllowAsyncStandby = true
		o.RecheckInterval = time.Hour // no recheck writes a record below
	})
	mustExec(t, primary.pool(t), `UPDATE ctoken_replay SET token = '' WHERE key = `+markerSQL)
	until := time.Now().Add(10 * time.Minute)
	stopLoad := claimLoad(s, 8, until)
	time.Sleep(500 * time.Millisecond)
	standby.kill() // cut off: the claims from now on are the primary's alone
	time.Sleep(500 * time.Millisecond)
	primary.kill()
	acked := stopLoad()
	must(t, standby.restart())
	promoteStandby(t, standby)
	pool := standby.pool(t)
	var token string
	if err := pool.QueryRow(bg(), `SELECT token FROM ctoken_replay WHERE key = `+markerSQL).Scan(&token); err != nil || token != "" {
		t.Fatalf("the promoted server's marker holds %q (%v); want no record", token, err)
	}
	if twice, _ := acceptedAgain(t, s, acked, until, true); twice != 0 {
		t.Fatalf("the running store accepted %d of %d acknowledged claims twice on the promoted server; want 0", twice, len(acked))
	}
	if first, err := s.Claim(bg(), "fresh-running", until); first || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the running store's Claim of a fresh ID on the promoted server = %v, %v; want refused", first, err)
	}
	missing := missingOn(t, standby, s, acked)
	p := storeOn(t, pool, func(o *Options) { o.Prefix = s.Prefix(); o.Horizon = 10 * time.Minute })
	twice, fenced := acceptedAgain(t, p, acked, until, false)
	fence := markerFence(t, pool)
	t.Logf("%d claims acknowledged, %d missing from the promoted server; %d accepted twice, %d fenced; fence %v", len(acked), missing, twice, fenced, fence.Round(time.Second))
	if len(acked) == 0 || missing == 0 || twice != 0 || fenced != len(acked) || fence < time.Until(until) { // the fence outlasts every claim
		t.Fatalf("%d of %d acknowledged claims accepted twice (%d missing, %d fenced, fence %v); want 0, all fenced for the claims' lifetime", twice, len(acked), missing, fenced, fence)
	}
	t.Run("a table made after the promotion serves", func(t *testing.T) {
		must(t, Migrate(bg(), pool, "made_after_promotion"))
		n := storeOn(t, pool, func(o *Options) { o.Table = "made_after_promotion" })
		mustClaim(t, n, "fresh", until)
	})
}

// recordOn is the history record of the marker row on pool.
func recordOn(t *testing.T, pool *pgxpool.Pool) history {
	t.Helper()
	var token string
	must(t, pool.QueryRow(bg(), `SELECT token FROM ctoken_replay WHERE key = `+markerSQL).Scan(&token))
	h, _ := parseHistory(token)
	return h
}

// fencedUntilRearm fails t unless the marker row on pool is fenced
// without an end (until = 'infinity').
func fencedUntilRearm(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var forever bool
	must(t, pool.QueryRow(bg(), `SELECT until = 'infinity' FROM ctoken_replay WHERE key = `+markerSQL).Scan(&forever))
	if !forever {
		t.Fatalf("the marker is not fenced until Rearm (%v left)", markerFence(t, pool))
	}
}

// wantRearmNamed fails t unless err is a fence of unknown history whose
// end is unknown and whose text names Rearm and what it saw.
func wantRearmNamed(t *testing.T, err error, what string) {
	t.Helper()
	if _, ok := replay.RetryAt(err); !errors.Is(err, ErrFenced) || ok || !strings.Contains(err.Error(), "pgstore.Rearm(ctx, pool, ") || !strings.Contains(err.Error(), what) {
		t.Fatalf("Claim on the fenced table = %v (RetryAt known: %v); want ErrFenced naming pgstore.Rearm and %q, no end", err, ok, what)
	}
}

// freshServer starts a server on a data directory of its own initdb (the
// servers of startServer are copies of one, and share its system
// identifier), without the store's table, killed when t ends.
func freshServer(t *testing.T) *pgServer {
	t.Helper()
	needServer(t)
	bin, err := pgBin()
	must(t, err)
	dir := filepath.Join(tmpRoot, "fresh-"+strings.Trim(strings.TrimPrefix(uniquePrefix(), "test:"), ":"))
	must(t, mkdirOwned(dir))
	cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	runAs(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	for range 5 {
		p := &pgServer{dir: dir, port: freePort()}
		if err = p.start(); err == nil {
			t.Cleanup(p.kill)
			return p
		}
	}
	t.Fatal(err)
	return nil
}

// logicalReplicaIsFenced: a cutover to a logical replica (blue/green, an
// upgrade by logical replication). The subscriber's marker row is the
// publisher's, whose record names the publisher's cluster; 100 claims
// acknowledged on the publisher after the apply stopped are refused on
// the subscriber: by a running store before any recheck there (the
// marker counts only on its record's cluster), and by New, which fences
// until Rearm (no Horizon); Rearm then names the fence's end. 0 accepted
// twice.
func logicalReplicaIsFenced(t *testing.T) {
	t.Parallel() // servers of its own
	pub := ownServer(t, "-c", "wal_level=logical")
	sub := freshServer(t) // initdb of its own: another system identifier
	subPool := sub.pool(t)
	stmts, err := schema("")
	must(t, err)
	for _, q := range []string{stmts[0], stmts[1], stmts[3]} { // the table without its marker: the publisher's comes
		mustExec(t, subPool, q)
	}
	mustExec(t, pub.pool(t), `CREATE PUBLICATION ctoken FOR TABLE ctoken_replay`)
	mustExec(t, subPool, `CREATE SUBSCRIPTION ctoken CONNECTION 'host=127.0.0.1 port=`+pub.port+` user=postgres dbname=postgres' PUBLICATION ctoken`)
	// The initial copy's walsender has no active logical slot (it would
	// count as a standby): the store starts once the copy is done.
	waitFor(t, 20*time.Second, func() (bool, string) {
		var marker, syncing int
		err := subPool.QueryRow(bg(), `SELECT (SELECT count(*) FROM ctoken_replay WHERE key = `+markerSQL+`),
			(SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r')`).Scan(&marker, &syncing)
		return err == nil && marker == 1 && syncing == 0, fmt.Sprintf("the subscriber's initial copy: marker %d, %d tables syncing (%v)", marker, syncing, err)
	})
	s := storeOn(t, multiHostPoolPorts(t, pub.port, sub.port), func(o *Options) {
		o.Timeout = 2 * time.Second
		o.RecheckInterval = time.Hour // no recheck on the subscriber below
	})
	until := time.Now().Add(time.Hour)
	mustClaim(t, s, "applied", until)
	waitFor(t, 20*time.Second, func() (bool, string) {
		var n int
		err := subPool.QueryRow(bg(), `SELECT count(*) FROM ctoken_replay WHERE key = ANY ($1)`, [][]byte{s.key("applied"), {0, 0}}).Scan(&n)
		return n == 2, fmt.Sprintf("the subscriber holds %d of the marker and the first claim (%v)", n, err)
	})
	if h := recordOn(t, subPool); h.Sys == 0 || h.Sys != recordOn(t, pub.pool(t)).Sys {
		t.Fatalf("the subscriber's record %+v; want the publisher's cluster", h)
	}
	mustExec(t, subPool, `ALTER SUBSCRIPTION ctoken DISABLE`) // what was acknowledged from now on is not applied
	var acked []string
	for i := range 100 {
		id := fmt.Sprint("acked-", i)
		mustClaim(t, s, id, until)
		acked = append(acked, id)
	}
	pub.kill() // the cutover: the running store's pool reaches the subscriber
	waitForClaim(t, s, "the running store on the subscriber, before a recheck", ErrForgotten)
	if twice, _ := acceptedAgain(t, s, acked, until, true); twice != 0 {
		t.Fatalf("the running store accepted %d of %d acknowledged claims twice on the subscriber; want 0", twice, len(acked))
	}
	n := storeOn(t, subPool, func(o *Options) { o.Prefix = s.Prefix() })
	twice, fenced := acceptedAgain(t, n, acked, until, false)
	t.Logf("%d claims acknowledged on the publisher and not applied; on the subscriber %d accepted twice, %d fenced", len(acked), twice, fenced)
	if twice != 0 || fenced != len(acked) {
		t.Fatalf("%d of %d acknowledged claims accepted twice on the subscriber (%d fenced); want 0, all fenced", twice, len(acked), fenced)
	}
	fencedUntilRearm(t, subPool)
	wantRearmNamed(t, errOf(n.Claim(bg(), "fresh", until)), "another cluster")
	var subSys int64
	must(t, subPool.QueryRow(bg(), `SELECT system_identifier FROM pg_control_system()`).Scan(&subSys))
	if h := recordOn(t, subPool); h.Sys != subSys || h.Fence == "" {
		t.Fatalf("the subscriber's record after the fence: %+v; want its own cluster (%d) and the fence", h, subSys)
	}
	must(t, Rearm(bg(), subPool, "", 2*time.Hour))
	if f := markerFence(t, subPool); f < 2*time.Hour-time.Minute || f > 2*time.Hour {
		t.Fatalf("after Rearm with 2 h the fence lasts %v; want 2 h", f)
	}
	wantIs(t, errOf(n.Claim(bg(), "fresh", until)), ErrFenced, "Claim after Rearm = %v; want ErrFenced (for 2 h)")
}

// promotedStandbyThatWasAwayIsFencedForTheFleet: an asynchronous standby
// whose copy of the record knows only 60 s claims (it was stopped before
// the fleet claimed for an hour), promoted after the primary is lost: New
// fences until Rearm names the fence (no Horizon), never for the copy's
// 60 s: 0 of 200 one-hour claims accepted again; with a Horizon the fence
// lasts it.
func promotedStandbyThatWasAwayIsFencedForTheFleet(t *testing.T) {
	t.Parallel() // servers of its own
	for _, horizon := range []time.Duration{0, 2 * time.Hour} {
		t.Run(fmt.Sprint("horizon ", horizon), func(t *testing.T) {
			primary := ownServer(t)
			standby := addStandby(t, primary, false, "away", freePort())
			s := storeOn(t, primary.pool(t), func(o *Options) {
				o.AllowAsyncStandby = true
				o.RecheckInterval = 50 * time.Millisecond
				o.Horizon = horizon
			})
			for i := range 10 {
				mustClaim(t, s, fmt.Sprint("short-", i), time.Now().Add(time.Minute))
			}
			waitFor(t, 20*time.Second, func() (bool, string) {
				h := recordOn(t, standby.pool(t))
				return h.Longest >= 50, fmt.Sprintf("the standby's record %+v; want the 60 s claims' lifetime", h)
			})
			standby.kill() // away from now on
			until := time.Now().Add(time.Hour)
			var acked []string
			for i := range 200 {
				id := fmt.Sprint("long-", i)
				mustClaim(t, s, id, until)
				acked = append(acked, id)
			}
			waitFor(t, 10*time.Second, func() (bool, string) {
				h := recordOn(t, primary.pool(t))
				return h.Longest >= 3500, fmt.Sprintf("the primary's record %+v; want the hour's claims", h)
			})
			primary.kill()
			must(t, standby.restart())
			promoteStandby(t, standby)
			pool := standby.pool(t)
			if h := recordOn(t, pool); h.Longest > 120 {
				t.Fatalf("the promoted standby's record %+v; want its stale copy (60 s claims)", h)
			}
			p := storeOn(t, pool, func(o *Options) { o.Prefix = s.Prefix(); o.Horizon = horizon })
			twice, fenced := acceptedAgain(t, p, acked, until, false)
			t.Logf("horizon %v: %d one-hour claims acknowledged while the standby was away; %d accepted twice, %d fenced", horizon, len(acked), twice, fenced)
			if twice != 0 || fenced != len(acked) {
				t.Fatalf("%d of %d acknowledged claims accepted twice (%d fenced); want 0, all fenced", twice, len(acked), fenced)
			}
			if horizon == 0 {
				fencedUntilRearm(t, pool)
				wantRearmNamed(t, errOf(p.Claim(bg(), "fresh", until)), "does not name it a synchronous standby")
				return
			}
			if f := markerFence(t, pool); f < horizon || f > horizon+replay.SkewMargin {
				t.Fatalf("fence %v; want the Horizon %v plus replay.SkewMargin", f, horizon)
			}
		})
	}
}
