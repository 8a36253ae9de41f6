package exchange_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/exchange"
	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/observe/observetest"
	"github.com/ctoken/ctoken/replay"
)

const exchangePurpose = "agent-bootstrap"

var exchangeClaims = map[string]string{"agent": "agt_42", "company": "co_7", "run": "run_1"}

// exchangeFixture is a handler over an issuer with a settable clock, whose
// callbacks record what they saw and can be told to refuse or fail.
type exchangeFixture struct {
	t       testing.TB
	key     []byte
	keys    *ctoken.Keyring
	clock   *clocktest.Clock
	issuer  *ctoken.OneTimeIssuer
	handler *exchange.Handler
	logs    *lockedBuffer

	authorizeErr atomic.Pointer[error] // nil: accept
	issueErr     atomic.Pointer[error] // nil: issue
	badCred      atomic.Pointer[exchange.Credential]

	mu         sync.Mutex
	authorized []exchange.Request
	issued     []exchange.Request
	creds      []string
}

// lockedBuffer is a log sink safe for concurrent handlers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// flakyStore is a replay store that fails while down is set.
type flakyStore struct {
	down  atomic.Bool
	inner *replay.MemoryStore
}

var errStoreDown = errors.New("replay store unreachable")

func (s *flakyStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if s.down.Load() {
		return false, errStoreDown
	}
	return s.inner.Claim(ctx, id, until)
}

func newExchangeFixture(t testing.TB, store replay.Store) *exchangeFixture {
	t.Helper()
	f := &exchangeFixture{t: t, key: ctoken.RandomKey(), clock: clocktest.New(), logs: &lockedBuffer{}}
	var err error
	if f.keys, err = ctoken.NewKeyring(f.key); err != nil {
		t.Fatal(err)
	}
	if store == nil {
		store = &replay.MemoryStore{Now: f.clock.Now}
	}
	f.issuer, err = ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: f.keys, Purpose: exchangePurpose, Replay: store, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	f.handler, err = exchange.NewHandler(exchange.Config{
		Issuer: f.issuer,
		Authorize: func(ctx context.Context, req exchange.Request) error {
			f.mu.Lock()
			f.authorized = append(f.authorized, req)
			f.mu.Unlock()
			if e := f.authorizeErr.Load(); e != nil {
				return *e
			}
			return nil
		},
		Issue: func(ctx context.Context, req exchange.Request) (exchange.Credential, error) {
			if e := f.issueErr.Load(); e != nil {
				return exchange.Credential{}, *e
			}
			if c := f.badCred.Load(); c != nil {
				return *c, nil
			}
			cred := "bearer-" + hex.EncodeToString(ctoken.RandomKey()[:16])
			f.mu.Lock()
			f.issued = append(f.issued, req)
			f.creds = append(f.creds, cred)
			f.mu.Unlock()
			return exchange.Credential{AccessToken: cred, ExpiresIn: 15*time.Minute + 999*time.Millisecond}, nil
		},
		Logger: slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *exchangeFixture) mint() string {
	f.t.Helper()
	tok, err := f.issuer.Mint(exchangeClaims)
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

func (f *exchangeFixture) refuseAuthorize(err error) {
	if err == nil {
		f.authorizeErr.Store(nil)
		return
	}
	f.authorizeErr.Store(&err)
}

func (f *exchangeFixture) issuedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.issued)
}

func (f *exchangeFixture) authorizedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.authorized)
}

// exchangeForm is a well-formed exchange request body for tok.
func exchangeForm(tok string) url.Values {
	return url.Values{
		"grant_type":         {exchange.GrantTypeTokenExchange},
		"subject_token":      {tok},
		"subject_token_type": {exchange.TokenTypeOneTime},
	}
}

// post sends a form-encoded body to h.
func post(h http.Handler, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/api/agent-auth/exchange", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

type oauthReply struct {
	AccessToken     string `json:"access_token"`
	IssuedTokenType string `json:"issued_token_type"`
	TokenType       string `json:"token_type"`
	ExpiresIn       int64  `json:"expires_in"`
	Scope           string `json:"scope"`
	Error           string `json:"error"`
	Description     string `json:"error_description"`
}

// decode checks the headers every response carries and decodes its body
// strictly.
func decode(t *testing.T, w *httptest.ResponseRecorder) oauthReply {
	t.Helper()
	for k, want := range map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store", "Pragma": "no-cache"} {
		if got := w.Header().Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	var r oauthReply
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("response body %q: %v", w.Body.String(), err)
	}
	return r
}

// wantRefusal checks status and error code, and that no credential came
// with them.
func wantRefusal(t *testing.T, w *httptest.ResponseRecorder, status int, code string) oauthReply {
	t.Helper()
	r := decode(t, w)
	if w.Code != status || r.Error != code {
		t.Fatalf("got %d %q (%q), want %d %q", w.Code, r.Error, r.Description, status, code)
	}
	if r.AccessToken != "" || r.Description == "" {
		t.Fatalf("refusal body %q", w.Body.String())
	}
	return r
}

