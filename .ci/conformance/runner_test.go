package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	messages "github.com/cucumber/messages/go/v34"
)

// A feature file for the runner's own refusals: the background starts
// the real server, so each scenario's steps run against the middleware.
const runnerFeature = `Feature: the runner
  Background:
    Given a POST endpoint at "/api" that creates an order

  Scenario: unknown step
    Given an Idempotency-Key "abc123456789012345678"
    When I send a POST request to "/api" with body '{"foo":"bar"}'
    Then the moon should be full

  Scenario: passing step listed as a deviation
    When I send a POST request to "/api" without an Idempotency-Key header
    Then the response status should be 400

  Scenario: failing step
    When I send a POST request to "/api" without an Idempotency-Key header
    Then the response status should be 418

  Scenario: failing step before an unknown one
    When I send a POST request to "/api" without an Idempotency-Key header
    Then the response status should be 418
    And the moon should be full
`

// TestRunnerRefuses pins the runner's failures: a scenario with an
// unknown or ambiguous step fails before it runs, a deviation whose step
// ctoken passes as written is stale, a failing step fails its scenario,
// a waiting scenario must fail with its change's symptom, and a table
// entry naming no scenario of the file is refused. Without
// them a changed feature file could pass vacuously.
func TestRunnerRefuses(t *testing.T) {
	pickles, err := parse("runner.feature", []byte(runnerFeature))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*messages.Pickle{}
	for _, p := range pickles {
		byName[p.Name] = p
	}
	statusIs400 := deviation{why: "test", instead: []replacement{
		instead(`the response status should be 400`, "anything", func(*world, []string) error { return nil }),
	}}
	ambiguous := append(append([]stepDef(nil), steps...),
		def(`the response status should be (\d+)`, func(*world, []string) error { return nil }))
	cases := []struct {
		name     string
		scenario string
		defs     []stepDef
		dev      *deviation
		want     error
		wantText string
	}{
		{name: "an unknown step", scenario: "unknown step", defs: steps, want: errUnknownStep},
		{name: "an ambiguous step", scenario: "failing step", defs: ambiguous, want: errAmbiguousStep},
		{name: "a stale deviation", scenario: "passing step listed as a deviation", defs: steps, dev: &statusIs400, want: errStaleDeviation},
		{name: "a failing step", scenario: "failing step", defs: steps, wantText: "status 400, want 418"},
		{name: "an unknown step after a failing one", scenario: "failing step before an unknown one", defs: steps, want: errUnknownStep},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(context.Background())
			defer w.stop()
			_, err := run(w, tc.defs, byName[tc.scenario], tc.dev)
			switch {
			case err == nil:
				t.Fatal("run passed")
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("run: %v, want %v", err, tc.want)
			case tc.wantText != "" && !strings.Contains(err.Error(), tc.wantText):
				t.Fatalf("run: %v, want it to say %q", err, tc.wantText)
			}
		})
	}
	t.Run("a deviations entry naming no scenario", func(t *testing.T) {
		err := checkTables(pickles, map[string]*deviation{"no such scenario": &noDraftLink}, nil)
		if err == nil || !strings.Contains(err.Error(), `"no such scenario"`) {
			t.Fatalf("checkTables: %v", err)
		}
	})
	t.Run("a waiting entry naming no scenario", func(t *testing.T) {
		err := checkTables(pickles, nil, map[string]change{"no such scenario": bareKeys})
		if err == nil || !strings.Contains(err.Error(), `"no such scenario"`) {
			t.Fatalf("checkTables: %v", err)
		}
	})
	t.Run("a waiting scenario that passes", func(t *testing.T) {
		w := newWorld(context.Background())
		w.bareKeyRefused.Store(true)
		if err := waitVerdict(w, bareKeys, nil); err == nil || !strings.Contains(err.Error(), "passes now") {
			t.Fatalf("waitVerdict: %v", err)
		}
	})
	t.Run("a waiting scenario that fails without the change's symptom", func(t *testing.T) {
		w := newWorld(context.Background())
		if err := waitVerdict(w, bareKeys, errors.New("status 500")); err == nil || !strings.Contains(err.Error(), "not for") {
			t.Fatalf("waitVerdict: %v", err)
		}
	})
	t.Run("a waiting scenario whose deviation is stale", func(t *testing.T) {
		w := newWorld(context.Background())
		w.bareKeyRefused.Store(true)
		if err := waitVerdict(w, bareKeys, errStaleDeviation); err == nil {
			t.Fatal("waitVerdict accepted it")
		}
	})
	t.Run("a waiting scenario that fails with the change's symptom", func(t *testing.T) {
		w := newWorld(context.Background())
		w.bareKeyRefused.Store(true)
		if err := waitVerdict(w, bareKeys, errors.New("status 400")); err != nil {
			t.Fatalf("waitVerdict: %v", err)
		}
	})
	t.Run("the real tables against a file without their scenarios", func(t *testing.T) {
		if err := checkTables(pickles, deviations, waiting); err == nil {
			t.Fatal("checkTables accepted them")
		}
	})
}
