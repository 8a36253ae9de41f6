package idempotency_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
)

// A payments endpoint made idempotent: the client's retry under the same
// key gets the first response, and the payment is made once. The package
// doc opens with this Example's body.
func ExampleNew() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	if err != nil {
		log.Fatal(err)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store:  replay.NewMemoryStore(0),                                      // forgets keys at a restart; sqlitestore keeps them
		Caller: func(*http.Request) (string, error) { return "user:42", nil }, // from your authentication
		Keys:   keys,                                                          // seals the stored responses
	})
	if err != nil {
		log.Fatal(err)
	}
	payments := 0
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payments++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_%d"}`, payments)
	}))

	for range 2 { // the request, then the client's retry with the same key
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", `"order-1"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Body, "replayed:", w.Header().Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("payments made:", payments)
	// Output:
	// 201 {"id":"pay_1"} replayed: false
	// 201 {"id":"pay_1"} replayed: true
	// payments made: 1
}
