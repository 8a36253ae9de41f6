package redisstore

// The fleet tests run three HTTP instances of one service on loopback, as a
// load balancer would see them: every instance builds its own CursorIssuer
// and RequestStateCodec from the same keys and session read from the
// environment, and a round-robin client sends each request to the next
// instance. Single-use things — ctoken.OneTimeIssuer tokens and single-use
// request states — are redeemed through a Redis ReplayStore shared by the
// fleet.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

const (
	envFleetKeys    = "CTOKEN_KEYS"    // keyring, primary first
	envFleetSession = "CTOKEN_SESSION" // cursor session shared by the fleet

	fleetItems    = 10_000
	fleetPageSize = 100
	fleetPages    = fleetItems / fleetPageSize
	oneTimeTTL    = time.Minute
	stateTool     = "state.redeem"
	listTool      = "items.list"
)

// listState is the typed cursor state: where the next page starts.
type listState struct {
	Offset uint32 `cbor:"1,keyasint"`
}

// fleetConfig is what an instance builds from the environment at start (or
// at a reload after a key rotation).
type fleetConfig struct {
	cursors *ctoken.CursorIssuer
	onetime *ctoken.OneTimeIssuer
	states  *ctoken.RequestStateCodec // single-use
}

// configFromEnv reads the keys and the session as a fleet instance does. A
// missing session is an error: a per-instance random session would make
// every instance refuse the others' cursors.
func configFromEnv(store replay.Store) (*fleetConfig, error) {
	keys, err := ctoken.KeyringFromEnv(envFleetKeys)
	if err != nil {
		return nil, err
	}
	session := os.Getenv(envFleetSession)
	if session == "" {
		return nil, fmt.Errorf("%s is not set: a fleet needs one shared session", envFleetSession)
	}
	cursors, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Session: []byte(session)})
	if err != nil {
		return nil, err
	}
	onetime, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: "fleet-bootstrap", TTL: oneTimeTTL, Replay: store})
	if err != nil {
		return nil, err
	}
	states, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keys, Binding: ctoken.BindSubjectAndTool, TTL: oneTimeTTL, Replay: store,
	})
	if err != nil {
		return nil, err
	}
	return &fleetConfig{cursors: cursors, onetime: onetime, states: states}, nil
}

// instance is one server of the fleet.
type instance struct {
	name   string
	cfg    atomic.Pointer[fleetConfig]
	replay replay.Store // shared by the fleet; nil (a private store) when the test needs none
	srv    *httptest.Server
	pages  atomic.Int64 // pages served since start
}

// fleetResp is every endpoint's JSON reply.
type fleetResp struct {
	Instance string `json:"instance"`
	Items    []int  `json:"items,omitempty"`
	Next     string `json:"next,omitempty"`
	Token    string `json:"token,omitempty"`
	Code     int    `json:"code,omitempty"`  // ctoken.ErrorCode of a refused cursor
	Error    string `json:"error,omitempty"` // ctoken.Reason or a fixed text
	Status   int    `json:"-"`
}

func (in *instance) reply(w http.ResponseWriter, status int, r fleetResp) {
	r.Instance = in.name
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(r)
}

// The caller's identity would come from authentication; the header stands in.
func callerOf(r *http.Request) string { return r.Header.Get("X-Caller") }

