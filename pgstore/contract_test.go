package pgstore

import (
	"testing"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

func TestLeaseContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	replaytest.RunLeaseContract(t, func(t *testing.T) replaytest.Store { return storeOn(t, pool) })
}

func TestClaimContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	replaytest.RunClaimContract(t, func(t *testing.T) replay.Store { return storeOn(t, pool) })
}

// TestForgetContract: the table loses everything (TRUNCATE, DELETE, or
// dropped); no ID claimed, confirmed or leased before is accepted again.
// For PostgreSQL a crash does not forget (TestLoad/crash mid-load loses
// no acknowledged claim); these are an operator's acts.
func TestForgetContract(t *testing.T) {
	for _, forget := range []string{"TRUNCATE", "DELETE FROM", "DROP TABLE"} {
		t.Run(forget, func(t *testing.T) {
			t.Parallel() // a table of its own
			p := needServer(t)
			pool := p.pool(t)
			name := migratedTable(t, pool)
			replaytest.RunForgetContract(t,
				func(t *testing.T) replaytest.Store { return storeOn(t, pool, func(o *Options) { o.Table = name }) },
				func(t *testing.T) {
					if _, err := pool.Exec(bg(), forget+` "`+name+`"`); err != nil {
						t.Fatal(err)
					}
				})
		})
	}
}

// TestRequestStateContract: no refusal (caller, tool, arguments, audience)
// consumes a single-use request state held in PostgreSQL; the right request
// opens it afterwards exactly once (replaytest.RunRequestStateContract).
func TestRequestStateContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	replaytest.RunRequestStateContract(t, func(t *testing.T) replay.Store { return storeOn(t, pool) })
}
