//go:build fault

package redisstore

// The exactly-once fault test of issue 36 for the Redis store: an HTTP API
// whose operation (a payment) is made idempotent by the idempotency
// middleware on this store's replay.Recorder, under 64 concurrent clients
// that retry every key until they get a 2xx, through a failover, a SIGKILL
// of Redis and a handler that panics.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/observe"
)

const (
	// idemClients is the number of concurrent clients; idemCopies of them
	// send each key at the same time, so idemClients/idemCopies groups work
	// through idemKeysPerGroup keys each, one after the other.
	idemClients      = 64
	idemCopies       = 4
	idemKeysPerGroup = 12
	// idemLease is how long one attempt may hold a key (Config.Lease): it
	// must outlast the fault, so that a confirmation the store could not
	// record during it is recorded by the middleware's retries within the
	// lease (else the key runs again after the lease, which the test would
	// report).
	idemLease = 8 * time.Second
	// idemWork is the handler's work per operation.
	idemWork = 15 * time.Millisecond
	// idemDeadline bounds each subtest's clients.
	idemDeadline = 12 * time.Second
)

// idemKeys seal the test API's stored responses.
var idemKeys = func() *ctoken.Keyring {
	kr, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		panic(err)
	}
	return kr
}()

// payments is the handler of the test's API: it counts the operations it
// completed per key and answers 201 with a body unique to the execution
// (a fresh payment id). For a quarter of the keys (those ending in 0 or
// 5) its first attempt panics before completing.
type payments struct {
	mu       sync.Mutex
	attempts map[string]int
	done     map[string]int
	body     map[string][]byte // the body of the key's completed execution
}

func newPayments() *payments {
	return &payments{attempts: map[string]int{}, done: map[string]int{}, body: map[string][]byte{}}
}

// panicsFirst reports whether the handler panics on key's first attempt.
func panicsFirst(key string) bool { return strings.HasSuffix(key, "0") || strings.HasSuffix(key, "5") }

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("X-Test-Key")
	p.mu.Lock()
	p.attempts[key]++
	n := p.attempts[key]
	p.mu.Unlock()
	if n == 1 && panicsFirst(key) {
		panic("payments: first attempt crashes")
	}
	time.Sleep(idemWork)
	var id [12]byte
	rand.Read(id[:])
	body := []byte(`{"payment":"pay_` + hex.EncodeToString(id[:]) + `","key":"` + key + `"}`)
	p.mu.Lock()
	p.done[key]++
	if p.done[key] == 1 {
		p.body[key] = body
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

// idemRun is one subtest's API: two instances (each its own Store on its
// own client) behind the idempotency middleware, and the clients'
// outcomes.
type idemRun struct {
	t        *testing.T
	api      *payments
	urls     []string
	http     *http.Client
	mu       sync.Mutex
	final    map[string][][]byte // key → every client's final 2xx body
	statuses map[int]int
	outcomes map[observe.Outcome]int // the middleware's, for the log
	errs     atomic.Int64            // transport errors (an instance's handler panicked, ...)
	progress atomic.Int64            // keys answered 2xx
	// confirmFailed counts ConfirmRecord calls that failed (and were
	// retried by the middleware).
	confirmFailed atomic.Int64
}

// confirmCounter is a Store that counts its failed confirmations (which the
// middleware retries within the lease).
type confirmCounter struct {
	*Store
	failed *atomic.Int64
}

func (c confirmCounter) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	err := c.Store.ConfirmRecord(ctx, id, token, until, fp, result)
	if err != nil {
		c.failed.Add(1)
	}
	return err
}

// idemStores is the two instances' stores on srv: one key space, each on a
// client of its own.
func idemStores(t *testing.T, srv *server) []*Store {
	t.Helper()
	s1 := faultStore(t, standaloneClient(t, srv.addr()), 2*time.Second)
	s2 := closing(t, mustNew(t, standaloneClient(t, srv.addr()), Options{Prefix: s1.Prefix(), Timeout: 2 * time.Second, Logger: quietLogger()}))
	return []*Store{s1, s2}
}

