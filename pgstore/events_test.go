package pgstore

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// recorder collects a store's events and log lines.
type recorder struct {
	mu     sync.Mutex
	events []replay.Event
	log    bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.Write(p)
}

func (r *recorder) observe(e replay.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// options makes a store report to r.
func (r *recorder) options(o *Options) {
	o.Observer = r.observe
	o.Logger = slog.New(slog.NewTextHandler(r, nil))
}

// count returns how many events of kind (with option, if not empty) were
// reported, and how many log lines at level contain substr.
func (r *recorder) count(kind replay.EventKind, option, level, substr string) (events, lines int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Kind == kind && (option == "" || e.Option == option) {
			events++
		}
	}
	for _, l := range strings.Split(r.log.String(), "\n") {
		if strings.Contains(l, "level="+level) && strings.Contains(l, substr) {
			lines++
		}
	}
	return events, lines
}

// TestEvents pins what a Store reports to its Observer and Logger: each
// refusal once per reason, and every Allow option the risk it accepts.
func TestEvents(t *testing.T) {
	subtests(t, []subtest{
		{"refusal reported once per reason", refusalIsReportedOncePerReason},
		{"allow options report the risk they accept", allowOptionsReportTheRiskTheyAccept},
	})
}

// refusalIsReportedOncePerReason: a recheck's refusal is reported
// when it starts and when its reason changes, not again when only its
// figures move (a clock 31.2 s, then 31.7 s behind); the return to service
// once.
func refusalIsReportedOncePerReason(t *testing.T) {
	var r recorder
	s := &Store{prefix: "p:", table: `"t"`}
	s.observer = r.observe
	s.log = slog.New(slog.NewTextHandler(&r, nil))
	skew := func(behind string) error {
		return fmt.Errorf("%w: %w: this instance's clock is %s behind the database's (limit 30s): fix NTP", ErrUnavailable, ErrConfig, behind)
	}
	for _, step := range []struct {
		refusal           error
		refusing, serving int
	}{
		{nil, 0, 0},
		{skew("31.2s"), 1, 0},
		{skew("31.7s"), 1, 0},
		{skew("1m2.5s"), 1, 0},
		{fmt.Errorf("%w: %w: synchronous_commit is off", ErrUnavailable, ErrConfig), 2, 0},
		{nil, 2, 1},
		{nil, 2, 1},
		{skew("40s"), 3, 1},
	} {
		s.report(nil, step.refusal)
		refusing, lines := r.count(replay.EventRefusing, "", "WARN", "refusing")
		serving, _ := r.count(replay.EventServing, "", "INFO", "serving")
		if refusing != step.refusing || lines != step.refusing || serving != step.serving {
			t.Fatalf("after %v: %d replay.EventRefusing (%d Warn lines), %d replay.EventServing; want %d, %d", step.refusal, refusing, lines, serving, step.refusing, step.serving)
		}
	}
	for _, e := range r.events {
		if e.Store != "pgstore" || e.Table != "t" || e.Shard != -1 {
			t.Fatalf("event %+v; want one of pgstore's table t, no shard", e)
		}
	}
}

// allowOptionsReportTheRiskTheyAccept: AllowAsyncCommit and
// AllowRollback keep their checks: with the risk present, New logs one Warn
// naming the option and emits one EventRiskAccepted; without it, nothing.
// A risk that appears after New is reported by the recheck once per
// appearance, not at every recheck. (AllowAsyncStandby:
// TestDurability/standby that is away still counts.)
func allowOptionsReportTheRiskTheyAccept(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t)
	admin := p.pool(t)
	allow := func(o *Options) { o.AllowAsyncCommit, o.AllowRollback, o.AllowAsyncStandby = true, true, true }
	t.Run("no risk present", func(t *testing.T) {
		var r recorder
		storeOn(t, p.pool(t), allow, r.options)
		if n, lines := r.count(replay.EventRiskAccepted, "", "WARN", "Allow"); n != 0 || lines != 0 {
			t.Fatalf("New with every Allow* option and no risk: %d events, %d Warn lines; want none", n, lines)
		}
	})
	for _, c := range []struct {
		name, setting, value, option string
		params                       []string
	}{
		{"synchronous_commit off", "", "", "AllowAsyncCommit", []string{"synchronous_commit", "off"}},
		{"fsync off", "fsync", "off", "AllowRollback", nil},
		{"full_page_writes off", "full_page_writes", "off", "AllowRollback", nil},
	} {
		t.Run(c.name+" at New", func(t *testing.T) {
			if c.setting != "" {
				setSystem(t, admin, c.setting, c.value)
				defer setSystem(t, admin, c.setting, "on")
			}
			var r recorder
			storeOn(t, p.pool(t, c.params...), allow, r.options, func(o *Options) { o.RecheckInterval = 20 * time.Millisecond })
			time.Sleep(200 * time.Millisecond) // rechecks that must not report it again
			if n, lines := r.count(replay.EventRiskAccepted, c.option, "WARN", "option="+c.option); n != 1 || lines != 1 {
				t.Fatalf("%s with %s: %d events, %d Warn lines naming it; want 1 and 1\n%s", c.name, c.option, n, lines, r.log.String())
			}
			if n, _ := r.count(replay.EventRiskAccepted, "", "", ""); n != 1 {
				t.Fatalf("%d risks reported; want only %s's", n, c.option)
			}
		})
	}
	t.Run("synchronous_commit off after New, twice", func(t *testing.T) {
		var r recorder
		s := storeOn(t, p.pool(t), func(o *Options) { o.AllowAsyncCommit = true; o.RecheckInterval = 20 * time.Millisecond }, r.options)
		waitEvents := func(want int) {
			t.Helper()
			waitFor(t, 10*time.Second, func() (bool, string) {
				n, _ := r.count(replay.EventRiskAccepted, "AllowAsyncCommit", "", "")
				return n == want, fmt.Sprintf("%d replay.EventRiskAccepted; want %d", n, want)
			})
			time.Sleep(200 * time.Millisecond) // about ten rechecks more: still want
			if n, lines := r.count(replay.EventRiskAccepted, "AllowAsyncCommit", "WARN", "option=AllowAsyncCommit"); n != want || lines != want {
				t.Fatalf("%d events, %d Warn lines; want %d (once per appearance)", n, lines, want)
			}
		}
		setSystem(t, admin, "synchronous_commit", "off")
		defer setSystem(t, admin, "synchronous_commit", "on")
		waitEvents(1)
		mustClaim(t, s, "accepted-risk", time.Now().Add(time.Hour))
		setSystem(t, admin, "synchronous_commit", "on")
		// The risk is gone once a recheck read it so (the recheck that
		// stores it also reports, before the next one reads again).
		waitFor(t, 10*time.Second, func() (bool, string) {
			d := s.Durability()
			return d.SynchronousCommit == "on",
				fmt.Sprintf("Durability() = %+v after synchronous_commit was on again", d)
		})
		setSystem(t, admin, "synchronous_commit", "off")
		waitEvents(2)
	})
}
