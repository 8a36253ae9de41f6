package pgstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func TestScratchPreparedScan(t *testing.T) {
	pool := needServer(t).poolWith(t, func(*pgxpool.Config) {})
	c, err := pool.Acquire(bg())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	q := "select (case when exists (select from pg_catalog.pg_prepared_statements p where p.name operator(pg_catalog.=) $1::pg_catalog.text and not p.from_sql and p.statement operator(pg_catalog.=) $2::pg_catalog.text) then '0' else 'x' end)"
	for _, n := range []int{0, 100, 500} {
		for i := 0; i < n; i++ {
			if _, err := c.Conn().Exec(bg(), fmt.Sprintf("select %d, $1::text /* a statement of some length to look like an application query with a where clause */", i), "a"); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		for range 200 {
			var s string
			if err := c.Conn().QueryRow(bg(), q, "x", "y").Scan(&s); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("n=%d: %v per check", n, time.Since(start)/200)
	}
}