// newIdemRun starts the test API's instances, one per store.
func newIdemRun(t *testing.T, stores ...*Store) *idemRun {
	run := &idemRun{t: t, api: newPayments(), final: map[string][][]byte{}, statuses: map[int]int{}, outcomes: map[observe.Outcome]int{}}
	for _, s := range stores {
		mw, err := idempotency.New(idempotency.Config{
			Store:  confirmCounter{s, &run.confirmFailed},
			Keys:   idemKeys,
			Caller: func(*http.Request) (string, error) { return "merchant-1", nil },
			Window: time.Hour,
			Lease:  idemLease,
			Observer: observe.ObserverFunc(func(e observe.Event) {
				run.mu.Lock()
				run.outcomes[e.Outcome]++
				run.mu.Unlock()
			}),
		})
		must(t, err)
		srv := httptest.NewUnstartedServer(mw.Wrap(run.api))
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handler's panics
		srv.Start()
		t.Cleanup(srv.Close)
		run.urls = append(run.urls, srv.URL)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: idemClients}
	t.Cleanup(tr.CloseIdleConnections)
	run.http = &http.Client{Transport: tr, Timeout: 5 * time.Second}
	return run
}

// start runs the clients: group g's idemCopies clients send keys g-0,
// g-1, ... in turn, each retrying its copy (on alternate instances) until
// a 2xx. wait returns when every client is done.
func (run *idemRun) start() (wait func()) {
	var wg sync.WaitGroup
	deadline := time.Now().Add(idemDeadline)
	for c := range idemClients {
		spawn(&wg, func() {
			g := c / idemCopies
			for k := range idemKeysPerGroup {
				if !run.send(c, fmt.Sprintf("g%02d-k%02d", g, k), deadline) {
					return
				}
			}
		})
	}
	return wg.Wait
}

