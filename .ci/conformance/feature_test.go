package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"

	gherkin "github.com/cucumber/gherkin/go/v42"
	messages "github.com/cucumber/messages/go/v34"
)

// featureFile is the vendored feature file (testdata/README.md).
const featureFile = "testdata/idempotency.feature"

// errStaleDeviation fails a listed deviation whose step ctoken now passes
// as written.
var errStaleDeviation = errors.New("stale deviation")

// parse returns the scenarios (pickles: background steps included) of a
// feature file's text.
func parse(uri string, src []byte) ([]*messages.Pickle, error) {
	n := 0
	newID := func() string { n++; return strconv.Itoa(n) }
	doc, err := gherkin.ParseGherkinDocument(bytes.NewReader(src), newID)
	if err != nil {
		return nil, err
	}
	pickles := gherkin.Pickles(*doc, uri, newID)
	if len(pickles) == 0 {
		return nil, fmt.Errorf("%s: no scenario", uri)
	}
	return pickles, nil
}

// checkSteps fails on the first step of p that no definition of defs
// matches, or that two match: before anything runs, so an unknown step
// fails its scenario even where an earlier step fails too.
func checkSteps(defs []stepDef, p *messages.Pickle) error {
	for _, s := range p.Steps {
		if _, _, err := match(defs, s.Text); err != nil {
			return err
		}
	}
	return nil
}

// run runs the steps of p in w, in order, stopping at the first failure.
// A step that dev replaces must fail as written (else errStaleDeviation),
// then pass its replacement. It returns how many steps dev replaced.
func run(w *world, defs []stepDef, p *messages.Pickle, dev *deviation) (replaced int, err error) {
	if err := checkSteps(defs, p); err != nil {
		return 0, err
	}
	for _, s := range p.Steps {
		d, m, _ := match(defs, s.Text)
		var r *replacement
		var rm []string
		if dev != nil {
			r, rm = dev.find(s.Text)
		}
		if r == nil {
			if err := d.run(w, m); err != nil {
				return replaced, fmt.Errorf("step %q: %w", s.Text, err)
			}
			continue
		}
		if d.run(w, m) == nil {
			return replaced, fmt.Errorf("step %q: %w: ctoken passes it as written; delete the deviation", s.Text, errStaleDeviation)
		}
		if err := r.check(w, rm); err != nil {
			return replaced, fmt.Errorf("step %q, deviating (%s): %w", s.Text, r.says, err)
		}
		replaced++
	}
	return replaced, nil
}

// checkTables fails when deviations or waiting names a scenario that is
// not in pickles, or names one in both.
func checkTables(pickles []*messages.Pickle, devs map[string]*deviation, wait map[string]change) error {
	names := map[string]bool{}
	for _, p := range pickles {
		names[p.Name] = true
	}
	var errs []error
	for _, table := range []struct {
		name    string
		entries []string
	}{{"deviations", sortedKeys(devs)}, {"waiting", sortedKeys(wait)}} {
		for _, n := range table.entries {
			if !names[n] {
				errs = append(errs, fmt.Errorf("%s names %q, which is no scenario of the feature file", table.name, n))
			}
		}
	}
	return errors.Join(errs...)
}

// waitVerdict judges a scenario that waits on change c and ended with
// err: nil when it failed with c's symptom; an error when it passed (c
// has landed: delete the entry) or failed for anything else.
func waitVerdict(w *world, c change, err error) error {
	switch {
	case err == nil:
		return fmt.Errorf("passes now: %s has landed; delete the scenario from waiting", c.name)
	case errors.Is(err, errStaleDeviation) || !c.symptom(w):
		return fmt.Errorf("fails, but not for %s, which it waits on: %w", c.name, err)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestMiddlewareFollowsTheFeatureFileOrItsListedDeviation runs every
// scenario of idempot-dev's idempotency.feature against
// idempotency.Middleware on a real HTTP server, one subtest each. A
// scenario passes as written, or, when [deviations] lists it, passes with
// each deviating step failing as written and ctoken's documented behaviour
// asserted in its place; a scenario [waiting] lists must fail with the
// symptom of the change it waits on.
func TestMiddlewareFollowsTheFeatureFileOrItsListedDeviation(t *testing.T) {
	src, err := os.ReadFile(featureFile)
	if err != nil {
		t.Fatal(err)
	}
	pickles, err := parse(featureFile, src)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkTables(pickles, deviations, waiting); err != nil {
		t.Fatal(err)
	}
	for _, p := range pickles {
		t.Run(p.Name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := newWorld(ctx)
			defer w.stop()
			dev := deviations[p.Name]
			if err := checkSteps(steps, p); err != nil {
				t.Fatal(err) // unknown or ambiguous: never an expected failure
			}
			replaced, err := run(w, steps, p, dev)
			if c, ok := waiting[p.Name]; ok {
				if verr := waitVerdict(w, c, err); verr != nil {
					t.Fatal(verr)
				}
				t.Logf("fails as expected until %s lands: %v", c.name, err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if dev != nil && replaced == 0 {
				t.Fatalf("listed in deviations, but no step of it deviates: delete the entry")
			}
			if dev != nil {
				t.Logf("deviates in %d step(s): %s", replaced, dev.why)
			}
		})
	}
}
