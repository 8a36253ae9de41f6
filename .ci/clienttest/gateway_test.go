package clienttest

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/stripe/stripe-go/v85"

	"github.com/ctoken/ctoken/idempotency"
)

// cuttingGateway is an api whose POST /v1/customers is an
// httputil.ReverseProxy, behind the middleware, to an upstream that
// counts each request that reaches it (a payment) and answers 200 with a
// Content-Length of 100, then breaks off its body after 13 bytes: the
// proxy has written 200 and panics with http.ErrAbortHandler.
func cuttingGateway(t *testing.T) (*api, *atomic.Int32) {
	t.Helper()
	var payments atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payments.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, `{"id":"cus_1"`)
		rc := http.NewResponseController(w)
		rc.Flush()
		conn, _, err := rc.Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(up.Close)
	target, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	return newAPI(t, func(a *api) { a.handle("POST /v1/customers", proxy.ServeHTTP) }), &payments
}

// Issue 106: each client retries the broken connection by itself under
// the same key; the retries get the outcome-unknown 503 replayed, and
// the upstream is reached once.
func TestClientsThroughAGatewayWhoseUpstreamBreaksOffPayOnce(t *testing.T) {
	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	t.Run("go-retryablehttp", func(t *testing.T) {
		a, payments := cuttingGateway(t)
		c := retryablehttp.NewClient()
		c.HTTPClient = a.srv.Client()
		c.RetryMax, c.RetryWaitMin, c.RetryWaitMax = 2, 10*time.Millisecond, 50*time.Millisecond
		c.ErrorHandler = retryablehttp.PassthroughErrorHandler
		c.Logger = nil
		r, err := retryablehttp.NewRequest(http.MethodPost, a.srv.URL+"/v1/customers", strings.NewReader(`{"email":"jenny@example.com"}`))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", "Bearer alice")
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("Content-Type", "application/json")
		res, err := c.Do(r)
		if err != nil {
			t.Fatalf("the client's last answer: %v", err)
		}
		defer res.Body.Close()
		var p struct{ Type string }
		if err := json.NewDecoder(res.Body).Decode(&p); err != nil || res.StatusCode != http.StatusServiceUnavailable ||
			p.Type != idempotency.ProblemOutcomeUnknown || res.Header.Get(idempotency.ReplayedHeader) != "true" {
			t.Fatalf("last answer %d %+v (%v), want the outcome-unknown 503 replayed", res.StatusCode, p, err)
		}
		if n, got := payments.Load(), len(a.requests()); n != 1 || got != 2 {
			t.Fatalf("%d payments, %d answered retries; want 1 and 2", n, got)
		}
	})
	t.Run("stripe-go", func(t *testing.T) {
		a, payments := cuttingGateway(t)
		p := &stripe.CustomerCreateParams{Email: stripe.String("jenny@example.com")}
		p.IdempotencyKey = stripe.String(key)
		_, err := stripeClient(a, 2).V1Customers.Create(context.Background(), p)
		if err == nil || !strings.Contains(err.Error(), idempotency.ProblemOutcomeUnknown) {
			t.Fatalf("Create: %v, want the outcome-unknown 503 of its last retry", err)
		}
		if n, got := payments.Load(), len(a.requests()); n != 1 || got != 2 {
			t.Fatalf("%d payments, %d answered retries; want 1 and 2", n, got)
		}
	})
}
