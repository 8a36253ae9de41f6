package drivertest

// The payments flow of issue 53, end to end, with real processes and a
// real retrying client: an API server (this test binary started again as
// a subprocess, on the same file each time) runs the idempotency
// middleware in front of a handler that charges by inserting a row; its
// first response is lost after the charge is committed, the server is
// SIGKILLed and started again on the same database file, and stripe-go's
// own retry, with the same Idempotency-Key, reaches the new process.
// On the SQLite store in the transactional mode the retry gets the first
// response: one charge. On replay.MemoryStore (the contrast, the issue's
// finding) the new process has forgotten the key: two charges.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/stripe/stripe-go/v85"
)

// The payments server's environment. paymentsServerEnv selects the
// store ("sqlite" or "memory") and makes the test binary run the server
// instead of its tests.
const (
	paymentsServerEnv = "CTOKEN_DRIVERTEST_PAYMENTS_SERVER"
	paymentsDBEnv     = "CTOKEN_DRIVERTEST_PAYMENTS_DB"
	paymentsAddrEnv   = "CTOKEN_DRIVERTEST_PAYMENTS_ADDR"
	paymentsKeyEnv    = "CTOKEN_DRIVERTEST_PAYMENTS_KEY"
	paymentsLoseEnv   = "CTOKEN_DRIVERTEST_PAYMENTS_LOSE_FIRST"
)

func init() {
	if store := os.Getenv(paymentsServerEnv); store != "" {
		if err := paymentsServer(store); err != nil {
			fmt.Fprintln(os.Stderr, "payments server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// paymentsServer is the subprocess: it opens the database file with the
// binary's driver, builds the store ("sqlite": sqlitestore, the
// middleware Transactional; "memory": a replay.MemoryStore, the handler
// writing through the pool) and serves POST /v1/charges on the address
// given, telling its parent on stdout: "listening <addr>", then per
// request "served <status> replayed=<header> key=<key>", or, for the
// first request when asked to lose it, "committed <status>" once the
// middleware has recorded the response, after which it holds the
// connection without answering until it is killed.
func paymentsServer(store string) error {
	ctx := context.Background()
	db, err := sql.Open(driver.SQLName, driver.DSN(os.Getenv(paymentsDBEnv), Safe))
	if err != nil {
		return err
	}
	keys, err := ctoken.ParseKeyring(os.Getenv(paymentsKeyEnv))
	if err != nil {
		return err
	}
	cfg := idempotency.Config{
		Keys: keys,
		Caller: func(r *http.Request) (string, error) {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || tok == "" {
				return "", errors.New("no bearer token")
			}
			return tok, nil
		},
		Required: true,
		Lease:    10 * time.Second,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	switch store {
	case "sqlite":
		s, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
		if err != nil {
			return err
		}
		cfg.Store, cfg.Transactional = s, true
	case "memory":
		cfg.Store = &replay.MemoryStore{}
	default:
		return fmt.Errorf("unknown store %q", store)
	}
	mw, err := idempotency.New(cfg)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/charges", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		var id [8]byte
		rand.Read(id[:])
		body := fmt.Sprintf(`{"id":"ch_%x","object":"charge","amount":%s,"currency":%q}`, id, r.PostForm.Get("amount"), r.PostForm.Get("currency"))
		insert := db.ExecContext
		if cfg.Transactional {
			tx, err := sqlitestore.TxFrom(r.Context())
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			insert = tx.ExecContext
		}
		if _, err := insert(r.Context(), `INSERT INTO charges (ref, body) VALUES (?, ?)`, r.Header.Get("Idempotency-Key"), body); err != nil {
			http.Error(w, "insert: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	})))

	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	var lose atomic.Bool
	lose.Store(os.Getenv(paymentsLoseEnv) == "1")
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lose.CompareAndSwap(true, false) {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				say("hijack failed: %v", err)
				return
			}
			say("committed %d", rec.Code)
			defer conn.Close()
			select {} // until killed: the response is never sent
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		say("served %d replayed=%s key=%s", rec.Code, rec.Header().Get(idempotency.ReplayedHeader), r.Header.Get("Idempotency-Key"))
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})}
	// The address of the process before, just killed: its port may take
	// a moment to be free.
	var ln net.Listener
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", os.Getenv(paymentsAddrEnv)); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	say("listening %s", ln.Addr())
	return srv.Serve(ln)
}

// paymentsProcess is a running payments server.
type paymentsProcess struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *bytes.Buffer
}

// startPayments starts the payments server on the database at path,
// listening on addr, and returns it once it listens, with its address.
func startPayments(t *testing.T, store, path, addr, key string, loseFirst bool) (*paymentsProcess, string) {
	t.Helper()
	lose := "0"
	if loseFirst {
		lose = "1"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), paymentsServerEnv+"="+store, paymentsDBEnv+"="+path,
		paymentsAddrEnv+"="+addr, paymentsKeyEnv+"="+key, paymentsLoseEnv+"="+lose)
	p := &paymentsProcess{cmd: cmd, lines: make(chan string, 16), stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("payments server %d (%s) stderr:\n%s", cmd.Process.Pid, store, p.stderr)
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	listening, _ := strings.CutPrefix(p.next(t, "its address"), "listening ")
	return p, listening
}

// next returns the server's next line on stdout.
func (p *paymentsProcess) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.cmd.Wait()
			t.Fatalf("the payments server exited (%v) before %s; stderr:\n%s", p.cmd.ProcessState, what, p.stderr)
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("the payments server did not report %s within 30 s", what)
	}
	return ""
}

// kill SIGKILLs the server (by its PID) and waits for it; once done, it
// does nothing.
func (p *paymentsProcess) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}

