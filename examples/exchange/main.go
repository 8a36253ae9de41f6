// Command exchange runs the bootstrap exchange end to end on loopback: a
// launcher mints a one-time bootstrap token bound to an agent run, the
// remote agent exchanges it (OAuth 2.0 Token Exchange, RFC 8693) for a
// run-scoped bearer JWT (HS256, github.com/golang-jwt/jwt/v5) and calls the
// run's API routes with it.
//
// Without flags it plays the whole plan and exits: launch, exchange, two
// API calls, a second exchange refused, a run that ended before its agent
// started refused without burning its token, an expired bootstrap token
// refused, run A's bearer refused on run B's route, and the bearer expiring.
// The server's clock is moved forward for the last steps instead of
// waiting.
//
// With -serve it keeps the server up for curl (jq is used to pick fields):
//
//	go run . -serve 127.0.0.1:8080 &
//	# The launcher (a demo route; in production the launching server mints in-process):
//	LAUNCH=$(curl -s -X POST -d agent=agt_1 -d company=co_1 http://127.0.0.1:8080/demo/launch)
//	RUN=$(echo "$LAUNCH" | jq -r .run)
//	BOOT=$(echo "$LAUNCH" | jq -r .bootstrap_token)
//	# The agent exchanges its bootstrap token, once:
//	curl -s http://127.0.0.1:8080/api/agent-auth/exchange \
//	  -d grant_type=urn:ietf:params:oauth:grant-type:token-exchange \
//	  -d subject_token_type=urn:ctoken:params:oauth:token-type:one-time \
//	  --data-urlencode subject_token="$BOOT" | tee /tmp/bearer.json
//	BEARER=$(jq -r .access_token /tmp/bearer.json)
//	# ... and calls its run's routes with the bearer:
//	curl -s -H "Authorization: Bearer $BEARER" http://127.0.0.1:8080/api/runs/$RUN/context
//	curl -s -H "Authorization: Bearer $BEARER" -d 'step 1 done' http://127.0.0.1:8080/api/runs/$RUN/events
//	# Exchanging the same bootstrap token again is refused (400 invalid_grant).
//
// Bootstrap tokens are signed with the keyring in CTOKEN_KEYS (see
// ctoken.ParseKeyring); unset, a random key is used and the program says
// so. The JWT signing key is random per process, so a restart revokes
// every bearer. Everything stays on the address given (127.0.0.1 by
// default) and the walkthrough finishes within 10 seconds.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/exchange"
	"github.com/ctoken/ctoken/replay"
	"github.com/golang-jwt/jwt/v5"
)

const (
	bootstrapPurpose = "agent-bootstrap"
	bootstrapTTL     = 10 * time.Minute
	bearerTTL        = 15 * time.Minute
	jwtIssuer        = "ctoken-example"
	jwtAudience      = "ctoken-example-api"
	exchangePath     = "/api/agent-auth/exchange"
)