func TestExchangeIssuesCredentialForValidToken(t *testing.T) {
	f := newExchangeFixture(t, nil)
	tok := f.mint()
	w := post(f.handler, exchangeForm(tok).Encode())
	r := decode(t, w)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body.String())
	}
	if f.issuedCount() != 1 || r.AccessToken != f.creds[0] {
		t.Fatalf("access_token %q, issued %v", r.AccessToken, f.creds)
	}
	if r.TokenType != "Bearer" || r.IssuedTokenType != exchange.TokenTypeAccessToken || r.ExpiresIn != 900 || r.Scope != "" || r.Error != "" {
		t.Fatalf("response %+v", r)
	}
	// Both callbacks saw the verified claims and purpose; none saw the token.
	for _, req := range []exchange.Request{f.authorized[0], f.issued[0]} {
		if req.Token.Purpose != exchangePurpose || len(req.Token.Claims) != 3 || req.Token.Claims["run"] != "run_1" {
			t.Fatalf("callback saw %+v", req.Token)
		}
		if !req.Token.ExpiresAt.Equal(f.clock.Now().Truncate(time.Second).Add((10 * time.Minute))) {
			t.Fatalf("ExpiresAt %v", req.Token.ExpiresAt)
		}
		if req.Audience != nil || req.Resource != nil || req.Scope != nil || req.RequestedTokenType != "" {
			t.Fatalf("optional parameters %+v", req)
		}
	}
}

