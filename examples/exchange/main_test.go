package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/exchange"
	"github.com/golang-jwt/jwt/v5"
)

func TestExchangeWalkThrough(t *testing.T) {
	t.Setenv("CTOKEN_KEYS", "")
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"agent A exchanges its bootstrap token: 200",
		"token_type Bearer, issued_token_type urn:ietf:params:oauth:token-type:jwt, expires_in 900",
		"agent A reads its run context: 200",
		"agent A posts an event: 200",
		"a second exchange of A's bootstrap token: 400 invalid_grant (subject_token was already used)",
		"agent A's bearer on run B's route: 403 insufficient_scope",
		"exchange for a finished run: 400 invalid_grant (the server refused the exchange)",
		"(the refused token was not consumed)",
		"agent B exchanges its expired bootstrap token: 400 invalid_grant (subject_token has expired)",
		"agent A's bearer, 11 minutes old: 200",
		"agent A's bearer, 16 minutes old: 401 invalid_token (the bearer token has expired)",
		"done",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "ot1.") {
		t.Errorf("a bootstrap token was printed:\n%s", out.String())
	}
}

func TestExchangeRefusesMalformedKeys(t *testing.T) {
	t.Setenv("CTOKEN_KEYS", "not-a-key!")
	if _, err := newServer(io.Discard); err == nil {
		t.Fatal("malformed CTOKEN_KEYS accepted")
	}
}

// curl is what the curl commands in the package comment send.
func curl(t *testing.T, method, target, bearer string, form url.Values) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	return res.StatusCode, body
}

func newTestServer(t *testing.T) (*server, string) {
	t.Helper()
	t.Setenv("CTOKEN_KEYS", ctoken.EncodeKey(ctoken.RandomKey()))
	s, err := newServer(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.mux)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func exchangeValues(boot string) url.Values {
	return url.Values{
		"grant_type":         {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token_type": {"urn:ctoken:params:oauth:token-type:one-time"},
		"subject_token":      {boot},
	}
}

func TestExchangeCurlSequence(t *testing.T) {
	_, base := newTestServer(t)
	status, launch := curl(t, http.MethodPost, base+"/demo/launch", "", url.Values{"agent": {"agt_1"}, "company": {"co_1"}})
	if status != http.StatusOK {
		t.Fatalf("launch: %d %v", status, launch)
	}
	runID, boot := launch["run"].(string), launch["bootstrap_token"].(string)
	status, tok := curl(t, http.MethodPost, base+exchangePath, "", exchangeValues(boot))
	if status != http.StatusOK || tok["token_type"] != "Bearer" || tok["expires_in"] != float64(900) ||
		tok["issued_token_type"] != exchange.TokenTypeJWT || len(tok) != 4 {
		t.Fatalf("exchange: %d %v", status, tok)
	}
	bearer := tok["access_token"].(string)
	if status, body := curl(t, http.MethodGet, base+"/api/runs/"+runID+"/context", bearer, nil); status != http.StatusOK || body["agent"] != "agt_1" || body["run"] != runID {
		t.Fatalf("context: %d %v", status, body)
	}
	if status, body := curl(t, http.MethodPost, base+"/api/runs/"+runID+"/events", bearer, url.Values{"note": {"step 1 done"}}); status != http.StatusOK || body["events"] != float64(1) {
		t.Fatalf("event: %d %v", status, body)
	}
	if status, body := curl(t, http.MethodPost, base+exchangePath, "", exchangeValues(boot)); status != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Fatalf("second exchange: %d %v", status, body)
	}
}

func TestExchangeRefusesForeignAudienceAndScope(t *testing.T) {
	s, base := newTestServer(t)
	_, boot, err := s.launch("agt_1", "co_1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ param, value, code string }{
		{"audience", "https://elsewhere.example", "invalid_target"},
		{"resource", "https://elsewhere.example/api", "invalid_target"},
		{"scope", "admin", "invalid_scope"},
	} {
		form := exchangeValues(boot)
		form.Set(tc.param, tc.value)
		if status, body := curl(t, http.MethodPost, base+exchangePath, "", form); status != http.StatusBadRequest || body["error"] != tc.code {
			t.Fatalf("%s=%s: %d %v", tc.param, tc.value, status, body)
		}
	}
	// None of the refusals consumed the token.
	form := exchangeValues(boot)
	form.Set("audience", jwtAudience)
	if status, body := curl(t, http.MethodPost, base+exchangePath, "", form); status != http.StatusOK {
		t.Fatalf("exchange for this API: %d %v", status, body)
	}
}

func TestBearerRouteRefusesForgedOrMissingBearer(t *testing.T) {
	s, base := newTestServer(t)
	runID, _, err := s.launch("agt_1", "co_1")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := runClaims{Run: runID, Company: "co_1", RegisteredClaims: jwt.RegisteredClaims{
		Issuer: jwtIssuer, Subject: "agt_1", Audience: jwt.ClaimStrings{jwtAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute)),
	}}
	sign := func(c runClaims, key []byte) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	otherAud := claims
	otherAud.Audience = jwt.ClaimStrings{"another-api"}
	noExp := claims
	noExp.ExpiresAt = nil
	path := base + "/api/runs/" + runID + "/context"
	if status, _ := curl(t, http.MethodGet, path, sign(claims, s.jwtKey), nil); status != http.StatusOK {
		t.Fatalf("a valid bearer: %d", status)
	}
	for name, bearer := range map[string]string{
		"missing":        "",
		"other key":      sign(claims, []byte("0123456789abcdef0123456789abcdef")),
		"alg none":       none,
		"other audience": sign(otherAud, s.jwtKey),
		"no expiry":      sign(noExp, s.jwtKey),
		"garbage":        "not.a.jwt",
	} {
		if status, body := curl(t, http.MethodGet, path, bearer, nil); status != http.StatusUnauthorized || body["error"] != "invalid_token" {
			t.Errorf("%s: %d %v", name, status, body)
		}
	}
}
