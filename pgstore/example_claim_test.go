package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ctoken/ctoken/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The table is created once, by an explicit migration at deployment; the
// store then accepts each delivery ID once across the whole fleet and
// refuses the request whenever it cannot decide.
func ExampleStore_Claim() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool, ""); err != nil { // idempotent
		panic(err)
	}
	store, err := pgstore.New(ctx, pool, pgstore.Options{Prefix: "myapp:webhooks:"})
	if err != nil {
		panic(err) // no table, synchronous_commit off, a standby, a clock far behind
	}
	defer store.Close() // stops the sweeper

	deliveryID := "evt_123"
	// Remember the ID for as long as the delivery's signature is accepted.
	first, err := store.Claim(ctx, deliveryID, time.Now().Add(10*time.Minute))
	switch {
	case errors.Is(err, pgstore.ErrUnavailable):
		fmt.Println("503: try again later") // fail closed
	case err != nil:
		fmt.Println("400:", err)
	case !first:
		fmt.Println("200: duplicate delivery, already processed")
	default:
		fmt.Println("200: processing")
	}
}

// Teams that run their own migrations take the table's SQL from Schema.
func ExampleSchema() {
	sql, err := pgstore.Schema("ctoken_replay")
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.SplitN(sql, "\n", 2)[0])
	// Output: CREATE TABLE "ctoken_replay" (
}