// TestPaymentsAcrossARestart: stripe-go creates a charge with an
// Idempotency-Key and network retries on; the server commits the charge
// and its response, and is SIGKILLed before the response is sent; a new
// server process starts on the same file and address; stripe-go's own
// retry, with the same key, reaches it. On the SQLite store the retry is
// answered with the first response, replayed, and the table holds one
// charge; on replay.MemoryStore the new process runs the handler again:
// two charges under one key, the client holding the second.
func TestPaymentsAcrossARestart(t *testing.T) {
	tests := []struct {
		name, store string
		charges     int
		replayed    string
	}{
		{"sqlitestore transactional: one charge, the retry replayed", "sqlite", 1, "true"},
		{"MemoryStore: the restart forgets the key, two charges", "memory", 2, ""},
	}
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				paymentsAcrossARestart(t, d, tc.store, tc.charges, tc.replayed)
			})
		}
	})
}

func paymentsAcrossARestart(t *testing.T, d Driver, store string, wantCharges int, wantReplayed string) {
	db, path := openMigrated(t, d)
	if _, err := db.ExecContext(context.Background(), chargesSchema); err != nil {
		t.Fatal(err)
	}
	key := ctoken.EncodeKey(ctoken.RandomKey())
	first, addr := startPayments(t, store, path, "127.0.0.1:0", key, true)

	sc := stripe.NewClient("sk_test_alice", stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String("http://" + addr),
		HTTPClient:        &http.Client{Timeout: 20 * time.Second},
		MaxNetworkRetries: stripe.Int64(6),
		EnableTelemetry:   stripe.Bool(false),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})))
	const idemKey = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	type result struct {
		ch  *stripe.Charge
		err error
	}
	done := make(chan result, 1)
	go func() {
		p := &stripe.ChargeCreateParams{Amount: stripe.Int64(1999), Currency: stripe.String("eur")}
		p.IdempotencyKey = stripe.String(idemKey)
		ch, err := sc.V1Charges.Create(context.Background(), p)
		done <- result{ch, err}
	}()

	if l := first.next(t, "the first request"); l != "committed 200" {
		t.Fatalf("the first server said %q, want committed 200", l)
	}
	first.kill()
	before := charges(t, db)[idemKey]
	if len(before) != 1 {
		t.Fatalf("%d charges after the first server was killed; want the 1 it committed", len(before))
	}

	second, addr2 := startPayments(t, store, path, addr, key, false)
	if addr2 != addr {
		t.Fatalf("the new server listens on %s, not %s", addr2, addr)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("stripe-go did not return within 30 s")
	}
	if r.err != nil {
		t.Fatalf("stripe-go: %v", r.err)
	}
	served := second.next(t, "the retry")
	if want := "served 200 replayed=" + wantReplayed + " key=" + idemKey; served != want {
		t.Fatalf("the new server said %q, want %q", served, want)
	}
	got := charges(t, db)[idemKey]
	if len(got) != wantCharges {
		t.Fatalf("%d charges under the key; want %d", len(got), wantCharges)
	}
	// The client holds the charge of the last execution: the first one,
	// replayed, when it ran once.
	var last struct{ ID string }
	if err := json.Unmarshal([]byte(got[len(got)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if r.ch.ID != last.ID || r.ch.LastResponse.Header.Get(idempotency.ReplayedHeader) != wantReplayed {
		t.Fatalf("the client holds charge %q (replayed %q); want %q (replayed %q)", r.ch.ID, r.ch.LastResponse.Header.Get(idempotency.ReplayedHeader), last.ID, wantReplayed)
	}
	t.Logf("%s: %d charge(s), the client's retry answered by process %d after process %d was killed", store, len(got), second.cmd.Process.Pid, first.cmd.Process.Pid)
}
