package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ctoken/ctoken/pgstore"
	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The operator's path, run by hand or by a deployment job under a role that
// may create tables, never by the application at start-up: Migrate makes
// (or upgrades) the table, and leaves an existing one alone. A table that
// lost its claims (truncated, emptied) is refused with ErrForgotten, by
// Migrate and by every Store; Rearm opens it again behind a fence as long
// as the longest claim it may have forgotten (here a one-time token's
// 10-minute TTL plus replay.SkewMargin). A restore from an older backup
// keeps its marker and is not detected: docs/pgstore-reference.md ("A
// forgotten table refuses") says what to do.
// Needs a PostgreSQL server (DATABASE_URL), so it is compiled, not run.
func ExampleRearm() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	err = pgstore.Migrate(ctx, pool, "")
	switch {
	case errors.Is(err, pgstore.ErrForgotten):
		// The operator's decision, never a deployment's side effect.
		if err := pgstore.Rearm(ctx, pool, "", 10*time.Minute+replay.SkewMargin); err != nil {
			panic(err)
		}
		fmt.Println("rearmed; every store refuses until the fence ends")
	case err != nil:
		panic(err)
	default:
		fmt.Println("table in service")
	}
}