func (in *instance) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, r *http.Request) {
		cfg := in.cfg.Load()
		args, err := ctoken.ArgsFingerprint(map[string]string{"collection": r.URL.Query().Get("collection")})
		if err != nil {
			in.reply(w, http.StatusBadRequest, fleetResp{Error: "bad arguments"})
			return
		}
		scope := ctoken.CursorScope{ToolID: listTool, CallerID: callerOf(r), Args: args}
		var st listState
		if c := r.URL.Query().Get("cursor"); c != "" {
			st, _, err = ctoken.VerifyState[listState](cfg.cursors, c, scope)
			if err != nil {
				status := http.StatusBadRequest
				if errors.Is(err, ctoken.ErrCursorExpired) {
					status = http.StatusGone
				}
				in.reply(w, status, fleetResp{Code: ctoken.ErrorCode(err), Error: ctoken.Reason(err).String()})
				return
			}
			if st.Offset == 0 || st.Offset >= fleetItems || st.Offset%fleetPageSize != 0 {
				in.reply(w, http.StatusBadRequest, fleetResp{Error: "offset out of range"})
				return
			}
		}
		end := min(int(st.Offset)+fleetPageSize, fleetItems)
		resp := fleetResp{Items: make([]int, 0, end-int(st.Offset))}
		for i := int(st.Offset); i < end; i++ {
			resp.Items = append(resp.Items, i)
		}
		if end < fleetItems {
			resp.Next, err = ctoken.IssueState(cfg.cursors, scope, uint32(end/fleetPageSize), listState{Offset: uint32(end)})
			if err != nil {
				in.reply(w, http.StatusInternalServerError, fleetResp{Error: "issue failed"})
				return
			}
		}
		in.pages.Add(1)
		in.reply(w, http.StatusOK, resp)
	})
	mux.HandleFunc("POST /onetime/issue", func(w http.ResponseWriter, r *http.Request) {
		tok, err := in.cfg.Load().onetime.Mint(map[string]string{"caller": callerOf(r)})
		if err != nil {
			in.reply(w, http.StatusInternalServerError, fleetResp{Error: "issue failed"})
			return
		}
		in.reply(w, http.StatusOK, fleetResp{Token: tok})
	})
	mux.HandleFunc("POST /onetime/redeem", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, ctoken.MaxOneTimeTokenBytes+1))
		if err != nil {
			in.reply(w, http.StatusBadRequest, fleetResp{Error: "unreadable body"})
			return
		}
		_, err = in.cfg.Load().onetime.Redeem(r.Context(), string(body), map[string]string{"caller": callerOf(r)})
		switch {
		case err == nil:
			in.reply(w, http.StatusOK, fleetResp{})
		case errors.Is(err, ctoken.ErrOneTimeRedeemed):
			in.reply(w, http.StatusConflict, fleetResp{Error: "already redeemed"})
		case errors.Is(err, ctoken.ErrOneTimeInvalid), errors.Is(err, ctoken.ErrOneTimeExpired),
			errors.Is(err, ctoken.ErrOneTimeClaims):
			in.reply(w, http.StatusBadRequest, fleetResp{Error: ctoken.Reason(err).String()})
		default: // the replay store could not decide: fail closed
			in.reply(w, http.StatusServiceUnavailable, fleetResp{Error: "replay store unavailable"})
		}
	})
	mux.HandleFunc("POST /state/issue", func(w http.ResponseWriter, r *http.Request) {
		// A signed state is deterministic: the same state for the same
		// caller in the same second is the same token, and single-use mode
		// would accept only one of them. A random flow ID keeps each distinct.
		flow := make([]byte, 16)
		rand.Read(flow)
		tok, err := in.cfg.Load().states.Encode("flow "+hex.EncodeToString(flow)+": step 2 of 3", callerOf(r), stateTool)
		if err != nil {
			in.reply(w, http.StatusInternalServerError, fleetResp{Error: "issue failed"})
			return
		}
		in.reply(w, http.StatusOK, fleetResp{Token: tok})
	})
	mux.HandleFunc("POST /state/redeem", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, (16<<10)+1))
		if err != nil {
			in.reply(w, http.StatusBadRequest, fleetResp{Error: "unreadable body"})
			return
		}
		_, err = in.cfg.Load().states.DecodeContext(r.Context(), string(body), callerOf(r), stateTool)
		switch {
		case err == nil:
			in.reply(w, http.StatusOK, fleetResp{})
		case errors.Is(err, ctoken.ErrStateReplayed):
			in.reply(w, http.StatusConflict, fleetResp{Error: "already used"})
		case errors.Is(err, ctoken.ErrStateInvalid), errors.Is(err, ctoken.ErrStateExpired):
			in.reply(w, http.StatusBadRequest, fleetResp{Error: ctoken.Reason(err).String()})
		default: // the replay store could not decide: fail closed
			in.reply(w, http.StatusServiceUnavailable, fleetResp{Error: "replay store unavailable"})
		}
	})
	return mux
}

// fleet is three instances behind a round-robin client.
type fleet struct {
	t         *testing.T
	instances []*instance
	client    *http.Client
	next      *atomic.Uint64 // round-robin position
}

// withT returns a view of f that reports failures to t (a subtest).
func (f *fleet) withT(t *testing.T) *fleet {
	return &fleet{t: t, instances: f.instances, client: f.client, next: f.next}
}

