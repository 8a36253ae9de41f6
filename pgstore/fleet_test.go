package pgstore

// The fleet tests run three instances of one service, each with a Store of
// its own (its own pool and sweeper) on one PostgreSQL table, as three
// servers behind a load balancer would: one-time tokens
// (ctoken.NewOneTimeIssuer) and single-use request states redeemed over
// HTTP and webhook deliveries through the webhook middleware's leases:
// nothing is accepted while the database is down. (Exactly once across
// instances: TestStore.)

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/webhook"
)

const (
	fleetTTL  = time.Minute
	stateTool = "state.redeem"
	whSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// fleetStores returns three Stores on p's default table sharing one prefix,
// each with a pool of its own.
func fleetStores(t *testing.T, p *pgServer, timeout time.Duration) []*Store {
	t.Helper()
	prefix := uniquePrefix()
	var ss []*Store
	for range 3 {
		ss = append(ss, storeOn(t, p.pool(t), func(o *Options) { o.Prefix = prefix; o.Timeout = timeout }))
	}
	return ss
}

func fleetKeys(t *testing.T) *ctoken.Keyring {
	t.Helper()
	keys, err := ctoken.ParseKeyring(ctoken.EncodeKey(ctoken.RandomKey()))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// instance is one server of the fleet: one-time tokens and single-use
// request states, redeemed through its own Store.
type instance struct {
	onetime *ctoken.OneTimeIssuer
	states  *ctoken.RequestStateCodec
	srv     *httptest.Server
}

func newInstance(t *testing.T, keys *ctoken.Keyring, store replay.Store) *instance {
	t.Helper()
	onetime, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: "fleet-bootstrap", TTL: fleetTTL, Replay: store})
	if err != nil {
		t.Fatal(err)
	}
	states, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keys, Binding: ctoken.BindSubjectAndTool, TTL: fleetTTL, Replay: store})
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{onetime: onetime, states: states}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /onetime/issue", func(w http.ResponseWriter, r *http.Request) {
		tok, err := in.onetime.Mint(map[string]string{"caller": r.Header.Get("X-Caller")})
		if err != nil {
			http.Error(w, "issue failed", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, tok)
	})
	mux.HandleFunc("POST /onetime/redeem", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, ctoken.MaxOneTimeTokenBytes+1))
		_, err := in.onetime.Redeem(r.Context(), string(body), map[string]string{"caller": r.Header.Get("X-Caller")})
		switch {
		case err == nil:
			w.WriteHeader(http.StatusOK)
		case errors.Is(err, ctoken.ErrOneTimeRedeemed):
			w.WriteHeader(http.StatusConflict)
		case errors.Is(err, ctoken.ErrOneTimeInvalid), errors.Is(err, ctoken.ErrOneTimeExpired), errors.Is(err, ctoken.ErrOneTimeClaims):
			w.WriteHeader(http.StatusBadRequest)
		default: // the replay store could not decide: fail closed
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("POST /state/issue", func(w http.ResponseWriter, r *http.Request) {
		flow := make([]byte, 16)
		rand.Read(flow)
		tok, err := in.states.Encode("flow "+hex.EncodeToString(flow), r.Header.Get("X-Caller"), stateTool)
		if err != nil {
			http.Error(w, "issue failed", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, tok)
	})
	mux.HandleFunc("POST /state/redeem", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, (16<<10)+1))
		_, err := in.states.DecodeContext(r.Context(), string(body), r.Header.Get("X-Caller"), stateTool)
		switch {
		case err == nil:
			w.WriteHeader(http.StatusOK)
		case errors.Is(err, ctoken.ErrStateReplayed):
			w.WriteHeader(http.StatusConflict)
		case errors.Is(err, ctoken.ErrStateInvalid), errors.Is(err, ctoken.ErrStateExpired):
			w.WriteHeader(http.StatusBadRequest)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	in.srv = httptest.NewServer(mux)
	t.Cleanup(in.srv.Close)
	return in
}

type fleet struct {
	t         *testing.T
	instances []*instance
	client    *http.Client
}

func newFleet(t *testing.T, stores []*Store) *fleet {
	t.Helper()
	keys := fleetKeys(t)
	f := &fleet{t: t, client: &http.Client{Timeout: 20 * time.Second}}
	for _, s := range stores {
		f.instances = append(f.instances, newInstance(t, keys, s))
	}
	t.Cleanup(f.client.CloseIdleConnections)
	return f
}

// post sends body to instance i and returns the status and reply.
func (f *fleet) post(i int, path, caller, body string) (int, string) {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.instances[i].srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("X-Caller", caller)
	res, err := f.client.Do(req)
	if err != nil {
		f.t.Fatalf("POST %s on i%d: %v", path, i, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func (f *fleet) issue(i int, kind, caller string) string {
	f.t.Helper()
	status, tok := f.post(i, "/"+kind+"/issue", caller, "")
	if status != http.StatusOK || tok == "" {
		f.t.Fatalf("issue %s on i%d: status %d", kind, i, status)
	}
	return tok
}

var singleUseKinds = []string{"onetime", "state"}

// TestFleet pins several instances on one database: refusals while the
// database is down, and what a crash and restart keep (one-time tokens
// across instances and webhook deliveries:
// TestStore).
func TestFleet(t *testing.T) {
	subtests(t, []subtest{
		{"redeems fail closed when the database dies", fleetRedeemsFailClosedWhenTheDatabaseDies},
		{"webhook database down processes nothing", fleetWebhookDatabaseDownRefusesWithoutProcessing},
	})
}

func fleetRedeemsFailClosedWhenTheDatabaseDies(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t)
	f := newFleet(t, fleetStores(t, p, 2*time.Second))
	redeemed, fresh := map[string]string{}, map[string]string{}
	for _, kind := range singleUseKinds {
		redeemed[kind] = f.issue(0, kind, "alice")
		fresh[kind] = f.issue(1, kind, "alice")
		if status, _ := f.post(2, "/"+kind+"/redeem", "alice", redeemed[kind]); status != http.StatusOK {
			t.Fatalf("%s redeem with the database up: status %d", kind, status)
		}
	}
	p.kill()
	for _, kind := range singleUseKinds {
		for i := range f.instances {
			for name, tok := range map[string]string{"fresh": fresh[kind], "redeemed": redeemed[kind]} {
				if status, _ := f.post(i, "/"+kind+"/redeem", "alice", tok); status != http.StatusServiceUnavailable {
					t.Fatalf("%s %s token on i%d with the database down: status %d, want 503", name, kind, i, status)
				}
			}
		}
	}
	// After a crash and restart, the redeemed tokens stay redeemed and the
	// fresh ones are redeemed once.
	must(t, p.restart())
	for _, kind := range singleUseKinds {
		want := map[string]int{"redeemed": http.StatusConflict, "fresh": http.StatusOK}
		for name, tok := range map[string]string{"redeemed": redeemed[kind], "fresh": fresh[kind]} {
			status := http.StatusServiceUnavailable
			for try := 0; status == http.StatusServiceUnavailable && try < 50; try++ { // dead pooled connections
				status, _ = f.post(try%3, "/"+kind+"/redeem", "alice", tok)
			}
			if status != want[name] {
				t.Fatalf("%s %s token after the restart: status %d, want %d", name, kind, status, want[name])
			}
		}
	}
}

// whFleet is webhook receivers, each verifying through its own Store.
type whFleet struct {
	t      *testing.T
	mws    []http.Handler
	signer *webhook.Signer
}

func newWHFleet(t *testing.T, stores []*Store, lease time.Duration, next http.Handler) *whFleet {
	t.Helper()
	f := &whFleet{t: t}
	for _, s := range stores {
		v, err := webhook.NewVerifier(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}, Replay: s, Namespace: "endpoint", Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		f.mws = append(f.mws, v.Middleware(next))
	}
	s, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}})
	if err != nil {
		t.Fatal(err)
	}
	f.signer = s
	return f
}

