// Command webhookchild is a webhook receiver in the transactional mode,
// run as a subprocess by
// TestWebhook/receiver killed before commit keeps nothing
// (webhook_tx_test.go): it prints its address, and for a delivery inserts
// the consumer's row in the delivery's transaction, prints "inserted", and
// waits to be killed before the commit.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/ctoken/ctoken/pgstore"
	"github.com/ctoken/ctoken/webhook"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	// Never outlive the test that started it, even when that test died
	// before killing it.
	time.AfterFunc(2*time.Minute, func() { os.Exit(2) })
	ctx := context.Background()
	lease, err := time.ParseDuration(os.Getenv("WH_LEASE"))
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, os.Getenv("WH_PG_URL"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(ctx, pool, pgstore.Options{Prefix: os.Getenv("WH_PREFIX"), SweepInterval: -1})
	if err != nil {
		log.Fatal(err)
	}
	v, err := webhook.NewVerifier(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{os.Getenv("WH_SECRET")},
		Replay: store, Namespace: "runs", Lease: lease, Transactional: true})
	if err != nil {
		log.Fatal(err)
	}
	table := os.Getenv("WH_TABLE")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ln.Addr())
	log.Fatal(http.Serve(ln, v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := webhook.DeliveryFrom(r.Context())
		tx, err := pgstore.TxFrom(r.Context())
		if err != nil {
			log.Fatal(err)
		}
		if _, err := tx.Exec(r.Context(), "insert into "+table+" values ($1, 0)", d.ID); err != nil {
			log.Fatal(err)
		}
		fmt.Println("inserted")
		select {} // killed here, between the insert and the commit
	}))))
}