func newFleet(t *testing.T, n int, store replay.Store) *fleet {
	t.Helper()
	f := &fleet{t: t, client: &http.Client{Timeout: 10 * time.Second}, next: new(atomic.Uint64)}
	for i := range n {
		in := &instance{name: "i" + strconv.Itoa(i), replay: store}
		cfg, err := configFromEnv(store)
		if err != nil {
			t.Fatal(err)
		}
		in.cfg.Store(cfg)
		in.srv = httptest.NewServer(in.handler()) // binds 127.0.0.1
		f.instances = append(f.instances, in)
	}
	t.Cleanup(func() {
		for _, in := range f.instances {
			in.srv.Close()
		}
		f.client.CloseIdleConnections()
	})
	return f
}

// reload rebuilds instance i's issuer and codec from the environment, as a
// rolling config reload does.
func (f *fleet) reload(i int) {
	f.t.Helper()
	cfg, err := configFromEnv(f.instances[i].replay)
	if err != nil {
		f.t.Fatal(err)
	}
	f.instances[i].cfg.Store(cfg)
}

// restart stops instance i and starts it again on the same address with a
// configuration read afresh from the environment.
func (f *fleet) restart(i int) {
	f.t.Helper()
	in := f.instances[i]
	addr := in.srv.Listener.Addr().String()
	in.srv.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		f.t.Fatalf("restart %s: %v", in.name, err)
	}
	cfg, err := configFromEnv(f.instances[i].replay)
	if err != nil {
		f.t.Fatal(err)
	}
	in.cfg.Store(cfg)
	in.pages.Store(0)
	srv := httptest.NewUnstartedServer(in.handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	in.srv = srv
}

// do sends one request to instance i (or, for i < 0, to the next instance in
// round-robin order).
func (f *fleet) do(i int, method, path, caller string, body []byte) fleetResp {
	f.t.Helper()
	if i < 0 {
		i = int(f.next.Add(1)-1) % len(f.instances)
	}
	req, err := http.NewRequest(method, f.instances[i].srv.URL+path, bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("X-Caller", caller)
	res, err := f.client.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s on %s: %v", method, path, f.instances[i].name, err)
	}
	defer res.Body.Close()
	var r fleetResp
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		f.t.Fatalf("%s %s on %s: status %d, undecodable reply: %v", method, path, f.instances[i].name, res.StatusCode, err)
	}
	r.Status = res.StatusCode
	return r
}

// lister is a client paging through the collection, starting over when told
// its cursor expired (code 1020).
type lister struct {
	f        *fleet
	caller   string
	cursor   string
	seen     map[int]int
	done     bool
	requests int
	restarts int
	served   map[string]int // pages per instance in the current pass
}

func newLister(f *fleet, caller string) *lister {
	return &lister{f: f, caller: caller, seen: map[int]int{}, served: map[string]int{}}
}

func (l *lister) startOver() {
	l.cursor, l.done = "", false
	l.seen, l.served = map[int]int{}, map[string]int{}
	l.restarts++
}

// step fetches one page and returns the refusal's code (0 when served).
func (l *lister) step() int {
	l.f.t.Helper()
	if l.done {
		l.f.t.Fatal("step after the last page")
	}
	l.requests++
	r := l.f.do(-1, http.MethodGet, "/items?collection=books&cursor="+url.QueryEscape(l.cursor), l.caller, nil)
	if r.Status != http.StatusOK {
		if r.Code == 0 {
			l.f.t.Fatalf("page refused by %s without a cursor code: status %d, %q", r.Instance, r.Status, r.Error)
		}
		return r.Code
	}
	for _, it := range r.Items {
		l.seen[it]++
	}
	l.served[r.Instance]++
	l.cursor = r.Next
	l.done = r.Next == ""
	return 0
}

// steps fetches n pages, each of which must be served.
func (l *lister) steps(n int) {
	l.f.t.Helper()
	for range n {
		if code := l.step(); code != 0 {
			l.f.t.Fatalf("page %d refused with code %d", len(l.seen)/fleetPageSize+1, code)
		}
	}
}

// finish pages to the end; every page must be served.
func (l *lister) finish() {
	l.f.t.Helper()
	for i := 0; !l.done; i++ {
		if i > fleetPages {
			l.f.t.Fatal("more pages than the collection has")
		}
		l.steps(1)
	}
}