func (f *whFleet) send(i int, id string) int {
	body := `{"event":"` + id + `"}`
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	if err := f.signer.Sign(req.Header, id, []byte(body)); err != nil {
		f.t.Error(err)
		return 0
	}
	rec := httptest.NewRecorder()
	f.mws[i%len(f.mws)].ServeHTTP(rec, req)
	return rec.Code
}

// countingHandler counts processed deliveries by ID and answers 204, or
// 500 when fail says so.
type countingHandler struct {
	mu    sync.Mutex
	count map[string]int
	delay time.Duration
	fail  func(n int) bool
}

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d, _ := webhook.DeliveryFrom(r.Context())
	h.mu.Lock()
	if h.count == nil {
		h.count = map[string]int{}
	}
	h.count[d.ID]++
	n := h.count[d.ID]
	h.mu.Unlock()
	time.Sleep(h.delay)
	if h.fail != nil && h.fail(n) {
		http.Error(w, "failed", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *countingHandler) processed(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count[id]
}

// A database that is down refuses every delivery with 503 and never calls
// the handler.
func fleetWebhookDatabaseDownRefusesWithoutProcessing(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t)
	next := &countingHandler{}
	f := newWHFleet(t, fleetStores(t, p, 2*time.Second), time.Minute, next)
	if code := f.send(0, "before"); code != http.StatusNoContent {
		t.Fatalf("delivery with the database up: %d", code)
	}
	p.kill()
	for i := range 3 {
		for _, id := range []string{"before", "during"} {
			if code := f.send(i, id); code != http.StatusServiceUnavailable {
				t.Fatalf("%s on i%d with the database down: status %d, want 503", id, i, code)
			}
		}
	}
	if n := next.processed("during"); n != 0 {
		t.Fatalf("handler ran %d times with the database down", n)
	}
}