func TestExchangePassesOptionalParametersAndReturnsScope(t *testing.T) {
	f := newExchangeFixture(t, nil)
	var seen exchange.Request
	h, err := exchange.NewHandler(exchange.Config{
		Issuer:          f.issuer,
		IssuedTokenType: exchange.TokenTypeJWT,
		Authorize:       func(ctx context.Context, req exchange.Request) error { seen = req; return nil },
		Issue: func(ctx context.Context, req exchange.Request) (exchange.Credential, error) {
			return exchange.Credential{AccessToken: "jwt", ExpiresIn: time.Minute, Scope: "runs:read"}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	form := exchangeForm(f.mint())
	form["audience"] = []string{"api-b", "", "api-a"}
	form["resource"] = []string{"https://api.example/runs"}
	form.Set("scope", "runs:read  runs:write")
	form.Set("requested_token_type", exchange.TokenTypeJWT)
	form.Set("client_id", "ignored") // unrecognized parameters are ignored
	w := post(h, form.Encode())
	r := decode(t, w)
	if w.Code != http.StatusOK || r.IssuedTokenType != exchange.TokenTypeJWT || r.Scope != "runs:read" || r.ExpiresIn != 60 {
		t.Fatalf("%d %+v", w.Code, r)
	}
	if fmt.Sprintln(seen.Audience, seen.Resource, seen.Scope, seen.RequestedTokenType) !=
		"[api-b api-a] [https://api.example/runs] [runs:read runs:write] "+exchange.TokenTypeJWT+"\n" {
		t.Fatalf("Authorize saw %+v", seen)
	}
}

// TestExchangeRejects pins each refusal of the exchange handler.
func TestExchangeRejects(t *testing.T) {
	t.Run("expired token", func(t *testing.T) {
		f := newExchangeFixture(t, nil)
		tok := f.mint()
		f.clock.Advance((10 * time.Minute))
		r := wantRefusal(t, post(f.handler, exchangeForm(tok).Encode()), http.StatusBadRequest, "invalid_grant")
		if r.Description != "subject_token has expired" || f.authorizedCount() != 0 || f.issuedCount() != 0 {
			t.Fatalf("%q, authorized %d, issued %d", r.Description, f.authorizedCount(), f.issuedCount())
		}
	})

	t.Run("forged token", func(t *testing.T) {
		f := newExchangeFixture(t, nil)
		other, err := ctoken.NewKeyring(ctoken.RandomKey())
		if err != nil {
			t.Fatal(err)
		}
		forger, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: other, Purpose: exchangePurpose, Now: f.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		forged, err := forger.Mint(exchangeClaims)
		if err != nil {
			t.Fatal(err)
		}
		good := f.mint()
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(good, "ot1."))
		if err != nil {
			t.Fatal(err)
		}
		raw[len(raw)-40] ^= 1 // a claim byte, under the MAC
		tampered := "ot1." + base64.RawURLEncoding.EncodeToString(raw)
		for name, tok := range map[string]string{
			"other key":     forged,
			"tampered":      tampered,
			"not a token":   "hello",
			"other format":  "v1.abc.def",
			"bad base64":    good[:20] + "!" + good[21:],
			"padded":        good + "=",
			"line break":    good[:30] + "\n" + good[30:],
			"over the cap":  "ot1." + strings.Repeat("A", ctoken.MaxOneTimeTokenBytes),
			"prefix only":   "ot1.",
			"mixed case pf": "OT1." + strings.TrimPrefix(good, "ot1."),
		} {
			t.Run(name, func(t *testing.T) {
				r := wantRefusal(t, post(f.handler, exchangeForm(tok).Encode()), http.StatusBadRequest, "invalid_grant")
				if r.Description != "subject_token is invalid" {
					t.Fatalf("description %q", r.Description)
				}
			})
		}
		if f.authorizedCount() != 0 || f.issuedCount() != 0 {
			t.Fatalf("callbacks ran for a forged token: %d %d", f.authorizedCount(), f.issuedCount())
		}
		// The good token was never burned by the attempts.
		if w := post(f.handler, exchangeForm(good).Encode()); w.Code != http.StatusOK {
			t.Fatalf("good token after forgeries: %d", w.Code)
		}
	})

	t.Run("truncated token", func(t *testing.T) {
		f := newExchangeFixture(t, nil)
		tok := f.mint()
		for _, n := range []int{len(tok) - 1, len(tok) - 2, len(tok) - 43, len(tok) / 2, 5} {
			r := wantRefusal(t, post(f.handler, exchangeForm(tok[:n]).Encode()), http.StatusBadRequest, "invalid_grant")
			if r.Description != "subject_token is invalid" {
				t.Fatalf("truncated to %d: %q", n, r.Description)
			}
		}
		if f.authorizedCount() != 0 {
			t.Fatal("Authorize ran for a truncated token")
		}
		if w := post(f.handler, exchangeForm(tok).Encode()); w.Code != http.StatusOK {
			t.Fatalf("whole token after truncated attempts: %d", w.Code)
		}
	})

	t.Run("token of another purpose", func(t *testing.T) {
		f := newExchangeFixture(t, nil)
		reset, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: f.keys, Purpose: "password-reset", Now: f.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := reset.Mint(exchangeClaims)
		if err != nil {
			t.Fatal(err)
		}
		wantRefusal(t, post(f.handler, exchangeForm(tok).Encode()), http.StatusBadRequest, "invalid_grant")
		if f.authorizedCount() != 0 {
			t.Fatal("Authorize ran for a token of another purpose")
		}
		if !strings.Contains(f.logs.String(), `"check":"other purpose"`) {
			t.Fatalf("log lacks the reason: %s", f.logs.String())
		}
		// Not consumed at its own issuer.
		if _, err := reset.Redeem(context.Background(), tok, exchangeClaims); err != nil {
			t.Fatalf("password-reset token after the exchange attempt: %v", err)
		}
	})

	t.Run("other grant type", func(t *testing.T) {
		f := newExchangeFixture(t, nil)
		tok := f.mint()
		for _, gt := range []string{"authorization_code", "refresh_token", "client_credentials", exchange.GrantTypeTokenExchange + " ", "URN:IETF:PARAMS:OAUTH:GRANT-TYPE:TOKEN-EXCHANGE"} {
			form := exchangeForm(tok)
			form.Set("grant_type", gt)
			wantRefusal(t, post(f.handler, form.Encode()), http.StatusBadRequest, "unsupported_grant_type")
		}
		if f.authorizedCount() != 0 {
			t.Fatal("Authorize ran for another grant type")
		}
	})

	t.Run("missing or malformed fields", func(t *testing.T) {
		f := newExchangeFixture(t, nil)
		tok := f.mint()
		good := exchangeForm(tok).Encode()
		without := func(name string) string { v := exchangeForm(tok); v.Del(name); return v.Encode() }
		with := func(name, value string) string { v := exchangeForm(tok); v.Set(name, value); return v.Encode() }
		for _, tc := range []struct{ name, body string }{
			{"empty body", ""},
			{"no grant_type", without("grant_type")},
			{"empty grant_type", with("grant_type", "")},
			{"no subject_token", without("subject_token")},
			{"empty subject_token", with("subject_token", "")},
			{"no subject_token_type", without("subject_token_type")},
			{"other subject_token_type", with("subject_token_type", "urn:ietf:params:oauth:token-type:access_token")},
			{"repeated subject_token", good + "&subject_token=" + url.QueryEscape(tok)},
			{"repeated grant_type", good + "&grant_type=" + url.QueryEscape(exchange.GrantTypeTokenExchange)},
			{"repeated scope", good + "&scope=a&scope=b"},
			{"actor_token", with("actor_token", tok)},
			{"actor_token_type", with("actor_token_type", exchange.TokenTypeOneTime)},
			{"other requested_token_type", with("requested_token_type", exchange.TokenTypeJWT)},
			{"bad percent escape", good + "&x=%zz"},
			{"semicolon separator", good + ";x=1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantRefusal(t, post(f.handler, tc.body), http.StatusBadRequest, "invalid_request")
			})
		}
		t.Run("subject_token in the URL", func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/x?subject_token="+url.QueryEscape(tok), strings.NewReader(good))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			w := httptest.NewRecorder()
			f.handler.ServeHTTP(w, r)
			wantRefusal(t, w, http.StatusBadRequest, "invalid_request")
		})
		if f.authorizedCount() != 0 {
			t.Fatal("Authorize ran for a malformed request")
		}
		if w := post(f.handler, good); w.Code != http.StatusOK {
			t.Fatalf("token after malformed requests: %d", w.Code)
		}
	})

	t.Run("method other than POST", func(t *testing.T) {
		f := newExchangeFixture(t, nil)
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions} {
			r := httptest.NewRequest(m, "/x", strings.NewReader(exchangeForm(f.mint()).Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			w := httptest.NewRecorder()
			f.handler.ServeHTTP(w, r)
			if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != http.MethodPost {
				t.Fatalf("%s: %d, Allow %q", m, w.Code, w.Header().Get("Allow"))
			}
			if m != http.MethodHead {
				wantRefusal(t, w, http.StatusMethodNotAllowed, "invalid_request")
			}
		}
	})

	t.Run("wrong content type", func(t *testing.T) {
		f := newExchangeFixture(t, nil)
		tok := f.mint()
		for _, ct := range []string{"", "application/json", "text/plain", "multipart/form-data; boundary=x",
			"application/x-www-form-urlencoded; charset=latin1", "application/x-www-form-urlencoded; x=1", "application/x-www-form-urlencoded;;"} {
			r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(exchangeForm(tok).Encode()))
			if ct != "" {
				r.Header.Set("Content-Type", ct)
			}
			w := httptest.NewRecorder()
			f.handler.ServeHTTP(w, r)
			t.Run(ct, func(t *testing.T) { wantRefusal(t, w, http.StatusBadRequest, "invalid_request") })
		}
		for _, ct := range []string{"application/x-www-form-urlencoded; charset=UTF-8", "Application/X-WWW-Form-URLEncoded;charset=utf-8"} {
			r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(exchangeForm(f.mint()).Encode()))
			r.Header.Set("Content-Type", ct)
			w := httptest.NewRecorder()
			f.handler.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				t.Fatalf("%q: %d", ct, w.Code)
			}
		}
	})

	t.Run("second exchange", func(t *testing.T) {
		f := newExchangeFixture(t, nil)
		tok := f.mint()
		if w := post(f.handler, exchangeForm(tok).Encode()); w.Code != http.StatusOK {
			t.Fatalf("first exchange: %d", w.Code)
		}
		r := wantRefusal(t, post(f.handler, exchangeForm(tok).Encode()), http.StatusBadRequest, "invalid_grant")
		if r.Description != "subject_token was already used" || f.issuedCount() != 1 {
			t.Fatalf("%q, issued %d", r.Description, f.issuedCount())
		}
	})
}