// checkComplete asserts every item was seen exactly once in this pass.
func (l *lister) checkComplete() {
	l.f.t.Helper()
	if !l.done {
		l.f.t.Fatal("listing not finished")
	}
	if len(l.seen) != fleetItems {
		l.f.t.Fatalf("saw %d distinct items, want %d", len(l.seen), fleetItems)
	}
	for i := range fleetItems {
		if n := l.seen[i]; n != 1 {
			l.f.t.Fatalf("item %d seen %d times, want exactly once", i, n)
		}
	}
}

func fleetKey() string { return ctoken.EncodeKey(ctoken.RandomKey()) }

// TestFleet pins a fleet of instances sharing one Redis: paging, key
// rotation, restarts with a new session, single-use tokens, each exactly
// once, failing closed when Redis dies. (A continuation's lost round on a
// fleet: TestAnswersTheRetryOfALostRound in mcp/drivertest.)
func TestFleet(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"pages every item exactly once", fleetPagesEveryItemExactlyOnce},
		{"key rotation loses nothing", fleetKeyRotationLosesNothing},
		{"unknown key breaks a mixed fleet", fleetPromotingUnknownKeyBreaksMixedFleet},
		{"restart with a new session", fleetRestartWithNewSessionStartsOverCleanly},
		{"single use on every other instance", fleetSingleUseTokensAreRefusedOnEveryOtherInstance},
		{"redeems fail closed when redis dies", fleetRedeemsFailClosedWhenRedisDies},
	} {
		t.Run(tc.name, tc.test)
	}
}

func fleetPagesEveryItemExactlyOnce(t *testing.T) {
	t.Setenv(envFleetKeys, fleetKey())
	t.Setenv(envFleetSession, "fleet-session-1")
	f := newFleet(t, 3, nil)

	l := newLister(f, "alice")
	l.finish()
	l.checkComplete()
	if l.requests != fleetPages {
		t.Fatalf("%d requests for %d pages", l.requests, fleetPages)
	}
	// Round robin: every instance verified cursors the others issued.
	for _, in := range f.instances {
		if n := l.served[in.name]; n < fleetPages/len(f.instances) {
			t.Fatalf("instance %s served %d pages, want at least %d", in.name, n, fleetPages/len(f.instances))
		}
	}

	// Cursors stay bound to their caller and arguments on every instance.
	first := f.do(0, http.MethodGet, "/items?collection=books", "alice", nil)
	for i := range f.instances {
		if r := f.do(i, http.MethodGet, "/items?collection=books&cursor="+url.QueryEscape(first.Next), "mallory", nil); r.Code != ctoken.CodeCursorInvalid {
			t.Fatalf("another caller's cursor on %s: status %d code %d, want code %d", r.Instance, r.Status, r.Code, ctoken.CodeCursorInvalid)
		}
		if r := f.do(i, http.MethodGet, "/items?collection=films&cursor="+url.QueryEscape(first.Next), "alice", nil); r.Code != ctoken.CodeCursorInvalid {
			t.Fatalf("cursor for other arguments on %s: status %d code %d, want code %d", r.Instance, r.Status, r.Code, ctoken.CodeCursorInvalid)
		}
	}
}

func fleetKeyRotationLosesNothing(t *testing.T) {
	k1, k2 := fleetKey(), fleetKey()
	t.Setenv(envFleetKeys, k1)
	t.Setenv(envFleetSession, "fleet-session-1")
	f := newFleet(t, 3, nil)
	l := newLister(f, "alice")
	l.steps(10)
	signedWithK1 := l.cursor
	l.steps(10)

	// Step 1: add the new key as a previous key, instance by instance, with
	// traffic between each reload. Every instance still signs with k1.
	t.Setenv(envFleetKeys, k1+","+k2)
	for i := range f.instances {
		f.reload(i)
		l.steps(5)
	}
	// Step 2: promote the new key, instance by instance. Instances already
	// promoted sign with k2; the others verify k2 as a previous key.
	t.Setenv(envFleetKeys, k2+","+k1)
	for i := range f.instances {
		f.reload(i)
		l.steps(5)
	}
	l.finish()
	l.checkComplete()
	if l.restarts != 0 {
		t.Fatalf("the client had to start over %d times during the rotation", l.restarts)
	}

	// A cursor signed with the old key verifies until the key is dropped ...
	for i := range f.instances {
		if r := f.do(i, http.MethodGet, "/items?collection=books&cursor="+url.QueryEscape(signedWithK1), "alice", nil); r.Status != http.StatusOK {
			t.Fatalf("k1 cursor on %s before k1 is dropped: status %d code %d", r.Instance, r.Status, r.Code)
		}
	}
	// ... step 3, once every k1 cursor has aged out, drops it: then it is refused.
	t.Setenv(envFleetKeys, k2)
	for i := range f.instances {
		f.reload(i)
		if r := f.do(i, http.MethodGet, "/items?collection=books&cursor="+url.QueryEscape(signedWithK1), "alice", nil); r.Code != ctoken.CodeCursorInvalid {
			t.Fatalf("k1 cursor on %s after k1 is dropped: status %d code %d, want code %d", r.Instance, r.Status, r.Code, ctoken.CodeCursorInvalid)
		}
	}
}

