package idempotency_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
)

// A payments endpoint made idempotent in one process: the retry of a
// request gets the first response, a changed request under the same key
// gets 422. The memory store forgets every key when the process restarts:
// one machine gives sqlitestore's Store, a fleet redisstore's or pgstore's.
func Example_memory() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; in production: ctoken.KeyringFromEnv, one ring for the fleet
	if err != nil {
		panic(err)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store: &replay.MemoryStore{}, // a shared store (redisstore, pgstore) for a fleet
		Caller: func(r *http.Request) (string, error) {
			if u := r.Header.Get("X-User"); u != "" { // stands in for real authentication
				return u, nil
			}
			return "", errors.New("not signed in")
		},
		Required: true,
		Keys:     keys, // seals every stored response
	})
	if err != nil {
		panic(err)
	}
	payments := 0
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payments++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_%d"}`, payments)
	})))

	send := func(key, body string) {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		r.Header.Set("X-User", "alice")
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Body)
		if w.Header().Get("Content-Type") == "application/problem+json" {
			var p struct{ Title string }
			json.Unmarshal(b, &p)
			b = []byte("problem: " + p.Title)
		}
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), string(b))
	}
	send(`"order-1"`, `{"amount":100}`)
	send(`"order-1"`, `{ "amount": 100 }`) // a retry: replayed
	send(`"order-1"`, `{"amount":200}`)    // another request under the same key
	send(`order-1`, `{"amount":100}`)      // the same key, bare (as stripe-go sends it): replayed
	send(`order 1`, `{"amount":100}`)      // neither a structured-field string nor a bare key
	fmt.Println("payments made:", payments)
	// Output:
	// 201  {"id":"pay_1"}
	// 201 true {"id":"pay_1"}
	// 422  problem: Unprocessable Entity
	// 201 true {"id":"pay_1"}
	// 400  problem: Bad Request
	// payments made: 1
}