func main() {
	log.SetFlags(0)
	serve := flag.String("serve", "", "keep the server up on this address (host:port) for curl instead of running the walkthrough")
	flag.Parse()
	if *serve != "" {
		if err := serveForever(*serve, os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// clock is the server's clock: the system's, plus an offset the
// walkthrough moves forward.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

// agentRun is a launched agent run.
type agentRun struct {
	Agent, Company string
	Active         bool
	Events         []string
}

// server is the launching server: it mints bootstrap tokens, runs the
// exchange endpoint and serves the runs' API.
type server struct {
	clock     *clock
	bootstrap *ctoken.OneTimeIssuer
	jwtKey    []byte
	mux       *http.ServeMux

	mu   sync.Mutex
	runs map[string]*agentRun
}

// runClaims are the bearer JWT's claims: sub is the agent, aud the API.
type runClaims struct {
	Run     string `json:"run"`
	Company string `json:"company"`
	jwt.RegisteredClaims
}

func newServer(out io.Writer) (*server, error) {
	keys, ephemeral, err := ctoken.KeyringFromEnvOrRandom("CTOKEN_KEYS")
	if err != nil {
		return nil, fmt.Errorf("CTOKEN_KEYS: %w", err)
	}
	if ephemeral {
		fmt.Fprintln(out, "CTOKEN_KEYS is not set: bootstrap tokens use a random key of this process")
	}
	s := &server{clock: &clock{}, jwtKey: make([]byte, 32), runs: map[string]*agentRun{}}
	rand.Read(s.jwtKey)
	s.bootstrap, err = ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{
		Keys:    keys,
		Purpose: bootstrapPurpose,
		TTL:     bootstrapTTL,
		// One process: a private store. A fleet shares one (redisstore).
		Replay: &replay.MemoryStore{Now: s.clock.Now},
		Now:    s.clock.Now,
	})
	if err != nil {
		return nil, err
	}
	exchange, err := exchange.NewHandler(exchange.Config{
		Issuer:          s.bootstrap,
		Authorize:       s.authorize,
		Issue:           s.issue,
		IssuedTokenType: exchange.TokenTypeJWT,
		// Refusals are logged with a fixed reason; never the token.
		Logger: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{ReplaceAttr: dropTime})),
	})
	if err != nil {
		return nil, err
	}
	s.mux = http.NewServeMux()
	s.mux.Handle("POST "+exchangePath, exchange)
	s.mux.HandleFunc("POST /demo/launch", s.handleLaunch)
	s.mux.Handle("GET /api/runs/{run}/context", s.requireBearer(s.handleContext))
	s.mux.Handle("POST /api/runs/{run}/events", s.requireBearer(s.handleEvent))
	return s, nil
}

// dropTime keeps the example's log lines short and stable.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// launch registers a run and mints its bootstrap token. In production this
// is the launching server's own code, not an HTTP route.
func (s *server) launch(agent, company string) (runID, token string, err error) {
	runID = "run_" + strings.ToLower(rand.Text()[:8])
	token, err = s.bootstrap.Mint(map[string]string{"agent": agent, "company": company, "run": runID})
	if err != nil {
		return "", "", err
	}
	s.mu.Lock()
	s.runs[runID] = &agentRun{Agent: agent, Company: company, Active: true}
	s.mu.Unlock()
	return runID, token, nil
}

func (s *server) finish(runID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[runID]; r != nil {
		r.Active = false
	}
}

// authorize runs before the bootstrap token is consumed: the run must
// exist, be active and belong to the token's agent and company; the
// credential is for this API only and carries no scopes.
func (s *server) authorize(ctx context.Context, req exchange.Request) error {
	for _, aud := range append(req.Audience, req.Resource...) {
		if aud != jwtAudience {
			return fmt.Errorf("audience %q: %w", aud, exchange.ErrTarget)
		}
	}
	if req.Scope != nil {
		return fmt.Errorf("scopes are not issued: %w", exchange.ErrScope)
	}
	c := req.Token.Claims
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[c["run"]]
	switch {
	case r == nil:
		return errors.New("unknown run")
	case !r.Active:
		return errors.New("run is not active")
	case r.Agent != c["agent"] || r.Company != c["company"]:
		return errors.New("run belongs to another agent")
	}
	return nil
}

// issue runs after the bootstrap token was redeemed: a bearer JWT bound to
// the run.
func (s *server) issue(ctx context.Context, req exchange.Request) (exchange.Credential, error) {
	now := s.clock.Now()
	c := req.Token.Claims
	claims := runClaims{
		Run:     c["run"],
		Company: c["company"],
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    jwtIssuer,
			Subject:   c["agent"],
			Audience:  jwt.ClaimStrings{jwtAudience},
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(bearerTTL)),
		},
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.jwtKey)
	if err != nil {
		return exchange.Credential{}, err
	}
	return exchange.Credential{AccessToken: signed, ExpiresIn: bearerTTL}, nil
}

