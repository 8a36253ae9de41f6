package storetest

import (
	"strings"
	"testing"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// TestHarnessLacks: a harness that cannot make what the store calls for
// fails Exercise rather than skipping the kits it would need.
func TestHarnessLacks(t *testing.T) {
	mem := func(*testing.T) replay.Store { return replay.NewMemoryStore(10) }
	two := func(*testing.T) (replay.Store, replay.Store) {
		s := replay.NewMemoryStore(10)
		return s, s
	}
	work := func(*testing.T) (replaytest.WorkStore, replaytest.Effects) { return nil, nil }
	for _, tc := range []struct {
		name  string
		h     Harness
		probe replay.Store
		want  string
	}{
		{"no NewStore", Harness{NewInstances: two}, nil, "needs NewStore and NewInstances"},
		{"no NewInstances", Harness{NewStore: mem}, replay.NewMemoryStore(10), "needs NewStore and NewInstances"},
		{"a Transactor without NewWork", Harness{NewStore: mem, NewInstances: two}, replaytest.NewTxStore(), "needs NewWork"},
		{"a Transactor with NewWork", Harness{NewStore: mem, NewInstances: two, NewWork: work}, replaytest.NewTxStore(), ""},
		{"a store that runs no work", Harness{NewStore: mem, NewInstances: two}, replay.NewMemoryStore(10), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.h.lacks(tc.probe)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("lacks = %q; want %q", got, tc.want)
			}
		})
	}
}
