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
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

const (
	envFleetKeys    = "CTOKEN_KEYS"    // keyring, primary first
	envFleetSession = "CTOKEN_SESSION" // cursor session shared by the fleet

	fleetItems    = 10_000
	fleetPageSize = 100
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
		must(t, err)
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

// do sends one request to instance i (or, for i < 0, to the next instance in
// round-robin order).
func (f *fleet) do(i int, method, path, caller string, body []byte) fleetResp {
	f.t.Helper()
	if i < 0 {
		i = int(f.next.Add(1)-1) % len(f.instances)
	}
	r, err := call(f.client, method, f.instances[i].srv.URL+path, caller, body)
	wantErr(f.t, err, nil, fmt.Sprintf("%s %s on %s", method, path, f.instances[i].name))
	return r
}

// call sends one request and returns the status and the decoded reply. A
// transport error (instance down) is returned, never fatal, so goroutines
// can use it.
func call(c *http.Client, method, url, caller string, body []byte) (fleetResp, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return fleetResp{}, err
	}
	req.Header.Set("X-Caller", caller)
	res, err := c.Do(req)
	if err != nil {
		return fleetResp{}, err
	}
	defer res.Body.Close()
	var r fleetResp
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		return fleetResp{}, fmt.Errorf("status %d, undecodable reply: %w", res.StatusCode, err)
	}
	r.Status = res.StatusCode
	return r, nil
}

// single is a single-use token of one kind.
type single struct {
	kind, tok string
}

// redeem sends one redeem of s to the instance at base; status is 0 when
// the instance could not be reached.
func redeem(c *http.Client, base string, s single) int {
	r, err := call(c, http.MethodPost, base+"/"+s.kind+"/redeem", "alice", []byte(s.tok))
	if err != nil {
		return 0
	}
	return r.Status
}

func fleetKey() string { return ctoken.EncodeKey(ctoken.RandomKey()) }

// TestFleet pins a fleet of instances sharing one Redis: single-use tokens
// redeemed once across it. (Failing closed when Redis is down or stopped:
// TestClaimFailsClosed and the fault suite's
// TestPausedRedisFailsClosedWithinTimeout. Paging,
// key rotation and sessions across instances touch no store: the root
// package's TestCursorFleetSharesKeysAndSession, TestCursorKeyRotation and
// TestCursorOfAnotherKeyAndSessionHasUnknownKeyReason. A continuation's
// lost round on a fleet: TestAnswersTheRetryOfALostRound in
// mcp/drivertest.)
func TestFleet(t *testing.T) {
	subtests(t, []subtest{
		{"single use on every other instance", fleetSingleUseTokensAreRefusedOnEveryOtherInstance},
	})
}

// newFleetStore is a Redis replay store with a prefix of its own. Its timeout
// is generous so that a loaded machine cannot turn a slow claim into a 503.
func newFleetStore(t *testing.T, addr string) *Store {
	t.Helper()
	c := standaloneClient(t, addr)
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
			path := "/" + kind + "/redeem"
			tok := f.issueSingleUse(0, kind, "alice")
			// Bound to its caller: another caller can neither use nor burn it.
			if r := f.do(2, http.MethodPost, path, "mallory", []byte(tok)); r.Status != http.StatusBadRequest {
				t.Fatalf("redeem by another caller: status %d, want 400", r.Status)
			}
			if r := f.do(1, http.MethodPost, path, "alice", []byte(tok)); r.Status != http.StatusOK {
				t.Fatalf("first redeem on i1: status %d, want 200", r.Status)
			}
			for _, i := range []int{2, 0, 1} {
				if r := f.do(i, http.MethodPost, path, "alice", []byte(tok)); r.Status != http.StatusConflict {
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
						spawn(&wg, func() { statuses <- redeem(f.client, f.instances[i].srv.URL, single{kind, tok}) })
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
