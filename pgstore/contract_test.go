package pgstore

import (
	"testing"

	"github.com/ctoken/ctoken/replay/replaytest"
)

func TestLeaseContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	replaytest.RunLeaseContract(t, func(t *testing.T) replaytest.Store { return storeOn(t, pool) })
}