// countingReader is an endless body that counts what was read of it.
type countingReader struct{ n atomic.Int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	c.n.Add(int64(len(p)))
	return len(p), nil
}

func TestExchangeCapsBodyBeforeParsing(t *testing.T) {
	f := newExchangeFixture(t, nil)
	tok := f.mint()

	// Declared too large: refused before a byte is read.
	body := &countingReader{}
	r := httptest.NewRequest(http.MethodPost, "/x", io.LimitReader(body, 1<<20))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.ContentLength = exchange.MaxBodyBytes + 1
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	wantRefusal(t, w, http.StatusRequestEntityTooLarge, "invalid_request")
	if body.n.Load() != 0 {
		t.Fatalf("read %d bytes of a body declared over the cap", body.n.Load())
	}

	// Undeclared (chunked) and endless: reading stops just past the cap.
	body = &countingReader{}
	r = httptest.NewRequest(http.MethodPost, "/x", body)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.ContentLength = -1
	w = httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	wantRefusal(t, w, http.StatusRequestEntityTooLarge, "invalid_request")
	if n := body.n.Load(); n > 2*exchange.MaxBodyBytes {
		t.Fatalf("read %d bytes of an endless body", n)
	}

	// A valid request padded to one byte over the cap is refused; at the cap
	// it is accepted.
	valid := exchangeForm(tok).Encode() + "&pad="
	over := valid + strings.Repeat("p", exchange.MaxBodyBytes+1-len(valid))
	r = httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(over))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.ContentLength = -1
	w = httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	wantRefusal(t, w, http.StatusRequestEntityTooLarge, "invalid_request")
	if f.authorizedCount() != 0 {
		t.Fatal("Authorize ran for an oversize body")
	}
	if w := post(f.handler, over[:exchange.MaxBodyBytes]); w.Code != http.StatusOK {
		t.Fatalf("body of exactly MaxBodyBytes: %d %s", w.Code, w.Body.String())
	}
}

func TestExchangeRefusalByAuthorizeLeavesTokenUsable(t *testing.T) {
	f := newExchangeFixture(t, nil)
	tok := f.mint()
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{errors.New("run is no longer active"), http.StatusBadRequest, "invalid_grant"},
		{fmt.Errorf("audience api-x: %w", exchange.ErrTarget), http.StatusBadRequest, "invalid_target"},
		{fmt.Errorf("scope admin: %w", exchange.ErrScope), http.StatusBadRequest, "invalid_scope"},
		{fmt.Errorf("runs db: %w", exchange.ErrUnavailable), http.StatusServiceUnavailable, "temporarily_unavailable"},
		{context.DeadlineExceeded, http.StatusServiceUnavailable, "temporarily_unavailable"},
	} {
		f.refuseAuthorize(tc.err)
		wantRefusal(t, post(f.handler, exchangeForm(tok).Encode()), tc.status, tc.code)
		if !strings.Contains(f.logs.String(), tc.err.Error()) {
			t.Fatalf("the refusal %q is not logged", tc.err)
		}
	}
	if f.issuedCount() != 0 {
		t.Fatal("Issue ran after a refusal")
	}
	f.refuseAuthorize(nil)
	if w := post(f.handler, exchangeForm(tok).Encode()); w.Code != http.StatusOK {
		t.Fatalf("token after refusals: %d %s", w.Code, w.Body.String())
	}
	if f.issuedCount() != 1 {
		t.Fatalf("issued %d", f.issuedCount())
	}
}

func TestExchangeConcurrentExchangesIssueExactlyOneCredential(t *testing.T) {
	f := newExchangeFixture(t, nil)
	tok := f.mint()
	const n = 32
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]*httptest.ResponseRecorder, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = post(f.handler, exchangeForm(tok).Encode())
		}()
	}
	close(start)
	wg.Wait()
	var won []string
	for _, w := range results {
		switch r := decode(t, w); {
		case w.Code == http.StatusOK:
			won = append(won, r.AccessToken)
		case w.Code == http.StatusBadRequest && r.Error == "invalid_grant" && r.AccessToken == "":
		default:
			t.Fatalf("unexpected %d %+v", w.Code, r)
		}
	}
	if len(won) != 1 || f.issuedCount() != 1 || won[0] != f.creds[0] {
		t.Fatalf("%d credentials returned, %d issued; want exactly one", len(won), f.issuedCount())
	}
}

