package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ctoken/ctoken/redisstore"
	"github.com/redis/go-redis/v9"
)

// A webhook handler accepts each delivery ID once across the whole fleet and
// refuses the request whenever the store cannot decide.
func ExampleStore_Claim() {
	client := redis.NewClient(&redis.Options{
		Addr:                  os.Getenv("REDIS_ADDR"),
		ContextTimeoutEnabled: true, // let deadlines reach the socket
		MaxRetries:            -1,   // a retried SET whose reply was lost would report "duplicate"
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{Prefix: "myapp:webhooks:"})
	if err != nil {
		panic(err)
	}

	deliveryID := "evt_123"
	// Remember the ID for as long as the delivery's signature is accepted.
	first, err := store.Claim(context.Background(), deliveryID, time.Now().Add(10*time.Minute))
	switch {
	case errors.Is(err, redisstore.ErrUnavailable):
		fmt.Println("503: try again later") // fail closed
	case err != nil:
		fmt.Println("400:", err)
	case !first:
		fmt.Println("200: duplicate delivery, already processed")
	default:
		fmt.Println("200: processing")
	}
}