// Promoting a new key on one instance before the others know it splits the
// fleet: its cursors are forgeries to the rest. This is why rotation takes
// the two rolling steps above.
func fleetPromotingUnknownKeyBreaksMixedFleet(t *testing.T) {
	k1, k2 := fleetKey(), fleetKey()
	t.Setenv(envFleetKeys, k1)
	t.Setenv(envFleetSession, "fleet-session-1")
	f := newFleet(t, 3, nil)
	t.Setenv(envFleetKeys, k2+","+k1)
	f.reload(0)
	r := f.do(0, http.MethodGet, "/items?collection=books", "alice", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("first page: status %d", r.Status)
	}
	for _, i := range []int{1, 2} {
		if got := f.do(i, http.MethodGet, "/items?collection=books&cursor="+url.QueryEscape(r.Next), "alice", nil); got.Code != ctoken.CodeCursorInvalid {
			t.Fatalf("k2 cursor on k1-only %s: status %d code %d, want code %d", got.Instance, got.Status, got.Code, ctoken.CodeCursorInvalid)
		}
	}
}

func fleetRestartWithNewSessionStartsOverCleanly(t *testing.T) {
	t.Setenv(envFleetKeys, fleetKey())
	t.Setenv(envFleetSession, "fleet-session-1")
	f := newFleet(t, 3, nil)
	l := newLister(f, "alice")
	l.steps(30)

	// One instance comes back with a new session (a session change being
	// rolled out, or a misconfigured instance). The next cursor it sees, or
	// the next one it issues, is from another session: code 1020, "start
	// over", never 1021.
	t.Setenv(envFleetSession, "fleet-session-2")
	f.restart(1)
	var code int
	for range 2 * len(f.instances) {
		if code = l.step(); code != 0 {
			break
		}
	}
	if code != ctoken.CodeCursorExpired {
		t.Fatalf("after the restart: code %d, want %d", code, ctoken.CodeCursorExpired)
	}
	// While sessions are mixed, a client never gets past one instance with
	// the other session, and every refusal says "start over".
	l.startOver()
	for range 2 * len(f.instances) {
		if code := l.step(); code != 0 && code != ctoken.CodeCursorExpired {
			t.Fatalf("mixed sessions: code %d, want 0 or %d", code, ctoken.CodeCursorExpired)
		} else if code != 0 {
			l.startOver()
		}
	}

	// The rest of the fleet takes the new session; the client starts over
	// and pages through everything exactly once, with no further refusal.
	f.restart(0)
	f.restart(2)
	l.startOver()
	l.finish()
	l.checkComplete()
	if l.served["i1"] == 0 {
		t.Fatal("the restarted instance served no page")
	}
}

// newFleetStore is a Redis replay store with a prefix of its own. Its timeout
// is generous so that a loaded machine cannot turn a slow claim into a 503;
// with Redis killed, claims fail at once (connection refused, no retries).
func newFleetStore(t *testing.T, addr string) *Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	b := make([]byte, 8)
	rand.Read(b)
	return provisioned(t, c, Options{Prefix: "ctoken-fleet-test:" + hex.EncodeToString(b) + ":", Timeout: 5 * time.Second})
}

// singleUseKinds are the fleet's single-use endpoints: one-time tokens and
// single-use request state.
var singleUseKinds = []string{"onetime", "state"}

// issueSingleUse mints a single-use token of kind on instance i.
func (f *fleet) issueSingleUse(i int, kind, caller string) string {
	f.t.Helper()
	r := f.do(i, http.MethodPost, "/"+kind+"/issue", caller, nil)
	if r.Status != http.StatusOK || r.Token == "" {
		f.t.Fatalf("issue on %s: status %d", r.Instance, r.Status)
	}
	return r.Token
}

