// Command webhook runs a Standard Webhooks receiver on loopback behind
// ctoken's verifying middleware, then plays the sender: a good delivery, a
// retry of it (a duplicate), a delivery whose body was tampered with in
// transit, one signed with a timestamp outside the 5-minute tolerance, a
// retry that arrives while the first attempt is still being processed, and
// a delivery whose handler fails once and succeeds on the sender's retry.
// It prints what the sender sees and what the handler processed, and exits.
//
// The secret comes from WEBHOOK_SECRET ("whsec_..."); unset, a random one
// is used. Everything stays on 127.0.0.1 and finishes within 10 seconds.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/webhook"
)

func main() {
	log.SetFlags(0)
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// secret returns WEBHOOK_SECRET, or a fresh random demo secret.
func secret() string {
	if s := strings.TrimSpace(os.Getenv("WEBHOOK_SECRET")); s != "" {
		return s
	}
	k := make([]byte, 32)
	rand.Read(k)
	return "whsec_" + base64.StdEncoding.EncodeToString(k)
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

func run(w io.Writer) error {
	out := &lockedWriter{w: w}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	secret := secret()
	verifier, err := webhook.NewVerifier(webhook.Config{
		Scheme:  webhook.StandardWebhooks(),
		Secrets: []string{secret},
		Replay:  replay.NewMemoryStore(10_000), // in a fleet: one shared store
		// Namespace names this endpoint in the store: the same on every
		// instance of the endpoint, different for every other endpoint.
		Namespace: "orders-webhook",
		OnReject: func(r *http.Request, err error) {
			fmt.Fprintf(out, "  receiver refused: %s\n", webhook.Reason(err))
		},
		OnDuplicate: func(r *http.Request, d webhook.Delivery) {
			fmt.Fprintf(out, "  receiver acknowledged %s as already processed\n", d.ID)
		},
	})
	if err != nil {
		return err
	}

	// The receiver: the application handler sees only authentic deliveries,
	// each until it succeeds once, with the body readable as usual. Two
	// deliveries misbehave on purpose: msg_004 is slow (it waits until the
	// sender's copy has been answered) and msg_005 fails on its first
	// attempt.
	var mu sync.Mutex
	var processed []string
	attempts := map[string]int{}
	slowStarted, slowRelease := make(chan struct{}), make(chan struct{})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read error", http.StatusBadRequest)
			return
		}
		d, _ := webhook.DeliveryFrom(r.Context())
		mu.Lock()
		attempts[d.ID]++
		attempt := attempts[d.ID]
		mu.Unlock()
		switch {
		case d.ID == "msg_004":
			close(slowStarted)
			select {
			case <-slowRelease:
			case <-r.Context().Done(): // the lease's deadline: give up
				http.Error(w, "timed out", http.StatusServiceUnavailable)
				return
			}
		case d.ID == "msg_005" && attempt == 1:
			fmt.Fprintf(out, "  handler failed on %s (attempt %d)\n", d.ID, attempt)
			http.Error(w, "database unavailable", http.StatusInternalServerError)
			return
		}
		mu.Lock()
		processed = append(processed, d.ID)
		mu.Unlock()
		fmt.Fprintf(out, "  handler processed %s: %s\n", d.ID, body)
		w.WriteHeader(http.StatusNoContent)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/agent", verifier.Middleware(app))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 2 * time.Second}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	url := "http://" + ln.Addr().String() + "/hooks/agent"
	fmt.Fprintf(out, "receiver listening on %s\n", ln.Addr())

	// The sender.
	sending := webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{secret}}
	signer, err := webhook.NewSigner(sending)
	if err != nil {
		return err
	}
	// A sender whose clock (or queue) is ten minutes behind.
	stale := sending
	stale.Now = func() time.Time { return time.Now().Add(-10 * time.Minute) }
	staleSigner, err := webhook.NewSigner(stale)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 5 * time.Second}
	send := func(label string, s *webhook.Signer, id, signedBody, sentBody string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(sentBody))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		if err := s.Sign(req.Header, id, []byte(signedBody)); err != nil {
			return 0, err
		}
		fmt.Fprintf(out, "%s (%s)\n", label, id)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		status := resp.Status
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			status += ", Retry-After " + ra + "s"
		}
		fmt.Fprintf(out, "  sender got %s\n", status)
		return resp.StatusCode, nil
	}
	expect := func(label string, code, want int) error {
		if code != want {
			return fmt.Errorf("%s: status %d, want %d", label, code, want)
		}
		return nil
	}

	body := `{"event":"statusChange","id":"bc-1","status":"FINISHED"}`
	steps := []struct {
		label            string
		signer           *webhook.Signer
		id, signed, sent string
		wantStatus       int
	}{
		{"1. good delivery", signer, "msg_001", body, body, http.StatusNoContent},
		{"2. the same delivery again (duplicate)", signer, "msg_001", body, body, http.StatusOK},
		{"3. tampered body", signer, "msg_002", body, strings.Replace(body, "FINISHED", "ERROR", 1), http.StatusUnauthorized},
		{"4. old timestamp", staleSigner, "msg_003", body, body, http.StatusUnauthorized},
	}
	for _, s := range steps {
		code, err := send(s.label, s.signer, s.id, s.signed, s.sent)
		if err != nil {
			return err
		}
		if err := expect(s.label, code, s.wantStatus); err != nil {
			return err
		}
	}

	// 5. A retry while the first attempt is still in progress is told to
	// come back later (503), never acknowledged: if the first attempt then
	// failed, the sender would still retry.
	first := make(chan error, 1)
	go func() {
		code, err := send("5. slow delivery, first attempt", signer, "msg_004", body, body)
		if err == nil {
			err = expect("5. first attempt", code, http.StatusNoContent)
		}
		first <- err
	}()
	select {
	case <-slowStarted:
	case err := <-first:
		return fmt.Errorf("the slow delivery finished before its handler started: %v", err)
	}
	code, err := send("5. its retry while the first attempt runs", signer, "msg_004", body, body)
	close(slowRelease)
	if err != nil {
		return err
	}
	if err := expect("5. retry in progress", code, http.StatusServiceUnavailable); err != nil {
		return err
	}
	if err := <-first; err != nil {
		return err
	}
	code, err = send("5. its retry after the first attempt succeeded", signer, "msg_004", body, body)
	if err != nil {
		return err
	}
	if err := expect("5. retry after success", code, http.StatusOK); err != nil {
		return err
	}

	// 6. A handler failure (5xx) releases the delivery: the sender's retry
	// is processed.
	for i, want := range []int{http.StatusInternalServerError, http.StatusNoContent} {
		code, err := send(fmt.Sprintf("6. delivery whose handler fails once, attempt %d", i+1), signer, "msg_005", body, body)
		if err != nil {
			return err
		}
		if err := expect("6. attempt", code, want); err != nil {
			return err
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(processed, ","); got != "msg_001,msg_004,msg_005" {
		return errors.New("handler processed " + got + ", want msg_001, msg_004 and msg_005 once each")
	}
	fmt.Fprintf(out, "handler processed each of %d deliveries once: done\n", len(processed))
	return nil
}
