// Package storetest is the suite a replay store passes, in one call:
// [Exercise] runs every contract kit the store's interfaces call for
// (replaytest's and those of idempotency, mcptoken, webhook and exchange),
// each chosen by type assertion on the store the [Harness] makes, as
// go-cloud's drivertest and river's riverdrivertest do. A store's own
// tests then hold only its engine's mechanism and its faults (a loss,
// replicas that stop: replaytest.RunForgetContract and
// replaytest.RunDurabilityContract, which need the store's own fault).
//
// A store's test calls it once (ExampleExercise); pgstore, redisstore and
// sqlitestore do.
package storetest

import (
	"fmt"
	"testing"

	"github.com/ctoken/ctoken/exchange/exchangetest"
	"github.com/ctoken/ctoken/idempotency/idempotencytest"
	"github.com/ctoken/ctoken/mcptoken/mcptokentest"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
	"github.com/ctoken/ctoken/webhook/webhooktest"
)

// Harness makes the stores [Exercise] runs on. Every call makes stores on
// a key space (a prefix, a table, a file) that no other call shares.
type Harness struct {
	// NewStore returns one store. Required.
	NewStore func(t *testing.T) replay.Store
	// NewInstances returns two stores on one key space, as two instances
	// of one service have. Required.
	NewInstances func(t *testing.T) (a, b replay.Store)
	// NewWork returns a store as NewStore does and the effects its Work's
	// transactions write, in its own database. Required when the store is
	// a [replay.Transactor]; nil otherwise.
	NewWork func(t *testing.T) (replaytest.WorkStore, replaytest.Effects)
}

// Exercise runs, as subtests named after their kits, every contract the
// store from h.NewStore implements: claims and request state for every
// [replay.Store]; leases ([replay.Leaser]); records, idempotent HTTP
// requests, idempotent MCP tool calls and durable MCP tasks
// ([replay.Recorder]); renewals ([replay.Renewer]); reads
// ([replay.Reader]); work in the store's transactions, and idempotent
// HTTP requests and webhook deliveries in them ([replay.Transactor]), and
// Transactional MCP tasks unless its Work holds the only writer
// ([replay.OneWriter]); webhook deliveries and token exchanges on two
// instances. A harness that cannot make what the store calls for fails
// the test.
func Exercise(t *testing.T, h Harness) {
	t.Helper()
	var probe replay.Store
	if h.NewStore != nil {
		probe = h.NewStore(t)
	}
	if lack := h.lacks(probe); lack != "" {
		t.Fatal("storetest: " + lack)
	}
	recorders := func(t *testing.T) (replay.Recorder, replay.Recorder) {
		a, b := h.NewInstances(t)
		ra, okA := a.(replay.Recorder)
		rb, okB := b.(replay.Recorder)
		if !okA || !okB {
			t.Fatalf("storetest: NewInstances returned %T and %T; NewStore's %T is a replay.Recorder", a, b, probe)
		}
		return ra, rb
	}
	kits := []struct {
		name string
		is   bool
		run  func(t *testing.T)
	}{
		{"claim", true, func(t *testing.T) { replaytest.RunClaimContract(t, h.NewStore) }},
		{"request state", true, func(t *testing.T) { replaytest.RunRequestStateContract(t, h.NewStore) }},
		{"webhook", true, func(t *testing.T) { webhooktest.RunContract(t, h.NewInstances) }},
		{"exchange", true, func(t *testing.T) { exchangetest.RunContract(t, h.NewInstances) }},
		{"lease", implements[replaytest.Store](probe), func(t *testing.T) {
			replaytest.RunLeaseContract(t, as[replaytest.Store](h.NewStore))
		}},
		{"record", implements[replaytest.RecordStore](probe), func(t *testing.T) {
			replaytest.RunRecordContract(t, as[replaytest.RecordStore](h.NewStore))
		}},
		{"renew", implements[replaytest.RenewStore](probe), func(t *testing.T) {
			replaytest.RunRenewContract(t, as[replaytest.RenewStore](h.NewStore))
		}},
		{"read", implements[replaytest.ReadStore](probe), func(t *testing.T) {
			replaytest.RunReadContract(t, as[replaytest.ReadStore](h.NewStore))
		}},
		{"idempotency", implements[replay.Recorder](probe), func(t *testing.T) { idempotencytest.RunContract(t, recorders) }},
		{"mcp idempotency", implements[replay.Recorder](probe), func(t *testing.T) { mcptokentest.RunContract(t, recorders) }},
		{"mcp tasks", implements[replay.Recorder](probe), func(t *testing.T) { mcptokentest.RunTasksContract(t, recorders) }},
		{"work", h.NewWork != nil, func(t *testing.T) { replaytest.RunWorkContract(t, h.NewWork) }},
		{"idempotency transactional", h.NewWork != nil, func(t *testing.T) { idempotencytest.RunTransactionalContract(t, h.NewWork) }},
		{"webhook transactional", h.NewWork != nil, func(t *testing.T) { webhooktest.RunTransactionalContract(t, h.NewWork) }},
		{"mcp tasks work", h.NewWork != nil && !holdsWriter(probe), func(t *testing.T) { mcptokentest.RunTasksWorkContract(t, h.NewWork) }},
	}
	for _, k := range kits {
		if k.is {
			t.Run(k.name, k.run)
		}
	}
}

// lacks says what h lacks to exercise probe, a store from h.NewStore (nil
// without one), or "".
func (h Harness) lacks(probe replay.Store) string {
	switch _, tx := probe.(replay.Transactor); {
	case h.NewStore == nil || h.NewInstances == nil:
		return "a Harness needs NewStore and NewInstances"
	case tx && h.NewWork == nil:
		return fmt.Sprintf("%T is a replay.Transactor: the Harness needs NewWork", probe)
	}
	return ""
}

// implements reports whether s is an S.
func implements[S any](s replay.Store) bool {
	_, ok := s.(S)
	return ok
}

// as turns newStore into a maker of S, failing a test whose store is not
// one.
func as[S any](newStore func(t *testing.T) replay.Store) func(t *testing.T) S {
	return func(t *testing.T) S {
		t.Helper()
		s := newStore(t)
		v, ok := s.(S)
		if !ok {
			t.Fatalf("storetest: NewStore returned a %T, which is not a %T as the first store it made was", s, v)
		}
		return v
	}
}

// holdsWriter reports whether a Work of s holds the database's only
// writer, which mcptoken refuses for Transactional tasks.
func holdsWriter(s replay.Store) bool {
	w, ok := s.(replay.OneWriter)
	return ok && w.WorkHoldsWriter()
}