func TestExchangeFailsClosedWhenReplayStoreCannotAnswer(t *testing.T) {
	store := &flakyStore{inner: replay.NewMemoryStore(0)}
	f := newExchangeFixture(t, store)
	store.inner.Now = f.clock.Now
	tok := f.mint()
	store.down.Store(true)
	wantRefusal(t, post(f.handler, exchangeForm(tok).Encode()), http.StatusServiceUnavailable, "temporarily_unavailable")
	if f.issuedCount() != 0 {
		t.Fatal("Issue ran without a redeem")
	}
	if !strings.Contains(f.logs.String(), errStoreDown.Error()) {
		t.Fatalf("the store failure is not logged: %s", f.logs.String())
	}
	store.down.Store(false)
	if w := post(f.handler, exchangeForm(tok).Encode()); w.Code != http.StatusOK {
		t.Fatalf("token after the outage: %d", w.Code)
	}

	// A full store is a store that cannot answer.
	full := replay.NewMemoryStore(1)
	g := newExchangeFixture(t, full)
	full.Now = g.clock.Now
	if w := post(g.handler, exchangeForm(g.mint()).Encode()); w.Code != http.StatusOK {
		t.Fatalf("first exchange: %d", w.Code)
	}
	wantRefusal(t, post(g.handler, exchangeForm(g.mint()).Encode()), http.StatusServiceUnavailable, "temporarily_unavailable")
}

func TestExchangeIssueFailureSpendsToken(t *testing.T) {
	for name, setup := range map[string]func(f *exchangeFixture){
		"error": func(f *exchangeFixture) {
			err := errors.New("signer offline")
			f.issueErr.Store(&err)
		},
		"empty credential": func(f *exchangeFixture) { f.badCred.Store(&exchange.Credential{ExpiresIn: time.Minute}) },
		"no lifetime":      func(f *exchangeFixture) { f.badCred.Store(&exchange.Credential{AccessToken: "x"}) },
		"negative lifetime": func(f *exchangeFixture) {
			f.badCred.Store(&exchange.Credential{AccessToken: "x", ExpiresIn: -time.Hour})
		},
		"sub-second lifetim": func(f *exchangeFixture) {
			f.badCred.Store(&exchange.Credential{AccessToken: "x", ExpiresIn: 999 * time.Millisecond})
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newExchangeFixture(t, nil)
			setup(f)
			tok := f.mint()
			wantRefusal(t, post(f.handler, exchangeForm(tok).Encode()), http.StatusInternalServerError, "server_error")
			f.issueErr.Store(nil)
			f.badCred.Store(nil)
			r := wantRefusal(t, post(f.handler, exchangeForm(tok).Encode()), http.StatusBadRequest, "invalid_grant")
			if r.Description != "subject_token was already used" {
				t.Fatalf("after a failed Issue: %q", r.Description)
			}
		})
	}
}

func TestExchangeNeverRevealsToken(t *testing.T) {
	store := &flakyStore{inner: replay.NewMemoryStore(0)}
	f := newExchangeFixture(t, store)
	store.inner.Now = f.clock.Now
	var tokens []string
	var responses []*httptest.ResponseRecorder
	send := func(tok string, mutate func(url.Values)) {
		tokens = append(tokens, tok)
		form := exchangeForm(tok)
		if mutate != nil {
			mutate(form)
		}
		responses = append(responses, post(f.handler, form.Encode()))
	}
	tok := f.mint()
	send(tok, nil) // success
	send(tok, nil) // replay
	send(tok[:len(tok)-3], nil)
	send(tok+"A", nil)
	send(f.mint(), func(v url.Values) { v.Set("grant_type", "x") })
	send(f.mint(), func(v url.Values) { v.Set("subject_token_type", "x") })
	send(f.mint(), func(v url.Values) { v["subject_token"] = append(v["subject_token"], "y") })
	f.refuseAuthorize(errors.New("run inactive"))
	send(f.mint(), nil)
	f.refuseAuthorize(nil)
	store.down.Store(true)
	send(f.mint(), nil)
	store.down.Store(false)
	err := errors.New("signer offline")
	f.issueErr.Store(&err)
	send(f.mint(), nil)
	f.issueErr.Store(nil)
	expired := f.mint()
	f.clock.Advance(time.Hour)
	send(expired, nil)

	logs := f.logs.String()
	if strings.Count(logs, "\n") != len(tokens) {
		t.Fatalf("%d log records for %d requests:\n%s", strings.Count(logs, "\n"), len(tokens), logs)
	}
	var seen strings.Builder
	for _, req := range append(f.authorized, f.issued...) {
		fmt.Fprintf(&seen, "%+v %#v\n", req, req)
	}
	for _, tok := range tokens {
		body := strings.TrimPrefix(tok, "ot1.")
		// Any 12-character run of the token's body would betray it.
		for i := 0; i+12 <= len(body); i += 6 {
			frag := body[i : i+12]
			for _, w := range responses {
				hdr := fmt.Sprint(w.Header())
				if strings.Contains(w.Body.String(), frag) || strings.Contains(hdr, frag) {
					t.Fatalf("a response carries the token: %d %s", w.Code, w.Body.String())
				}
			}
			if strings.Contains(logs, frag) {
				t.Fatalf("the log carries the token:\n%s", logs)
			}
			if strings.Contains(seen.String(), frag) {
				t.Fatal("a callback saw the token")
			}
		}
	}
	// And the issued credential is not logged either.
	for _, c := range f.creds {
		if strings.Contains(logs, c) {
			t.Fatalf("the log carries the credential:\n%s", logs)
		}
	}
}

