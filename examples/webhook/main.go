// Command webhook runs a Standard Webhooks receiver on loopback behind
// ctoken's verifying middleware, then plays the sender: a good delivery, a
// retry of it (a duplicate), a delivery whose body was tampered with in
// transit, and one signed with a timestamp outside the 5-minute tolerance.
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
		Replay:  replay.NewMemoryStore(10_000),
		OnReject: func(r *http.Request, err error) {
			fmt.Fprintf(out, "  receiver refused: %s\n", webhook.Reason(err))
		},
	})
	if err != nil {
		return err
	}

	// The receiver: the application handler sees only authentic, first-seen
	// deliveries, with the body readable as usual.
	var mu sync.Mutex
	var processed []string
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read error", http.StatusBadRequest)
			return
		}
		d, _ := webhook.DeliveryFrom(r.Context())
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
		fmt.Fprintf(out, "  sender got %s\n", resp.Status)
		return resp.StatusCode, nil
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
		if code != s.wantStatus {
			return fmt.Errorf("%s: status %d, want %d", s.label, code, s.wantStatus)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(processed, ","); got != "msg_001" {
		return errors.New("handler processed " + got + ", want only msg_001")
	}
	fmt.Fprintf(out, "handler processed %d of %d deliveries: done\n", len(processed), len(steps))
	return nil
}