// send retries one key until a 2xx, and records the final body.
func (run *idemRun) send(client int, key string, deadline time.Time) bool {
	body := []byte(`{"amount":100,"currency":"EUR","key":"` + key + `"}`)
	for try := client; ; try++ {
		if time.Now().After(deadline) {
			run.t.Errorf("client %d: key %s not answered 2xx within %v", client, key, idemDeadline)
			return false
		}
		req, _ := http.NewRequest(http.MethodPost, run.urls[try%len(run.urls)]+"/payments", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
		req.Header.Set("X-Test-Key", key)
		res, err := run.http.Do(req)
		if err != nil {
			run.errs.Add(1)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		run.mu.Lock()
		run.statuses[res.StatusCode]++
		run.mu.Unlock()
		switch {
		case err != nil:
			run.errs.Add(1)
		case res.StatusCode/100 == 2:
			run.mu.Lock()
			run.final[key] = append(run.final[key], got)
			run.mu.Unlock()
			run.progress.Add(1)
			return true
		case res.StatusCode == http.StatusConflict, res.StatusCode/100 == 5:
		default:
			run.t.Errorf("client %d: key %s answered %d: %s", client, key, res.StatusCode, got)
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitProgress waits until n keys were answered 2xx, so the fault meets
// the clients mid-run.
func (run *idemRun) waitProgress(n int64) {
	for deadline := time.Now().Add(5 * time.Second); run.progress.Load() < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

// check asserts that every key's operation ran exactly once and that every
// client's final answer is that execution's body, byte for byte.
func (run *idemRun) check() {
	t := run.t
	t.Helper()
	run.mu.Lock()
	defer run.mu.Unlock()
	run.api.mu.Lock()
	defer run.api.mu.Unlock()
	keys, panicked := 0, 0
	for g := range idemClients / idemCopies {
		for k := range idemKeysPerGroup {
			key := fmt.Sprintf("g%02d-k%02d", g, k)
			keys++
			if n := run.api.done[key]; n != 1 {
				t.Errorf("key %s: operation completed %d times, want exactly once", key, n)
				continue
			}
			if panicsFirst(key) && run.api.attempts[key] >= 2 {
				panicked++
			}
			finals := run.final[key]
			if len(finals) != idemCopies {
				t.Errorf("key %s: %d clients got a final answer, want %d", key, len(finals), idemCopies)
			}
			for i, b := range finals {
				if !bytes.Equal(b, run.api.body[key]) {
					t.Errorf("key %s: client %d's final answer %q, want the first response %q", key, i, b, run.api.body[key])
				}
			}
		}
	}
	if panicked == 0 {
		t.Error("no key's handler panicked and then ran")
	}
	t.Logf("%d keys, %d clients: statuses %v, %d transport errors, %d keys ran after their first attempt panicked, %d failed confirmations retried; middleware outcomes %v",
		keys, idemClients, run.statuses, run.errs.Load(), panicked, run.confirmFailed.Load(), run.outcomes)
}

// checkFaultMet fails unless the fault refused requests (503) and failed
// confirmations of responses the handler had produced, which the
// middleware then retried: else the test showed nothing about them.
func (run *idemRun) checkFaultMet() {
	run.t.Helper()
	if run.statuses[http.StatusServiceUnavailable] == 0 {
		run.t.Error("no request was refused during the fault")
	}
	if run.confirmFailed.Load() == 0 {
		run.t.Error("no confirmation failed during the fault: it met no handler's response")
	}
}

// faultMet reports whether the fault refused a request (503) and failed a
// confirmation of a response the handler had produced.
func (run *idemRun) faultMet() bool {
	return run.statuses[http.StatusServiceUnavailable] > 0 && run.confirmFailed.Load() > 0
}

// TestIdempotencyExactlyOnce runs an idempotent payments API (two
// instances of the idempotency middleware) on the Redis store, concurrent
// clients retrying each key until a 2xx and a quarter of the handlers
// panicking once: with no store fault, through a failover with
// Durability{Replicas: 1}, and through a SIGKILL of a Redis with
// appendfsync always. Every key's operation runs exactly once and every
// final answer is the first response byte for byte; in both faults some
// confirmations fail and are retried, and some requests are refused 503.
func TestIdempotencyExactlyOnce(t *testing.T) {
	t.Run("handler panics on its first attempt", func(t *testing.T) {
		run := newIdemRun(t, idemStores(t, newServer(t))...)
		run.start()()
		run.check()
	})

	t.Run("failover with WAIT 1", func(t *testing.T) {
		primary, replica := startPrimaryReplica(t, nil, nil)
		target := new(atomic.Pointer[string])
		addr := primary.addr()
		target.Store(&addr)
		prefix := randomPrefix()
		run := newIdemRun(t, replicatedStore(t, switchingClient(t, target), prefix, 1), replicatedStore(t, switchingClient(t, target), prefix, 1))
		wait := run.start()
		run.waitProgress(idemClients)
		cutReplication(t, primary.addr(), replica.addr())
		time.Sleep(400 * time.Millisecond) // the primary goes on, nothing durable
		primary.stop(syscall.SIGKILL)
		mustDo(t, replica.addr(), "REPLICAOF", "NO", "ONE") // the promotion
		newAddr := replica.addr()
		target.Store(&newAddr)
		rejoinAsReplica(t, primary, replica.addr())
		wait()
		run.check()
		run.checkFaultMet()
	})

	t.Run("SIGKILL and restart, appendfsync always", func(t *testing.T) {
		// A kill lands between two confirmations now and then; every
		// attempt is checked for exactly once, and up to three are run
		// until one meets a confirmation.
		var run *idemRun
		for range 3 {
			rp := newServer(t, "--appendonly", "yes", "--appendfsync", "always")
			run = newIdemRun(t, idemStores(t, rp)...)
			wait := run.start()
			run.waitProgress(idemClients)
			rp.restart(syscall.SIGKILL)
			wait()
			run.check()
			if run.faultMet() {
				break
			}
		}
		run.checkFaultMet()
	})
}
