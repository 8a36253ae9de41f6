package idempotency_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
)

// A client's retry arrives while its first attempt still runs. Without
// Config.Wait it gets 409 at once, which most retrying clients
// (go-retryablehttp, for one) hand their caller as the final answer; with
// Wait, it waits for the first attempt and gets its response, replayed.
func Example_wait() {
	// A fixed test key, for a reproducible example; in production the
	// fleet's ring comes from ctoken.KeyringFromEnv.
	keys, err := ctoken.NewKeyring(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		panic(err)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store: replay.NewMemoryStore(10_000), // one process; see Example_memory
		Caller: func(r *http.Request) (string, error) {
			if u := r.Header.Get("X-User"); u != "" { // stands in for real authentication
				return u, nil
			}
			return "", errors.New("not signed in")
		},
		Keys: keys,            // seals every stored response
		Wait: 5 * time.Second, // under the server's WriteTimeout
	})
	if err != nil {
		panic(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	charges := 0
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		close(started)
		<-release // a slow payment provider
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"ch_1"}`)
	}))

	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":100}`))
		r.Header.Set("X-User", "alice")
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", `"charge-1"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	var wg sync.WaitGroup
	var first *httptest.ResponseRecorder
	wg.Add(2)
	go func() { defer wg.Done(); first = send() }()
	<-started
	var retry *httptest.ResponseRecorder
	go func() { defer wg.Done(); retry = send() }() // the client timed out and retried
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()

	fmt.Println(first.Code, first.Body)
	fmt.Println(retry.Code, retry.Header().Get("Idempotent-Replayed"), retry.Body)
	fmt.Println("charges made:", charges)
	// Output:
	// 201 {"id":"ch_1"}
	// 201 true {"id":"ch_1"}
	// charges made: 1
}