type ctxKey struct{}

// requireBearer lets through requests whose bearer JWT is valid (HS256,
// this issuer and audience, unexpired) and bound to the route's run.
func (s *server) requireBearer(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || raw == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="runs"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_token", "error_description": "a bearer token is required"})
			return
		}
		var claims runClaims
		_, err := jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return s.jwtKey, nil },
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithIssuer(jwtIssuer), jwt.WithAudience(jwtAudience),
			jwt.WithExpirationRequired(), jwt.WithTimeFunc(s.clock.Now))
		if err != nil {
			desc := "the bearer token is invalid"
			if errors.Is(err, jwt.ErrTokenExpired) {
				desc = "the bearer token has expired"
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="runs", error="invalid_token"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_token", "error_description": desc})
			return
		}
		if claims.Run != r.PathValue("run") {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "insufficient_scope", "error_description": "the bearer token is for another run"})
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, claims)))
	})
}

func (s *server) handleContext(w http.ResponseWriter, r *http.Request) {
	claims := r.Context().Value(ctxKey{}).(runClaims)
	s.mu.Lock()
	events := len(s.runs[claims.Run].Events)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"run": claims.Run, "agent": claims.Subject, "company": claims.Company, "events": events})
}

func (s *server) handleEvent(w http.ResponseWriter, r *http.Request) {
	claims := r.Context().Value(ctxKey{}).(runClaims)
	body, err := io.ReadAll(io.LimitReader(r.Body, 1024))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unreadable body"})
		return
	}
	s.mu.Lock()
	run := s.runs[claims.Run]
	run.Events = append(run.Events, string(body))
	n := len(run.Events)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"run": claims.Run, "events": n})
}

func (s *server) handleLaunch(w http.ResponseWriter, r *http.Request) {
	agent, company := r.PostFormValue("agent"), r.PostFormValue("company")
	if agent == "" || company == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "agent and company are required"})
		return
	}
	runID, token, err := s.launch(agent, company)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "mint failed"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run": runID, "bootstrap_token": token, "expires_in": int(bootstrapTTL / time.Second)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func serveForever(addr string, out io.Writer) error {
	s, err := newServer(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "listening on http://%s (exchange at %s)\n", addr, exchangePath)
	srv := &http.Server{Addr: addr, Handler: s.mux, ReadHeaderTimeout: 5 * time.Second}
	return srv.ListenAndServe()
}

// agent is the remote agent's side: plain HTTP.
type agent struct {
	base   string
	client *http.Client
	out    io.Writer
}

// reply is the decoded JSON of a response.
type reply struct {
	status int
	body   map[string]any
}

func (r reply) String() string {
	if e, ok := r.body["error"]; ok {
		return fmt.Sprintf("%d %v (%v)", r.status, e, r.body["error_description"])
	}
	return fmt.Sprintf("%d", r.status)
}

func (a *agent) do(req *http.Request) (reply, error) {
	res, err := a.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	r := reply{status: res.StatusCode}
	if err := json.NewDecoder(res.Body).Decode(&r.body); err != nil {
		return reply{}, fmt.Errorf("%s %s: %d with a body that is not JSON: %w", req.Method, req.URL.Path, res.StatusCode, err)
	}
	return r, nil
}

// exchange posts the bootstrap token to the exchange endpoint.
func (a *agent) exchange(ctx context.Context, bootstrap string) (reply, error) {
	form := url.Values{
		"grant_type":         {exchange.GrantTypeTokenExchange},
		"subject_token":      {bootstrap},
		"subject_token_type": {exchange.TokenTypeOneTime},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+exchangePath, strings.NewReader(form.Encode()))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return a.do(req)
}

// call calls a run route with a bearer.
func (a *agent) call(ctx context.Context, method, path, bearer, body string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	return a.do(req)
}