func TestNewExchangeHandlerRejectsIncompleteConfig(t *testing.T) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	iss, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: exchangePurpose})
	if err != nil {
		t.Fatal(err)
	}
	authorize := func(context.Context, exchange.Request) error { return nil }
	issue := func(context.Context, exchange.Request) (exchange.Credential, error) {
		return exchange.Credential{AccessToken: "x", ExpiresIn: time.Minute}, nil
	}
	for _, tc := range []struct {
		name string
		cfg  exchange.Config
		want error
	}{
		{"nil issuer", exchange.Config{Authorize: authorize, Issue: issue}, ctoken.ErrNoKey},
		{"zero issuer", exchange.Config{Issuer: &ctoken.OneTimeIssuer{}, Authorize: authorize, Issue: issue}, ctoken.ErrNoKey},
		{"nil Authorize", exchange.Config{Issuer: iss, Issue: issue}, ctoken.ErrConfig},
		{"nil Issue", exchange.Config{Issuer: iss, Authorize: authorize}, ctoken.ErrConfig},
		{"relative token type", exchange.Config{Issuer: iss, Authorize: authorize, Issue: issue, IssuedTokenType: "jwt"}, ctoken.ErrConfig},
		{"token type with space", exchange.Config{Issuer: iss, Authorize: authorize, Issue: issue, IssuedTokenType: "urn:x:a b"}, ctoken.ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := exchange.NewHandler(tc.cfg)
			if h != nil || !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), "Config.") {
				t.Fatalf("got %v, %v; want %v with a reason", h, err, tc.want)
			}
		})
	}
}

// TestNewExchangeHandlerNamesEveryFaultAtOnce pins that a config with
// several faults is refused with one error naming each with its fix (the
// user who sets Authorize does not meet the missing Issue next), matching
// each fault's sentinel.
func TestNewExchangeHandlerNamesEveryFaultAtOnce(t *testing.T) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	iss, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: exchangePurpose})
	if err != nil {
		t.Fatal(err)
	}
	authorize := func(context.Context, exchange.Request) error { return nil }
	for _, tc := range []struct {
		name  string
		cfg   exchange.Config
		is    []error
		names []string
	}{
		{"all zero", exchange.Config{}, []error{ctoken.ErrNoKey, ctoken.ErrConfig},
			[]string{"3 configuration faults", "Issuer is nil or not made by ctoken.NewOneTimeIssuer (set the issuer",
				"Authorize is nil (the server decides before a token is consumed: set a function", "Issue is nil (set a function"}},
		{"no callbacks", exchange.Config{Issuer: iss}, []error{ctoken.ErrConfig},
			[]string{"2 configuration faults", "Authorize is nil", "Issue is nil"}},
		{"zero issuer, no Issue, relative token type", exchange.Config{Issuer: &ctoken.OneTimeIssuer{}, Authorize: authorize, IssuedTokenType: "jwt"},
			[]error{ctoken.ErrNoKey, ctoken.ErrConfig},
			[]string{"3 configuration faults", "Issuer is nil", "Issue is nil", "IssuedTokenType is not an absolute URI (leave it empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := exchange.NewHandler(tc.cfg)
			if h != nil || err == nil {
				t.Fatalf("NewHandler = %v, %v; want a refusal", h, err)
			}
			for _, want := range tc.is {
				if !errors.Is(err, want) {
					t.Errorf("error %v does not match %v", err, want)
				}
			}
			for _, name := range tc.names {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("error %q does not name %q", err, name)
				}
			}
		})
	}
}

func TestExchangeZeroHandlerRefuses(t *testing.T) {
	for _, h := range []*exchange.Handler{nil, {}} {
		w := post(h, exchangeForm("ot1.AAAA").Encode())
		wantRefusal(t, w, http.StatusInternalServerError, "server_error")
	}
}

func TestExchangeHandlerPrintsRedacted(t *testing.T) {
	f := newExchangeFixture(t, nil)
	js, err := json.Marshal(f.handler)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("h", "handler", f.handler, "value", *f.handler)
	cfg := exchange.Config{Issuer: f.issuer}
	outs := []string{string(js), logged.String(), fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg)}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		outs = append(outs, fmt.Sprintf(verb, f.handler), fmt.Sprintf(verb, *f.handler))
	}
	secrets := []string{string(f.key), hex.EncodeToString(f.key), base64.RawURLEncoding.EncodeToString(f.key), base64.StdEncoding.EncodeToString(f.key)}
	for _, out := range outs {
		if !strings.Contains(out, "ctoken.OneTimeIssuer(purpose") {
			t.Fatalf("not the description: %s", out)
		}
		for _, s := range secrets {
			if strings.Contains(out, s) || strings.Contains(out, fmt.Sprintf("%x", f.key[:8])) {
				t.Fatalf("key material printed: %s", out)
			}
		}
	}
	if got := fmt.Sprint(exchange.Handler{}); got != "exchange.Handler(not configured)" {
		t.Fatalf("zero handler prints %q", got)
	}
}

// FuzzExchangeHandler: no input panics the handler; every response is one
// of the documented statuses with an RFC 6749 JSON body, and a credential
// is returned only when Issue ran.
func FuzzExchangeHandler(f *testing.F) {
	fx := newExchangeFixture(f, nil)
	tok := fx.mint()
	const form = "application/x-www-form-urlencoded"
	f.Add(form, exchangeForm(tok).Encode())
	f.Add(form, exchangeForm(tok[:len(tok)-1]).Encode())
	f.Add(form, exchangeForm(tok).Encode()+"&subject_token=x")
	f.Add(form+"; charset=utf-8", "grant_type=a&subject_token=b")
	f.Add("application/json", `{"grant_type":"x"}`)
	f.Add(form, "%zz;&&==")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, contentType, body string) {
		before := fx.issuedCount()
		r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(body))
		r.Header.Set("Content-Type", contentType)
		w := httptest.NewRecorder()
		fx.handler.ServeHTTP(w, r)
		reply := decode(t, w)
		issued := fx.issuedCount() - before
		switch w.Code {
		case http.StatusOK:
			if issued != 1 || reply.AccessToken == "" || reply.Error != "" {
				t.Fatalf("200 with %d Issue calls: %s", issued, w.Body.String())
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusInternalServerError, http.StatusServiceUnavailable:
			if issued != 0 || reply.AccessToken != "" || reply.Error == "" {
				t.Fatalf("%d with %d Issue calls: %s", w.Code, issued, w.Body.String())
			}
		default:
			t.Fatalf("status %d", w.Code)
		}
	})
}

