package idempotencytest_test

import (
	"context"
	"testing"

	"github.com/ctoken/ctoken/idempotency/idempotencytest"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// TestTransactionalContractOnTxStore runs the contract on the memory
// double of a store whose work runs in a transaction. (Not webhooktest's:
// the double refuses the empty record a delivery commits.)
func TestTransactionalContractOnTxStore(t *testing.T) {
	idempotencytest.RunTransactionalContract(t, func(*testing.T) (replaytest.WorkStore, replaytest.Effects) {
		s := replaytest.NewTxStore()
		return s, txEffects{s}
	})
}

// txEffects is replaytest.Effects on a TxStore.
type txEffects struct{ s *replaytest.TxStore }

func (txEffects) Write(ctx context.Context, id string) error { return replaytest.TxWrite(ctx, id) }

func (e txEffects) Count(_ *testing.T, id string) int { return e.s.Committed(id) }