// run plays the whole plan against a server on loopback.
func run(w io.Writer) error {
	out := &lockedWriter{w: w}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := newServer(out)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 2 * time.Second}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	a := &agent{base: "http://" + ln.Addr().String(), client: &http.Client{Timeout: 5 * time.Second}, out: out}

	step := func(label string, r reply, err error, wantStatus int) error {
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		fmt.Fprintf(out, "%s: %s\n", label, r)
		if r.status != wantStatus {
			return fmt.Errorf("%s: status %d, want %d", label, r.status, wantStatus)
		}
		return nil
	}

	// 1. Launch: two runs, each with its bootstrap token (10 minutes).
	runA, bootA, err := s.launch("agt_1", "co_1")
	if err != nil {
		return err
	}
	runB, bootB, err := s.launch("agt_2", "co_1")
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "launched run A and run B, each with a one-time bootstrap token")

	// 2. Agent A exchanges its token for a bearer JWT.
	r, err := a.exchange(ctx, bootA)
	if err := step("agent A exchanges its bootstrap token", r, err, http.StatusOK); err != nil {
		return err
	}
	bearerA, _ := r.body["access_token"].(string)
	fmt.Fprintf(out, "  token_type %v, issued_token_type %v, expires_in %v\n", r.body["token_type"], r.body["issued_token_type"], r.body["expires_in"])

	// 3. Two API calls with it.
	r, err = a.call(ctx, http.MethodGet, "/api/runs/"+runA+"/context", bearerA, "")
	if err := step("agent A reads its run context", r, err, http.StatusOK); err != nil {
		return err
	}
	r, err = a.call(ctx, http.MethodPost, "/api/runs/"+runA+"/events", bearerA, "step 1 done")
	if err := step("agent A posts an event", r, err, http.StatusOK); err != nil {
		return err
	}

	// 4. The bootstrap token is spent.
	r, err = a.exchange(ctx, bootA)
	if err := step("a second exchange of A's bootstrap token", r, err, http.StatusBadRequest); err != nil {
		return err
	}

	// 5. Run A's bearer on run B's route.
	r, err = a.call(ctx, http.MethodGet, "/api/runs/"+runB+"/context", bearerA, "")
	if err := step("agent A's bearer on run B's route", r, err, http.StatusForbidden); err != nil {
		return err
	}

	// 6. A run that ended before its agent exchanged: refused, token unused.
	runC, bootC, err := s.launch("agt_3", "co_1")
	if err != nil {
		return err
	}
	s.finish(runC)
	r, err = a.exchange(ctx, bootC)
	if err := step("exchange for a finished run", r, err, http.StatusBadRequest); err != nil {
		return err
	}
	if _, err := s.bootstrap.Verify(bootC); err != nil {
		return fmt.Errorf("run C's refused token: %w", err)
	}
	fmt.Fprintln(out, "  (the refused token was not consumed)")

	// 7. Eleven minutes later run B's agent finally starts: too late.
	s.clock.Advance(11 * time.Minute)
	fmt.Fprintln(out, "11 minutes pass")
	r, err = a.exchange(ctx, bootB)
	if err := step("agent B exchanges its expired bootstrap token", r, err, http.StatusBadRequest); err != nil {
		return err
	}
	r, err = a.call(ctx, http.MethodGet, "/api/runs/"+runA+"/context", bearerA, "")
	if err := step("agent A's bearer, 11 minutes old", r, err, http.StatusOK); err != nil {
		return err
	}

	// 8. The bearer expires: revocation is by TTL.
	s.clock.Advance(5 * time.Minute)
	fmt.Fprintln(out, "5 more minutes pass")
	r, err = a.call(ctx, http.MethodGet, "/api/runs/"+runA+"/context", bearerA, "")
	if err := step("agent A's bearer, 16 minutes old", r, err, http.StatusUnauthorized); err != nil {
		return err
	}
	fmt.Fprintln(out, "done")
	return nil
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