func TestExchangeIssueSeesRedeemedClaimsWhateverAuthorizeDoes(t *testing.T) {
	f := newExchangeFixture(t, nil)
	var issuedRun string
	h, err := exchange.NewHandler(exchange.Config{
		Issuer: f.issuer,
		Authorize: func(ctx context.Context, req exchange.Request) error {
			req.Token.Claims["run"] = "run_other"
			return nil
		},
		Issue: func(ctx context.Context, req exchange.Request) (exchange.Credential, error) {
			issuedRun = req.Token.Claims["run"]
			return exchange.Credential{AccessToken: "x", ExpiresIn: time.Minute}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if w := post(h, exchangeForm(f.mint()).Encode()); w.Code != http.StatusOK || issuedRun != "run_1" {
		t.Fatalf("%d, Issue saw run %q", w.Code, issuedRun)
	}
}

// TestExchangeRequestWithNilBodyIsInvalidNotAPanic: a request built by hand
// (no server sets a nil Body, but a handler may be called directly) is
// answered 400 invalid_request, as an empty body is, instead of panicking.
func TestExchangeRequestWithNilBodyIsInvalidNotAPanic(t *testing.T) {
	f := newExchangeFixture(t, nil)
	r := httptest.NewRequest(http.MethodPost, "/exchange", nil)
	r.Body = nil
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"invalid_request"`) {
		t.Fatalf("nil body: %d %s, want 400 invalid_request", w.Code, w.Body)
	}
}

// delayedStore is a replay.Store that takes at least delay per Claim.
type delayedStore struct {
	delay time.Duration
	inner replay.Store
}

func (s delayedStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	time.Sleep(s.delay)
	return s.inner.Claim(ctx, id, until)
}

func TestExchangeObserver(t *testing.T) {
	// Kills exchange.go `if h.obs != nil { start = time.Now() }` negated: the
	// StoreLatency the handler's observer is told is how long the redeem took
	// (at least the store's delay, far less than a minute), not the time since
	// the zero time — for an exchange that succeeds and for a replayed token.
	t.Run("store latency is the redeem's duration", func(t *testing.T) {
		const delay = 2 * time.Millisecond
		kr, err := ctoken.NewKeyring(ctoken.RandomKey())
		if err != nil {
			t.Fatal(err)
		}
		iss, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{
			Keys: kr, Purpose: exchangePurpose,
			Replay: delayedStore{delay: delay, inner: &replay.MemoryStore{}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var events observetest.Recorder
		h, err := exchange.NewHandler(exchange.Config{
			Issuer:    iss,
			Authorize: func(context.Context, exchange.Request) error { return nil },
			Issue: func(context.Context, exchange.Request) (exchange.Credential, error) {
				return exchange.Credential{AccessToken: "cred", ExpiresIn: time.Minute}, nil
			},
			Observer: &events,
		})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := iss.Mint(exchangeClaims)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []int{http.StatusOK, http.StatusBadRequest} {
			if w := post(h, exchangeForm(tok).Encode()); w.Code != want {
				t.Fatalf("status %d, want %d", w.Code, want)
			}
		}
		got := events.Take()
		if len(got) != 2 {
			t.Fatalf("%d events, want 2: %+v", len(got), got)
		}
		for _, e := range got {
			if e.StoreLatency < delay || e.StoreLatency > time.Minute {
				t.Fatalf("%v: StoreLatency = %v, want between %v and a minute", e.Outcome, e.StoreLatency, delay)
			}
		}
	})

	// Runs one exchange per outcome and
	// checks the one observe.KindExchange event each produces.
	t.Run("sees every outcome", func(t *testing.T) {
		clock := clocktest.New()
		kr, err := ctoken.NewKeyring(ctoken.RandomKey())
		if err != nil {
			t.Fatal(err)
		}
		store := &flakyStore{inner: &replay.MemoryStore{Now: clock.Now}}
		iss, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: kr, Purpose: exchangePurpose, Replay: store, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		var (
			events    observetest.Recorder
			refuse    error
			issueFail error
		)
		h, err := exchange.NewHandler(exchange.Config{
			Issuer:    iss,
			Authorize: func(context.Context, exchange.Request) error { return refuse },
			Issue: func(context.Context, exchange.Request) (exchange.Credential, error) {
				return exchange.Credential{AccessToken: "cred", ExpiresIn: time.Minute}, issueFail
			},
			Observer: &events,
		})
		if err != nil {
			t.Fatal(err)
		}
		mint := func() string {
			tok, err := iss.Mint(exchangeClaims)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}
		used := mint()
		steps := []struct {
			name    string
			body    string
			setup   func()
			status  int
			outcome observe.Outcome
			reason  observe.RefusalReason
			store   bool
		}{
			{"issued", exchangeForm(used).Encode(), nil, http.StatusOK, observe.OutcomeIssued, observe.ReasonNone, true},
			{"duplicate", exchangeForm(used).Encode(), nil, http.StatusBadRequest, observe.OutcomeDuplicate, observe.ReasonAlreadyRedeemed, true},
			{"malformed request", "grant_type=x", nil, http.StatusBadRequest, observe.OutcomeRefused, observe.ReasonExchangeRequest, false},
			{"forged token", exchangeForm("ot1.AAAA").Encode(), nil, http.StatusBadRequest, observe.OutcomeRefused, observe.ReasonTruncated, false},
			{"authorize refuses", exchangeForm(mint()).Encode(), func() { refuse = errors.New("no") }, http.StatusBadRequest, observe.OutcomeRefused, observe.ReasonAuthorizeRefused, false},
			{"store down", exchangeForm(mint()).Encode(), func() { refuse = nil; store.down.Store(true) }, http.StatusServiceUnavailable, observe.OutcomeStoreFailure, observe.ReasonStoreFailed, true},
			{"issue fails", exchangeForm(mint()).Encode(), func() { store.down.Store(false); issueFail = errors.New("db") }, http.StatusInternalServerError, observe.OutcomeRefused, observe.ReasonIssueFailed, true},
		}
		for _, s := range steps {
			if s.setup != nil {
				s.setup()
			}
			w := post(h, s.body)
			if w.Code != s.status {
				t.Errorf("%s: status %d, want %d", s.name, w.Code, s.status)
			}
			e := events.Only(t, s.name)
			if e.Kind != observe.KindExchange || e.Outcome != s.outcome || e.Reason != s.reason || (e.StoreLatency > 0) != s.store {
				t.Errorf("%s: event %+v, want outcome %v reason %q store latency %v", s.name, e, s.outcome, s.reason, s.store)
			}
		}
	})
}

// Kills exchange.go `int64(cred.ExpiresIn/time.Second)` with `/` made `*`
// in the success log record: the record's expires_in is the credential's
// lifetime in whole seconds (15m0.999s → 900), as in the response body.
func TestExchangeSuccessLogStatesExpiresInWholeSeconds(t *testing.T) {
	f := newExchangeFixture(t, nil)
	w := post(f.handler, exchangeForm(f.mint()).Encode())
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", w.Code, w.Body)
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var rec struct {
			Msg       string `json:"msg"`
			ExpiresIn *int64 `json:"expires_in"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Msg != "ctoken exchange: credential issued" {
			continue
		}
		found = true
		if rec.ExpiresIn == nil || *rec.ExpiresIn != 900 {
			t.Fatalf("expires_in = %v in %s, want 900", rec.ExpiresIn, line)
		}
	}
	if !found {
		t.Fatalf("no success record in the log:\n%s", f.logs)
	}
}

// refusalRecord is a "ctoken exchange: refused" log record.
type refusalRecord struct {
	Level  string  `json:"level"`
	Status int     `json:"status"`
	Check  string  `json:"check"`
	Err    *string `json:"err"`
}

// lastRefusal returns the last refusal record in f's log and clears the log.
func lastRefusal(t *testing.T, f *exchangeFixture) refusalRecord {
	t.Helper()
	var rec refusalRecord
	found := false
	for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var r struct {
			Msg string `json:"msg"`
			refusalRecord
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r.Msg == "ctoken exchange: refused" {
			rec, found = r.refusalRecord, true
		}
	}
	if !found {
		t.Fatalf("no refusal record in the log:\n%s", f.logs)
	}
	f.logs.mu.Lock()
	f.logs.b.Reset()
	f.logs.mu.Unlock()
	return rec
}

// Kills exchange.go `ref.status >= 500` (→ `>`, and negated) and the `||`
// → `&&` mutants of isOneTimeRefusal: a refusal of the token itself
// (forged, expired, replayed) is logged at WARN with the issuer's check and
// without the error text, a server-side failure (status 500 exactly, or
// 503) at ERROR with the callback's or the store's error text.
func TestExchangeRefusalLogLevelAndErrorText(t *testing.T) {
	f := newExchangeFixture(t, nil)

	post(f.handler, exchangeForm("ot1.AAAA").Encode())
	if r := lastRefusal(t, f); r.Level != "WARN" || r.Status != http.StatusBadRequest || r.Check != "truncated" || r.Err != nil {
		t.Fatalf("forged token: %+v, want WARN 400 check truncated and no err", r)
	}

	expired := f.mint()
	f.clock.Advance((10 * time.Minute))
	post(f.handler, exchangeForm(expired).Encode())
	if r := lastRefusal(t, f); r.Level != "WARN" || r.Check != "expired" || r.Err != nil {
		t.Fatalf("expired token: %+v, want WARN, check expired and no err", r)
	}

	used := f.mint()
	if w := post(f.handler, exchangeForm(used).Encode()); w.Code != http.StatusOK {
		t.Fatalf("first exchange: %d", w.Code)
	}
	post(f.handler, exchangeForm(used).Encode())
	if r := lastRefusal(t, f); r.Level != "WARN" || r.Check != "already redeemed" || r.Err != nil {
		t.Fatalf("replayed token: %+v, want WARN, check already redeemed and no err", r)
	}

	issueErr := errors.New("credential database down")
	f.issueErr.Store(&issueErr)
	post(f.handler, exchangeForm(f.mint()).Encode())
	f.issueErr.Store(nil)
	if r := lastRefusal(t, f); r.Level != "ERROR" || r.Status != http.StatusInternalServerError || r.Err == nil || *r.Err != issueErr.Error() {
		t.Fatalf("Issue failure: %+v, want ERROR 500 with the callback's error", r)
	}
}
