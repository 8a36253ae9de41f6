package drivertest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
)

// TestProcessesShareAFile: two processes, each with its own store on one
// database file, go through the same IDs at once. A claimed ID is first
// in exactly one process (at most one when a call failed: an
// ErrUnavailable's outcome is unknown), at least 95 % are first somewhere,
// and every error is ErrUnavailable, never a first; a leased ID is
// acquired by one process and confirmed only by it; afterwards a store of
// the parent refuses every ID acknowledged.
func TestProcessesShareAFile(t *testing.T) {
	const procs = 2
	eachDriver(t, func(t *testing.T, d Driver) {
		t.Run("claim", func(t *testing.T) { shareAFile(t, d, "claim", procs, 2000) })
		t.Run("lease", func(t *testing.T) { shareAFile(t, d, "lease", procs, 1000) })
	})
}

func shareAFile(t *testing.T, d Driver, mode string, procs, ids int) {
	path := faultDB(t, d)
	children := make([]*faultProc, procs)
	for i := range children {
		children[i] = startFault(t, faultJob{Mode: mode, DB: path, IDs: ids, Seed: uint64(i + 1), Gate: true})
	}
	start := time.Now()
	for _, p := range children {
		p.stdin.Close() // go
	}
	for i, p := range children {
		p.waitFor(t, fmt.Sprintf("process %d to finish its %d IDs", i, ids), nil)
		if p.err != nil {
			t.Fatalf("process %d: %v; stderr:\n%s", i, p.err, p.stderr.String())
		}
	}
	elapsed := time.Since(start)

	// by[verb][id] is which processes printed verb for id.
	by := map[string]map[string][]int{}
	var bad []string
	unavail, busy, sample := 0, 0, ""
	for i, p := range children {
		lines := p.lines()
		if len(lines) == 0 || lines[len(lines)-1] != "finished -" {
			t.Fatalf("process %d did not finish its IDs; stderr:\n%s", i, p.stderr.String())
		}
		for _, line := range lines[:len(lines)-1] {
			verb, rest, _ := strings.Cut(line, " ")
			id, extra, _ := strings.Cut(rest, " ")
			if by[verb] == nil {
				by[verb] = map[string][]int{}
			}
			by[verb][id] = append(by[verb][id], i)
			switch verb {
			case "bad":
				bad = append(bad, line)
			case "unavailable":
				unavail++
				if sample == "" {
					sample = extra
				}
				if l := strings.ToLower(extra); strings.Contains(l, "busy") || strings.Contains(l, "locked") {
					busy++
				}
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d calls failed with an error that is not ErrUnavailable, e.g. %q", len(bad), bad[:min(5, len(bad))])
	}
	// won: the verb no two processes may print for an ID; acked: the one
	// a store of the parent must then refuse.
	won, acked := "claimed", "claimed"
	if mode == "lease" {
		won, acked = "acquired", "confirmed"
	}
	var twice, lost []string
	for n := range ids {
		id := "mp-" + strconv.Itoa(n)
		switch w := by[won][id]; {
		case len(w) > 1:
			twice = append(twice, fmt.Sprintf("%s by processes %v", id, w))
		case len(w) == 0 && len(by["unavailable"][id]) == 0:
			// Nobody won it and nobody failed: every process was refused
			// an ID no process was granted.
			lost = append(lost, id)
		}
	}
	granted := len(by[won])
	t.Logf("%d processes, %d IDs each, in %v: %d %s, %d calls unavailable (%d naming busy or locked; the first: %q), %d granted twice",
		procs, ids, elapsed.Round(time.Millisecond), granted, won, unavail, busy, sample, len(twice))
	if len(twice) > 0 {
		t.Errorf("%d IDs %s in two processes, e.g. %q", len(twice), won, twice[:min(5, len(twice))])
	}
	if len(lost) > 0 {
		t.Errorf("%d IDs refused in every process and granted in none, with no error, e.g. %q", len(lost), lost[:min(5, len(lost))])
	}
	if granted < ids*95/100 {
		t.Errorf("%d of %d IDs %s; want at least 95 %%", granted, ids, won)
	}
	if mode == "lease" {
		var foreign []string
		for id, who := range by["confirmed"] {
			if len(who) != 1 || len(by["acquired"][id]) != 1 || who[0] != by["acquired"][id][0] {
				foreign = append(foreign, fmt.Sprintf("%s confirmed by %v, acquired by %v", id, who, by["acquired"][id]))
			}
		}
		if len(foreign) > 0 {
			t.Errorf("%d IDs confirmed by a process other than the one that acquired them, e.g. %q", len(foreign), foreign[:min(5, len(foreign))])
		}
	}

	s := mustStore(t, d.Open(t, path), sqlitestore.Options{})
	faultReport(t, "an acknowledged ID afterwards", faultEach(slices.Collect(maps.Keys(by[acked])), faultDone(s, mode)))
}
