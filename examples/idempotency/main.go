// Command idempotency runs a tiny payments API on loopback behind ctoken's
// Idempotency-Key middleware, then plays a retrying client: a payment
// whose answer is slower than the client's timeout (the client retries
// with the same key, gets 409 while the first attempt still runs, then the
// first response replayed), the same key with a changed body (422), and a
// payment whose first attempt fails with 503 (the key is released and the
// retry charges once). It prints what the client sees and what the bank
// charged, checks that every payment was charged exactly once, and exits.
//
// Everything stays on 127.0.0.1 and finishes within a few seconds.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
)

func main() {
	log.SetFlags(0)
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// lockedWriter serialises writes from the server and client goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// bank is the side effect the API must perform once per payment.
type bank struct {
	mu      sync.Mutex
	charges map[string]int // by payment reference
	outages map[string]int // how many charges of a reference fail first
}

// charge takes a while, as a card network does, and is not cancelled when
// the client goes away: the middleware records its response for the
// client's retry.
func (b *bank) charge(ref string) (string, error) {
	time.Sleep(800 * time.Millisecond)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.outages[ref] > 0 {
		b.outages[ref]--
		return "", errors.New("card network unavailable")
	}
	b.charges[ref]++
	id := make([]byte, 6)
	rand.Read(id)
	return "pay_" + hex.EncodeToString(id), nil
}

type payment struct {
	Ref      string `json:"ref"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

// newServer returns the payments API: POST /payments, idempotent per
// caller and Idempotency-Key.
func newServer(out io.Writer, b *bank) (http.Handler, error) {
	// Stored responses are sealed with this ring: one process here, so a
	// random key when CTOKEN_KEYS is unset; a fleet shares one ring.
	keys, _, err := ctoken.KeyringFromEnvOrRandom("CTOKEN_KEYS")
	if err != nil {
		return nil, err
	}
	mw, err := idempotency.New(idempotency.Config{
		Store: &replay.MemoryStore{}, // in a fleet: redisstore or pgstore
		Keys:  keys,
		// The caller is the bearer token here; a real API authenticates it.
		Caller: func(r *http.Request) (string, error) {
			if c, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && c != "" {
				return c, nil
			}
			return "", errors.New("no bearer token")
		},
		Required: true,            // a payment without a key is refused (400)
		Lease:    5 * time.Second, // the handler's context ends after 3.75 s
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p payment
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Amount <= 0 {
			http.Error(w, "bad payment", http.StatusBadRequest) // 4xx: recorded too
			return
		}
		id, err := b.charge(p.Ref)
		if err != nil {
			fmt.Fprintf(out, "  server: charging %s failed: %v\n", p.Ref, err)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "try again", http.StatusServiceUnavailable) // 5xx: the key is released
			return
		}
		fmt.Fprintf(out, "  server: charged %s %d %s as %s\n", p.Ref, p.Amount, p.Currency, id)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/"+id)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"id": id, "ref": p.Ref, "amount": p.Amount, "currency": p.Currency})
	})))
	return mux, nil
}

// client sends payments with an Idempotency-Key and retries them.
type client struct {
	out  io.Writer
	base string
	http *http.Client
}

// pay sends one payment with key, retrying timeouts, 409 (after
// Retry-After, shortened for the demo) and 5xx with the same key and
// body, and returns the final status and body.
func (c *client) pay(key string, p payment) (int, string, error) {
	body, _ := json.Marshal(p)
	for attempt := 1; attempt <= 20; attempt++ {
		req, err := http.NewRequest(http.MethodPost, c.base+"/payments", strings.NewReader(string(body)))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", strconv.Quote(key))
		resp, err := c.http.Do(req)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				fmt.Fprintf(c.out, "client: attempt %d timed out; retrying with the same key\n", attempt)
				continue
			}
			return 0, "", err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text := strings.TrimSpace(string(b))
		switch {
		case resp.StatusCode == http.StatusConflict:
			fmt.Fprintf(c.out, "client: attempt %d got 409 Conflict, Retry-After %ss: the first attempt is still running\n", attempt, resp.Header.Get("Retry-After"))
			time.Sleep(250 * time.Millisecond) // a real client waits Retry-After
			continue
		case resp.StatusCode >= 500:
			fmt.Fprintf(c.out, "client: attempt %d got %d %s; retrying with the same key\n", attempt, resp.StatusCode, http.StatusText(resp.StatusCode))
			time.Sleep(100 * time.Millisecond)
			continue
		}
		replayed := ""
		if resp.Header.Get(idempotency.ReplayedHeader) == "true" {
			replayed = " (Idempotent-Replayed: true)"
		}
		fmt.Fprintf(c.out, "client: attempt %d got %d %s%s: %s\n", attempt, resp.StatusCode, http.StatusText(resp.StatusCode), replayed, text)
		return resp.StatusCode, text, nil
	}
	return 0, "", errors.New("gave up after 20 attempts")
}

func run(w io.Writer) error {
	out := &lockedWriter{w: w}
	b := &bank{charges: map[string]int{}, outages: map[string]int{"order-2": 1}}
	h, err := newServer(out, b)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	c := &client{out: out, base: "http://" + ln.Addr().String(), http: &http.Client{Timeout: 150 * time.Millisecond}}

	fmt.Fprintln(out, "1. a payment slower than the client's timeout, retried with the same key")
	_, first, err := c.pay("key-order-1", payment{Ref: "order-1", Amount: 100, Currency: "eur"})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "2. the same key again, after the answer: replayed, not charged again")
	c.http.Timeout = 2 * time.Second
	_, again, err := c.pay("key-order-1", payment{Ref: "order-1", Amount: 100, Currency: "eur"})
	if err != nil {
		return err
	}
	if again != first {
		return fmt.Errorf("replayed body %q differs from the first %q", again, first)
	}
	fmt.Fprintln(out, "3. the same key with a changed amount")
	if status, _, err := c.pay("key-order-1", payment{Ref: "order-1", Amount: 999, Currency: "eur"}); err != nil {
		return err
	} else if status != http.StatusUnprocessableEntity {
		return fmt.Errorf("changed body got %d, want 422", status)
	}
	fmt.Fprintln(out, "4. a payment whose first attempt fails with 503: the key is released")
	if status, _, err := c.pay("key-order-2", payment{Ref: "order-2", Amount: 250, Currency: "usd"}); err != nil {
		return err
	} else if status != http.StatusCreated {
		return fmt.Errorf("order-2 got %d, want 201", status)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for ref, n := range b.charges {
		if n != 1 {
			return fmt.Errorf("%s charged %d times", ref, n)
		}
	}
	if len(b.charges) != 2 {
		return fmt.Errorf("%d payments charged, want 2", len(b.charges))
	}
	fmt.Fprintf(out, "bank charged each of %d payments exactly once: done\n", len(b.charges))
	return nil
}