func fleetSingleUseTokensAreRefusedOnEveryOtherInstance(t *testing.T) {
	testFleetSingleUse(t, func(t *testing.T) replay.Store { return newFleetStore(t, redisAddr(t)) })
}

// testFleetSingleUse runs three instances sharing the replay store newStore
// returns, and checks that a single-use token of every kind is redeemed
// once across the fleet: refused to another caller, refused on every
// instance after its first redeem, and won by exactly one of concurrent
// redeems on all instances. It runs on one redis-server here and on a Redis
// Cluster in cluster_fault_test.go.
func testFleetSingleUse(t *testing.T, newStore func(t *testing.T) replay.Store) {
	t.Setenv(envFleetKeys, fleetKey())
	t.Setenv(envFleetSession, "fleet-session-1")
	f := newFleet(t, 3, newStore(t))

	for _, kind := range singleUseKinds {
		t.Run(kind, func(t *testing.T) {
			f := f.withT(t)
			redeem := "/" + kind + "/redeem"
			tok := f.issueSingleUse(0, kind, "alice")
			// Bound to its caller: another caller can neither use nor burn it.
			if r := f.do(2, http.MethodPost, redeem, "mallory", []byte(tok)); r.Status != http.StatusBadRequest {
				t.Fatalf("redeem by another caller: status %d, want 400", r.Status)
			}
			if r := f.do(1, http.MethodPost, redeem, "alice", []byte(tok)); r.Status != http.StatusOK {
				t.Fatalf("first redeem on i1: status %d, want 200", r.Status)
			}
			for _, i := range []int{2, 0, 1} {
				if r := f.do(i, http.MethodPost, redeem, "alice", []byte(tok)); r.Status != http.StatusConflict {
					t.Fatalf("second redeem on %s: status %d, want 409", r.Instance, r.Status)
				}
			}

			// Concurrent redeems of one token on every instance: exactly one wins.
			for range 10 {
				tok := f.issueSingleUse(-1, kind, "alice")
				var wg sync.WaitGroup
				statuses := make(chan int, 3*len(f.instances))
				for range 3 {
					for i := range f.instances {
						wg.Add(1)
						go func() {
							defer wg.Done()
							req, err := http.NewRequest(http.MethodPost, f.instances[i].srv.URL+redeem, bytes.NewReader([]byte(tok)))
							if err != nil {
								statuses <- -1
								return
							}
							req.Header.Set("X-Caller", "alice")
							res, err := f.client.Do(req)
							if err != nil {
								statuses <- -1
								return
							}
							res.Body.Close()
							statuses <- res.StatusCode
						}()
					}
				}
				wg.Wait()
				close(statuses)
				counts := map[int]int{}
				for s := range statuses {
					counts[s]++
				}
				if counts[http.StatusOK] != 1 || counts[http.StatusConflict] != 3*len(f.instances)-1 {
					t.Fatalf("concurrent redeems: statuses %v, want one 200 and the rest 409", counts)
				}
			}
		})
	}
}

func fleetRedeemsFailClosedWhenRedisDies(t *testing.T) {
	srv := newServer(t)
	t.Setenv(envFleetKeys, fleetKey())
	t.Setenv(envFleetSession, "fleet-session-1")
	f := newFleet(t, 3, newFleetStore(t, srv.addr()))

	redeemed, fresh := map[string]string{}, map[string]string{}
	for _, kind := range singleUseKinds {
		redeemed[kind] = f.issueSingleUse(0, kind, "alice")
		fresh[kind] = f.issueSingleUse(1, kind, "alice")
		if r := f.do(2, http.MethodPost, "/"+kind+"/redeem", "alice", []byte(redeemed[kind])); r.Status != http.StatusOK {
			t.Fatalf("%s redeem with Redis up: status %d, want 200", kind, r.Status)
		}
	}

	srv.kill()
	// No instance can decide, so none redeems: not a fresh token, and not a
	// redeemed one (which it could no longer tell apart).
	for _, kind := range singleUseKinds {
		for i := range f.instances {
			for name, tok := range map[string]string{"fresh": fresh[kind], "redeemed": redeemed[kind]} {
				if r := f.do(i, http.MethodPost, "/"+kind+"/redeem", "alice", []byte(tok)); r.Status != http.StatusServiceUnavailable {
					t.Fatalf("%s %s token on %s with Redis down: status %d, want 503", name, kind, r.Instance, r.Status)
				}
			}
		}
	}
}
