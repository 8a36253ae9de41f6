package idempotency

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/httpx"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

const key1 = `"8e03978e-40d5-43e8-bc93-6894a57f9324"`

// problemOf decodes a problem+json answer and checks its framing.
func problemOf(t *testing.T, w *httptest.ResponseRecorder, status int) map[string]any {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if p["status"] != float64(status) || p["type"] == "about:blank" && p["title"] != http.StatusText(status) || p["title"] == "" || p["detail"] == "" {
		t.Fatalf("problem %v", p)
	}
	return p
}

func TestMiddlewareRunsOnceAndReplays(t *testing.T) {
	t.Run("first request runs the handler and answers its response", func(t *testing.T) {
		f := newFixture(t, Config{}, nil)
		w := f.post(key1, `{"amount":100}`)
		if w.Code != http.StatusCreated || f.runs.Load() != 1 || w.Header().Get(ReplayedHeader) != "" {
			t.Fatalf("status %d runs %d replayed %q", w.Code, f.runs.Load(), w.Header().Get(ReplayedHeader))
		}
		if e := f.obs.last(t); e.Kind != observe.KindIdempotency || e.Outcome != observe.OutcomeProcessed || e.StoreLatency <= 0 {
			t.Errorf("event %+v", e)
		}
	})
	t.Run("retry gets the stored response byte for byte without running the handler", func(t *testing.T) {
		f := newFixture(t, Config{}, nil)
		first := f.post(key1, `{"amount":100}`)
		for range 3 {
			again := f.post(key1, `{"amount":100}`)
			if again.Code != first.Code || again.Body.String() != first.Body.String() {
				t.Fatalf("replay %d %q, first %d %q", again.Code, again.Body, first.Code, first.Body)
			}
			if again.Header().Get(ReplayedHeader) != "true" || again.Header().Get("Location") != "/payments/1" ||
				again.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("replay headers %v", again.Header())
			}
		}
		if f.runs.Load() != 1 {
			t.Fatalf("handler ran %d times", f.runs.Load())
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeDuplicate || e.Reason != observe.ReasonIdempotencyReplayed {
			t.Errorf("event %+v", e)
		}
	})
	t.Run("JSON body with other member order and white space is the same request", func(t *testing.T) {
		f := newFixture(t, Config{}, nil)
		f.post(key1, `{"amount":100,"currency":"eur"}`)
		w := f.post(key1, " {\n \"currency\" : \"eur\", \"amount\":1e2 } ")
		if w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "true" || f.runs.Load() != 1 {
			t.Fatalf("status %d replayed %q runs %d", w.Code, w.Header().Get(ReplayedHeader), f.runs.Load())
		}
	})
	t.Run("other callers and other routes with the same key run again", func(t *testing.T) {
		route := "POST /payments"
		f := newFixture(t, Config{Route: func(*http.Request) string { return route }}, nil)
		f.post(key1, `{}`)
		if w := f.do(req(http.MethodPost, "/payments", "bob", key1, `{}`)); w.Header().Get(ReplayedHeader) != "" {
			t.Fatal("bob got alice's response")
		}
		route = "POST /refunds"
		if w := f.post(key1, `{}`); w.Header().Get(ReplayedHeader) != "" {
			t.Fatal("another route got the first route's response")
		}
		if f.runs.Load() != 3 {
			t.Fatalf("handler ran %d times, want 3", f.runs.Load())
		}
	})
	t.Run("default route is the ServeMux pattern", func(t *testing.T) {
		store := newStore()
		mw, err := New(Config{Store: store, Keys: testKeys, Caller: func(*http.Request) (string, error) { return "alice", nil }})
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++; w.WriteHeader(201) }))
		mux := http.NewServeMux()
		mux.Handle("POST /a/{id}", h)
		mux.Handle("POST /b/{id}", h)
		for _, target := range []string{"/a/1", "/a/1", "/b/1"} {
			mux.ServeHTTP(httptest.NewRecorder(), req(http.MethodPost, target, "", key1, ""))
		}
		if runs != 2 {
			t.Fatalf("handler ran %d times, want 2 (once per pattern)", runs)
		}
		if rec, _ := store.AcquireRecord(context.Background(), StoreID("alice", "POST /a/{id}", strings.Trim(key1, `"`)), time.Minute, nil); rec.State != replay.LeaseDone {
			t.Fatalf("store ID of the pattern is %v", rec.State)
		}
	})
	t.Run("a body for 204 is refused as net/http refuses it", func(t *testing.T) {
		var werr error
		f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
			_, werr = io.WriteString(w, "not allowed")
		})
		f.post(key1, `{}`)
		w := f.post(key1, `{}`)
		if !errors.Is(werr, http.ErrBodyNotAllowed) || w.Code != http.StatusNoContent || w.Body.Len() != 0 || w.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("write error %v; replay %d %q", werr, w.Code, w.Body)
		}
	})
	t.Run("a body of exactly MaxRequestBytes is accepted", func(t *testing.T) {
		f := newFixture(t, Config{MaxRequestBytes: int64(len(`{"amount":100}`))}, nil)
		if w := f.post(key1, `{"amount":100}`); w.Code != http.StatusCreated {
			t.Fatalf("status %d", w.Code)
		}
	})
	t.Run("handler writing nothing is recorded as 200", func(t *testing.T) {
		f := newFixture(t, Config{}, func(http.ResponseWriter, *http.Request) {})
		f.post(key1, `{}`)
		w := f.post(key1, `{}`)
		if w.Code != http.StatusOK || w.Header().Get(ReplayedHeader) != "true" || f.runs.Load() != 1 {
			t.Fatalf("status %d replayed %q runs %d", w.Code, w.Header().Get(ReplayedHeader), f.runs.Load())
		}
	})
	t.Run("the handler reads the body and gets a deadline at three quarters of the lease", func(t *testing.T) {
		var got string
		var left time.Duration
		f := newFixture(t, Config{Lease: 8 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got = string(b)
			d, ok := r.Context().Deadline()
			if ok {
				left = time.Until(d)
			}
		})
		f.post(key1, `{"a":1}`)
		if got != `{"a":1}` || left <= 5*time.Second || left > 6*time.Second {
			t.Fatalf("body %q, deadline in %v (want about 6s)", got, left)
		}
	})
}

// TestMiddlewareReplaysOnlyNamedHeaders: a replay writes only the
// headers ReplayHeaders names, of the response the handler sent and of
// whatever an authentic record holds.
func TestMiddlewareReplaysOnlyNamedHeaders(t *testing.T) {
	t.Run("set by the handler", func(t *testing.T) {
		f := newFixture(t, Config{ReplayHeaders: []string{"content-type", "X-Payment-Id"}}, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Add("X-Payment-Id", "p1")
			w.Header().Add("X-Payment-Id", "p2")
			w.Header().Set("Set-Cookie", "session=secret")
			w.Header().Set("X-Other", "x")
			w.WriteHeader(http.StatusAccepted)
			w.Header().Set("X-Late", "after WriteHeader")
			io.WriteString(w, "ok")
		})
		first := f.post(key1, `{}`)
		if first.Header().Get("X-Late") != "" || first.Header().Get("Set-Cookie") == "" {
			t.Fatalf("first response headers %v (a header set after WriteHeader must not be sent)", first.Header())
		}
		w := f.post(key1, `{}`)
		h := w.Header()
		if w.Code != http.StatusAccepted || h.Get("Content-Type") != "text/plain" || strings.Join(h.Values("X-Payment-Id"), ",") != "p1,p2" {
			t.Fatalf("replay %d %v", w.Code, h)
		}
		for _, n := range []string{"Set-Cookie", "X-Other", "X-Late"} {
			if h.Get(n) != "" {
				t.Errorf("replay carries %s", n)
			}
		}
	})

	// Authentic records holding headers the configuration does not name,
	// or refuses outright, are replayed: only ReplayHeaders are written.
	t.Run("whatever the record holds", func(t *testing.T) {
		held := [][2]string{
			{"Set-Cookie", "session=stolen"}, {"Content-Type", "application/json"}, {"Www-Authenticate", "Basic"},
			{"Access-Control-Allow-Origin", "*"}, {"Location", "/payments/1"}, {"Set-Cookie", "b=2"},
			{"Proxy-Authenticate", "Basic"}, {"Transfer-Encoding", "chunked"}, {"Content-Length", "99"},
			{"Idempotent-Replayed", "false"}, {"X-Payment-Id", "p1"}, {"Clear-Site-Data", `"*"`},
			{"Authentication-Info", "a"}, {"Connection", "close"}, {"Link", "</a>"}, {"Link", "</b>"},
		}
		for _, tc := range []struct {
			name    string
			replay  []string
			want    map[string]string // header → values joined by ","
			missing []string
		}{
			{"default ReplayHeaders", nil,
				map[string]string{"Content-Type": "application/json", "Location": "/payments/1", "Link": "</a>,</b>", ReplayedHeader: "true"},
				[]string{"Set-Cookie", "Www-Authenticate", "Access-Control-Allow-Origin", "Proxy-Authenticate", "Transfer-Encoding", "X-Payment-Id", "Clear-Site-Data", "Authentication-Info", "Connection"}},
			{"ReplayHeaders naming one header", []string{"x-payment-id"},
				map[string]string{"X-Payment-Id": "p1", ReplayedHeader: "true"},
				[]string{"Set-Cookie", "Content-Type", "Location", "Link", "Www-Authenticate", "Access-Control-Allow-Origin"}},
			{"empty ReplayHeaders", []string{},
				map[string]string{ReplayedHeader: "true"},
				[]string{"Set-Cookie", "Content-Type", "Location", "X-Payment-Id"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := withRecord(t, Config{ReplayHeaders: tc.replay}, `{}`, Response{Status: 201, Header: held, Body: []byte(`{"id":"pay_1"}`)})
				w := f.post(key1, `{}`)
				if w.Code != http.StatusCreated || w.Body.String() != `{"id":"pay_1"}` || f.runs.Load() != 0 {
					t.Fatalf("replay %d %q, runs %d", w.Code, w.Body.String(), f.runs.Load())
				}
				for name, v := range tc.want {
					if got := strings.Join(w.Header().Values(name), ","); got != v {
						t.Errorf("%s = %q, want %q", name, got, v)
					}
				}
				for _, name := range tc.missing {
					if v := w.Header().Values(name); len(v) != 0 {
						t.Errorf("replay carries %s: %q", name, v)
					}
				}
				if len(w.Header()) != len(tc.want) {
					t.Errorf("replayed headers %v, want only %v", w.Header(), tc.want)
				}
			})
		}
	})
}

// withRecord returns a fixture of cfg over a store whose record for key1
// (alice's POST /payments of body) is resp, sealed with the fixture's keys:
// a record made directly, as a store could hold it.
func withRecord(t *testing.T, cfg Config, body string, resp Response) *fixture {
	t.Helper()
	seed := newStore()
	newFixture(t, Config{Store: seed}, nil).post(key1, body)
	id := StoreID("alice", "POST /payments", strings.Trim(key1, `"`))
	rec, err := seed.AcquireRecord(context.Background(), id, time.Minute, nil)
	if err != nil || rec.State != replay.LeaseDone {
		t.Fatalf("seed record: %+v, %v", rec, err)
	}
	s, _ := newSealer(testKeys)
	sealed, err := s.seal(id, rec.Fingerprint, resp)
	if err != nil {
		t.Fatal(err)
	}
	store := newStore()
	l, _ := store.AcquireRecord(context.Background(), id, time.Minute, rec.Fingerprint)
	if err := store.ConfirmRecord(context.Background(), id, l.Token, time.Now().Add(time.Hour), rec.Fingerprint, sealed); err != nil {
		t.Fatal(err)
	}
	cfg.Store = store
	return newFixture(t, cfg, nil)
}

func TestMiddlewarePassesThrough(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		method   string
		key      string
		wantRuns int32
	}{
		{"GET with a key", Config{}, http.MethodGet, key1, 2},
		{"PUT with a key when Methods is the default", Config{}, http.MethodPut, key1, 2},
		{"POST without a key on a route that does not require one", Config{}, http.MethodPost, "", 2},
		{"PUT with a key when Methods names it", Config{Methods: []string{http.MethodPut}}, http.MethodPut, key1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cfg, nil)
			for range 2 {
				if w := f.do(req(tc.method, "/payments", "alice", tc.key, `{}`)); w.Header().Get(ReplayedHeader) != "" && tc.wantRuns == 2 {
					t.Fatal("pass-through request replayed")
				}
			}
			if f.runs.Load() != tc.wantRuns {
				t.Fatalf("handler ran %d times, want %d", f.runs.Load(), tc.wantRuns)
			}
			if tc.wantRuns == 2 && len(f.obs.all()) != 0 {
				t.Fatalf("pass-through observed: %+v", f.obs.all())
			}
		})
	}
}

func TestMiddlewareRefuses(t *testing.T) {
	long := `"` + strings.Repeat("k", 256) + `"`
	for _, tc := range []struct {
		name   string
		cfg    Config
		mod    func(r *http.Request)
		status int
		reason observe.RefusalReason
		detail string // a fragment of the problem detail
		alone  bool   // the fixture's default request cannot follow
	}{
		{"missing key on a route that requires one", Config{Required: true}, func(r *http.Request) { r.Header.Del("Idempotency-Key") }, 400, observe.ReasonIdempotencyKeyMissing, "requires the Idempotency-Key header", false},
		{"missing custom key header", Config{Required: true, Header: "x-request-key"}, func(r *http.Request) {}, 400, observe.ReasonIdempotencyKeyMissing, "requires the X-Request-Key header", true},
		{"repeated key header", Config{}, func(r *http.Request) { r.Header.Add("Idempotency-Key", key1) }, 400, observe.ReasonIdempotencyKeyRepeated, "structured-field string", false},
		{"bare key with an inner space", Config{}, func(r *http.Request) { r.Header.Set("Idempotency-Key", "a b") }, 400, observe.ReasonIdempotencyKeyMalformed, "or bare visible ASCII", false},
		{"bare key with a parameter", Config{}, func(r *http.Request) { r.Header.Set("Idempotency-Key", "abc;a=1") }, 400, observe.ReasonIdempotencyKeyMalformed, "structured-field string", false},
		{"bare key as a list", Config{}, func(r *http.Request) { r.Header.Set("Idempotency-Key", "a, b") }, 400, observe.ReasonIdempotencyKeyMalformed, "", false},
		{"bare key over MaxKeyBytes", Config{}, func(r *http.Request) { r.Header.Set("Idempotency-Key", strings.Repeat("k", 256)) }, 400, observe.ReasonIdempotencyKeyLength, "1 to 255 characters", false},
		{"key with a parameter", Config{}, func(r *http.Request) { r.Header.Set("Idempotency-Key", key1+";a=1") }, 400, observe.ReasonIdempotencyKeyMalformed, "", false},
		{"key as a list", Config{}, func(r *http.Request) { r.Header.Set("Idempotency-Key", `"a", "b"`) }, 400, observe.ReasonIdempotencyKeyMalformed, "", false},
		{"empty key", Config{}, func(r *http.Request) { r.Header.Set("Idempotency-Key", `""`) }, 400, observe.ReasonIdempotencyKeyLength, "", false},
		{"key over MaxKeyBytes", Config{}, func(r *http.Request) { r.Header.Set("Idempotency-Key", long) }, 400, observe.ReasonIdempotencyKeyLength, "1 to 255 characters", false},
		{"no caller", Config{}, func(r *http.Request) { r.Header.Del("X-User") }, 401, observe.ReasonIdempotencyNoCaller, "no authenticated caller", false},
		{"caller error", Config{Caller: func(*http.Request) (string, error) { return "alice", errors.New("bad token") }}, func(r *http.Request) {}, 401, observe.ReasonIdempotencyNoCaller, "", true},
		{"no caller before a missing key", Config{Required: true}, func(r *http.Request) { r.Header.Del("X-User"); r.Header.Del("Idempotency-Key") }, 400, observe.ReasonIdempotencyKeyMissing, "", false},
		{"body over MaxRequestBytes", Config{MaxRequestBytes: 13}, func(r *http.Request) {}, 413, observe.ReasonIdempotencyBodyTooLarge, "over 13 bytes", false},
		{"body over MaxRequestBytes without a Content-Length", Config{MaxRequestBytes: 13}, func(r *http.Request) { r.ContentLength = -1 }, 413, observe.ReasonIdempotencyBodyTooLarge, "", false},
		{"unreadable body", Config{}, func(r *http.Request) {
			r.Body = io.NopCloser(io.MultiReader(strings.NewReader("{"), errReader{}))
			r.ContentLength = -1
		}, 400, observe.ReasonIdempotencyBodyUnreadable, "could not be read", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cfg, nil)
			r := req(http.MethodPost, "/payments", "alice", key1, `{"amount":100}`)
			tc.mod(r)
			w := f.do(r)
			p := problemOf(t, w, tc.status)
			if f.runs.Load() != 0 {
				t.Fatal("handler ran")
			}
			if got := w.Header().Get("WWW-Authenticate"); (tc.status == http.StatusUnauthorized) != (got == DefaultChallenge) {
				t.Errorf("status %d with WWW-Authenticate %q", tc.status, got)
			}
			if tc.detail != "" && !strings.Contains(p["detail"].(string), tc.detail) {
				t.Errorf("detail %q lacks %q", p["detail"], tc.detail)
			}
			if e := f.obs.last(t); e.Outcome != observe.OutcomeRefused || e.Reason != tc.reason || e.StoreLatency != 0 {
				t.Errorf("event %+v, want refused %q without a store call", e, tc.reason)
			}
			if tc.alone {
				return
			}
			// Nothing was claimed: a good request with the key runs.
			if w := f.post(key1, `{}`); w.Code != http.StatusCreated || f.runs.Load() != 1 {
				t.Fatalf("good request after the refusal: %d, runs %d", w.Code, f.runs.Load())
			}
		})
	}
}

func TestMiddlewareUnauthorizedCarriesTheChallenge(t *testing.T) {
	f := newFixture(t, Config{Challenge: `Basic realm="payments", charset="UTF-8"`}, nil)
	w := f.do(req(http.MethodPost, "/payments", "", key1, `{}`))
	problemOf(t, w, http.StatusUnauthorized)
	if got := w.Header().Get("WWW-Authenticate"); got != `Basic realm="payments", charset="UTF-8"` {
		t.Fatalf("WWW-Authenticate %q", got)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestMiddlewareRefusesADifferentRequestWithTheSameKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *http.Request
	}{
		{"other body", req(http.MethodPost, "/payments", "alice", key1, `{"amount":200}`)},
		{"other method", req(http.MethodPatch, "/payments", "alice", key1, `{"amount":100}`)},
		{"other path", req(http.MethodPost, "/payments/x", "alice", key1, `{"amount":100}`)},
		{"other query", req(http.MethodPost, "/payments?dry=1", "alice", key1, `{"amount":100}`)},
		{"same bytes under another content type", func() *http.Request {
			r := req(http.MethodPost, "/payments", "alice", key1, `{"amount":100}`)
			r.Header.Set("Content-Type", "text/plain")
			return r
		}()},
		{"the body gzip-encoded", func() *http.Request {
			var gz bytes.Buffer
			zw := gzip.NewWriter(&gz)
			io.WriteString(zw, `{"amount":100}`)
			zw.Close()
			r := req(http.MethodPost, "/payments", "alice", key1, gz.String())
			r.Header.Set("Content-Encoding", "gzip")
			return r
		}()},
		{"the same bytes labelled gzip", func() *http.Request {
			r := req(http.MethodPost, "/payments", "alice", key1, `{"amount":100}`)
			r.Header.Set("Content-Encoding", "gzip")
			return r
		}()},
	} {
		t.Run(tc.name+" after completion", func(t *testing.T) {
			f := newFixture(t, Config{}, nil)
			f.post(key1, `{"amount":100}`)
			p := problemOf(t, f.do(tc.r), http.StatusUnprocessableEntity)
			if !strings.Contains(p["detail"].(string), "different request") || f.runs.Load() != 1 {
				t.Fatalf("detail %q runs %d", p["detail"], f.runs.Load())
			}
			if e := f.obs.last(t); e.Outcome != observe.OutcomeRefused || e.Reason != observe.ReasonIdempotencyMismatch {
				t.Errorf("event %+v", e)
			}
		})
	}
}

func TestMiddlewareConcurrentDuplicate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		status int
		reason observe.RefusalReason
	}{
		{"same request gets 409 with Retry-After", `{"amount":100}`, http.StatusConflict, observe.ReasonIdempotencyInProgress},
		{"different request gets 422", `{"amount":5}`, http.StatusUnprocessableEntity, observe.ReasonIdempotencyMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			f := newFixture(t, Config{Lease: 10 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				<-release
				w.WriteHeader(http.StatusCreated)
			})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); f.post(key1, `{"amount":100}`) }()
			<-entered
			w := f.post(key1, tc.body)
			close(release)
			wg.Wait()
			problemOf(t, w, tc.status)
			if tc.status == http.StatusConflict {
				if ra := w.Header().Get("Retry-After"); ra != "10" && ra != "9" {
					t.Errorf("Retry-After %q, want the lease's remaining 10 s", ra)
				}
			}
			if evs := f.obs.all(); len(evs) != 2 || evs[0].Reason != tc.reason {
				t.Errorf("events %+v, want the refusal first", evs)
			}
			if f.runs.Load() != 1 {
				t.Fatalf("handler ran %d times", f.runs.Load())
			}
		})
	}
}

func TestMiddlewareReleasesTheKey(t *testing.T) {
	for _, status := range []int{503, 408, 423, 425, 429} {
		t.Run("handler status "+http.StatusText(status), func(t *testing.T) {
			fail := true
			f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
				if fail {
					fail = false
					w.WriteHeader(status)
					io.WriteString(w, "try again")
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
			if w := f.post(key1, `{}`); w.Code != status || w.Body.String() != "try again" {
				t.Fatalf("first answer %d %q, want the handler's", w.Code, w.Body)
			}
			if e := f.obs.last(t); e.Outcome != observe.OutcomeReleased || e.Reason != observe.ReasonIdempotencyHandlerRetry {
				t.Errorf("event %+v", e)
			}
			if w := f.post(key1, `{}`); w.Code != http.StatusCreated || f.runs.Load() != 2 {
				t.Fatalf("retry %d, runs %d: the key was not released", w.Code, f.runs.Load())
			}
		})
	}
	// A handler that began may have acted before it failed: its 500,
	// 502 or 504 is recorded and replayed, as Stripe does.
	for _, status := range []int{400, 401, 403, 404, 409, 422, 500, 501, 502, 504} {
		t.Run("handler status "+http.StatusText(status)+" is recorded", func(t *testing.T) {
			f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) })
			f.post(key1, `{}`)
			if w := f.post(key1, `{}`); w.Code != status || w.Header().Get(ReplayedHeader) != "true" || f.runs.Load() != 1 {
				t.Fatalf("retry %d replayed %q runs %d", w.Code, w.Header().Get(ReplayedHeader), f.runs.Load())
			}
		})
	}
	// A handler that panicked before it wrote a status began no response:
	// the documented rule ("a panic releases") stands for it. After a
	// status: TestMiddlewareAbortAfterAStatusNeverRunsTwice.
	t.Run("handler panic before it wrote a status releases the key and panics on", func(t *testing.T) {
		panics := true
		f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
			if panics {
				panics = false
				w.Header().Set("Content-Type", "text/plain")
				panic("boom")
			}
			w.WriteHeader(http.StatusCreated)
		})
		func() {
			defer func() {
				if pv := recover(); pv != "boom" {
					t.Fatalf("recovered %v, want the handler's panic", pv)
				}
			}()
			f.post(key1, `{}`)
		}()
		if e := f.obs.last(t); e.Outcome != observe.OutcomeReleased || e.Reason != observe.ReasonIdempotencyHandlerPanic {
			t.Errorf("event %+v", e)
		}
		if w := f.post(key1, `{}`); w.Code != http.StatusCreated || f.runs.Load() != 2 {
			t.Fatalf("retry %d runs %d", w.Code, f.runs.Load())
		}
	})
	t.Run("the first final status counts; informational ones are dropped; 999 is valid", func(t *testing.T) {
		f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-999") != "" {
				w.WriteHeader(999)
				return
			}
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(100)
			w.WriteHeader(http.StatusCreated)
			w.WriteHeader(http.StatusInternalServerError)
		})
		f.post(key1, `{}`)
		if w := f.post(key1, `{}`); w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("replay %d %q", w.Code, w.Header().Get(ReplayedHeader))
		}
		r := req(http.MethodPost, "/payments", "alice", `"other"`, `{}`)
		r.Header.Set("X-999", "1")
		if w := f.do(r); w.Code != 999 {
			t.Fatalf("status %d, want 999", w.Code)
		}
	})
	t.Run("an invalid status panics as net/http does and releases the key", func(t *testing.T) {
		f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(1000) })
		func() {
			defer func() {
				if pv := recover(); pv == nil || !strings.Contains(pv.(string), "invalid WriteHeader code") {
					t.Fatalf("recovered %v", pv)
				}
			}()
			f.post(key1, `{}`)
		}()
		if e := f.obs.last(t); e.Outcome != observe.OutcomeReleased || e.Reason != observe.ReasonIdempotencyHandlerPanic {
			t.Errorf("event %+v", e)
		}
	})
	t.Run("client gone before the handler wrote anything does not release the key: its empty 200 is recorded", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var ended bool
		f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
			cancel()
			select {
			case <-r.Context().Done():
				ended = true
			case <-time.After(20 * time.Millisecond):
			}
		})
		w := f.do(req(http.MethodPost, "/payments", "alice", key1, `{}`).WithContext(ctx))
		if ended || w.Code != http.StatusOK || w.Body.Len() != 0 {
			t.Fatalf("handler's context ended with the client: %v; answered %d %q", ended, w.Code, w.Body)
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeProcessed {
			t.Errorf("event %+v", e)
		}
		if w := f.post(key1, `{}`); w.Code != http.StatusOK || w.Header().Get(ReplayedHeader) != "true" || f.runs.Load() != 1 {
			t.Fatalf("retry %d replayed %q runs %d: the key was released", w.Code, w.Header().Get(ReplayedHeader), f.runs.Load())
		}
	})
	t.Run("handler returning without a response after its deadline is 503 and releases the key", func(t *testing.T) {
		var late atomic.Bool
		f := newFixture(t, Config{Lease: 100 * time.Millisecond, RetryAfter: 2 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("ETag", `"v1"`)
			if !late.Load() {
				<-r.Context().Done() // gives up silently at its deadline
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
		w := httptest.NewRecorder()
		w.Header().Set("X-Outer", "kept") // set by a middleware around this one
		f.h.ServeHTTP(w, req(http.MethodPost, "/payments", "alice", key1, `{}`))
		problemOf(t, w, http.StatusServiceUnavailable)
		if w.Header().Get("Retry-After") != "2" || w.Header().Get("Content-Encoding") != "" || w.Header().Get("ETag") != "" ||
			w.Header().Get("X-Outer") != "kept" {
			t.Fatalf("headers %v", w.Header())
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeReleased || e.Reason != observe.ReasonIdempotencyHandlerDeadline {
			t.Errorf("event %+v", e)
		}
		if !strings.Contains(f.logs.String(), "after its deadline") {
			t.Errorf("not logged: %s", f.logs)
		}
		late.Store(true)
		if w := f.post(key1, `{}`); w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "" || f.runs.Load() != 2 {
			t.Fatalf("retry %d replayed %q runs %d: the key was not released", w.Code, w.Header().Get(ReplayedHeader), f.runs.Load())
		}
	})
	t.Run("a 5xx begun after the handler's deadline is 503 and releases the key", func(t *testing.T) {
		var late atomic.Bool
		f := newFixture(t, Config{Lease: 100 * time.Millisecond, RetryAfter: 2 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
			if !late.Load() {
				<-r.Context().Done() // honours its deadline, as a handler answering ctx.Err() does
				http.Error(w, r.Context().Err().Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
		w := f.post(key1, `{}`)
		problemOf(t, w, http.StatusServiceUnavailable)
		if w.Header().Get("Retry-After") != "2" || strings.Contains(w.Body.String(), "deadline exceeded") {
			t.Fatalf("answered %v %q", w.Header(), w.Body)
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeReleased || e.Reason != observe.ReasonIdempotencyHandlerDeadline {
			t.Errorf("event %+v", e)
		}
		late.Store(true)
		if w := f.post(key1, `{}`); w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "" || f.runs.Load() != 2 {
			t.Fatalf("retry %d replayed %q runs %d: the key was not released", w.Code, w.Header().Get(ReplayedHeader), f.runs.Load())
		}
	})
	t.Run("a 5xx begun before the handler's deadline is recorded", func(t *testing.T) {
		f := newFixture(t, Config{Lease: 100 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError) // the operation's own failure
			<-r.Context().Done()
		})
		f.post(key1, `{}`)
		if w := f.post(key1, `{}`); w.Code != http.StatusInternalServerError || w.Header().Get(ReplayedHeader) != "true" || f.runs.Load() != 1 {
			t.Fatalf("retry %d replayed %q runs %d", w.Code, w.Header().Get(ReplayedHeader), f.runs.Load())
		}
	})
	t.Run("client gone after the handler wrote its response is recorded", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			cancel()
		})
		f.do(req(http.MethodPost, "/payments", "alice", key1, `{}`).WithContext(ctx))
		if w := f.post(key1, `{}`); w.Header().Get(ReplayedHeader) != "true" || f.runs.Load() != 1 {
			t.Fatalf("retry %d runs %d", w.Code, f.runs.Load())
		}
	})
}

// abortPost posts key1 to f, whose handler ends by panicking (or
// runtime.Goexit), and fails t unless the panic that comes out is want
// (nil: none, as after a Goexit).
func abortPost(t *testing.T, f *fixture, want any) {
	t.Helper()
	done := make(chan any)
	go func() {
		exited := true
		defer func() {
			pv := recover()
			if exited && pv == nil {
				pv = "goexit"
			}
			done <- pv
		}()
		f.post(key1, `{}`)
		exited = false
	}()
	if got := <-done; got != want {
		t.Fatalf("the handler's request ended with %v, want %v", got, want)
	}
}

// TestMiddlewareAbortAfterAStatusNeverRunsTwice pins issue 106: a handler
// that wrote a status the table records and then aborted
// (http.ErrAbortHandler, any panic, runtime.Goexit) may have acted, so
// its key is never released. A complete response is recorded and
// replayed; a cut one records the 503 outcome-unknown problem, replayed to
// every retry. The panic goes on. A releasing status before the abort
// still releases.
func TestMiddlewareAbortAfterAStatusNeverRunsTwice(t *testing.T) {
	cut := []struct {
		name  string
		abort func()
		want  any
	}{
		{"http.ErrAbortHandler", func() { panic(http.ErrAbortHandler) }, http.ErrAbortHandler},
		{"a panic", func() { panic("boom") }, "boom"},
		{"runtime.Goexit", runtime.Goexit, "goexit"},
	}
	for _, c := range cut {
		t.Run("a cut 201 then "+c.name+" records outcome unknown", func(t *testing.T) {
			f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", "100")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"id":`) // less than its Content-Length
				c.abort()
			})
			abortPost(t, f, c.want)
			if e := f.obs.last(t); e.Outcome != observe.OutcomeProcessed {
				t.Errorf("event %+v, want the key recorded", e)
			}
			if !strings.Contains(f.logs.String(), "level=ERROR") || !strings.Contains(f.logs.String(), "outcome unknown") || !strings.Contains(f.logs.String(), "status=201") {
				t.Errorf("not logged at Error with the status: %s", f.logs)
			}
			for range 2 {
				w := f.post(key1, `{}`)
				p := problemOf(t, w, http.StatusServiceUnavailable)
				if p["type"] != ProblemOutcomeUnknown || !strings.Contains(p["detail"].(string), "cut off") ||
					w.Header().Get(ReplayedHeader) != "true" || w.Header().Get("Retry-After") != "" || w.Header().Get("Cache-Control") != "no-store" {
					t.Fatalf("retry: %v %v", w.Header(), p)
				}
			}
			if f.runs.Load() != 1 {
				t.Fatalf("runs %d, want 1", f.runs.Load())
			}
		})
	}
	t.Run("a status without Content-Length then http.ErrAbortHandler records outcome unknown", func(t *testing.T) {
		f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "all of it?")
			panic(http.ErrAbortHandler)
		})
		abortPost(t, f, http.ErrAbortHandler)
		if p := problemOf(t, f.post(key1, `{}`), http.StatusServiceUnavailable); p["type"] != ProblemOutcomeUnknown || f.runs.Load() != 1 {
			t.Fatalf("retry %v after %d runs", p, f.runs.Load())
		}
	})
	complete := []struct {
		name   string
		status int
		body   string
	}{
		{"its Content-Length written in full", http.StatusCreated, `{"id":"ch_1"}`},
		{"204", http.StatusNoContent, ""},
	}
	for _, c := range complete {
		t.Run("a complete response, "+c.name+", then http.ErrAbortHandler is recorded", func(t *testing.T) {
			f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
				if c.body != "" {
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("Content-Length", strconv.Itoa(len(c.body)))
				}
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
				panic(http.ErrAbortHandler)
			})
			abortPost(t, f, http.ErrAbortHandler)
			w := f.post(key1, `{}`)
			if w.Code != c.status || w.Body.String() != c.body || w.Header().Get(ReplayedHeader) != "true" || f.runs.Load() != 1 {
				t.Fatalf("retry %d %q replayed %q after %d runs", w.Code, w.Body, w.Header().Get(ReplayedHeader), f.runs.Load())
			}
		})
	}
	t.Run("a releasing status then http.ErrAbortHandler releases the key", func(t *testing.T) {
		var runs atomic.Int32
		f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				panic(http.ErrAbortHandler)
			}
			w.WriteHeader(http.StatusCreated)
		})
		abortPost(t, f, http.ErrAbortHandler)
		if e := f.obs.last(t); e.Outcome != observe.OutcomeReleased || e.Reason != observe.ReasonIdempotencyHandlerPanic {
			t.Errorf("event %+v", e)
		}
		if w := f.post(key1, `{}`); w.Code != http.StatusCreated || runs.Load() != 2 {
			t.Fatalf("retry %d after %d runs; want 201 from a second run", w.Code, runs.Load())
		}
	})
}

func TestMiddlewareResponseOverMaxResponseBytes(t *testing.T) {
	big := strings.Repeat("x", 100)
	t.Run("client gets the whole response and a retry gets 500, never a second run", func(t *testing.T) {
		f := newFixture(t, Config{MaxResponseBytes: 64}, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, big[:50])
			io.WriteString(w, big[50:])
		})
		if w := f.post(key1, `{}`); w.Code != 200 || w.Body.String() != big || w.Header().Get("Content-Type") != "text/plain" {
			t.Fatalf("first answer %d %q", w.Code, w.Body)
		}
		p := problemOf(t, f.post(key1, `{}`), http.StatusInternalServerError)
		if !strings.Contains(p["detail"].(string), "too large") || f.runs.Load() != 1 {
			t.Fatalf("detail %q runs %d", p["detail"], f.runs.Load())
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeRefused || e.Reason != observe.ReasonIdempotencyResponseTooLarge {
			t.Errorf("event %+v", e)
		}
		if !strings.Contains(f.logs.String(), "over MaxResponseBytes") {
			t.Errorf("not logged: %s", f.logs)
		}
	})
	t.Run("a response of exactly MaxResponseBytes is stored", func(t *testing.T) {
		f := newFixture(t, Config{MaxResponseBytes: 64}, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, big[:32])
			io.WriteString(w, big[:32])
		})
		f.post(key1, `{}`)
		if w := f.post(key1, `{}`); w.Code != 200 || w.Body.String() != big[:64] || w.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("replay %d %q", w.Code, w.Body)
		}
	})
	t.Run("a flush while buffering sends nothing; once streaming it flushes", func(t *testing.T) {
		var flushedEarly bool
		f := newFixture(t, Config{MaxResponseBytes: 64}, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "head")
			w.(http.Flusher).Flush()
			flushedEarly = w.(*bufferWriter).w.(*httptest.ResponseRecorder).Flushed
			io.WriteString(w, big)
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("flush while streaming: %v", err)
			}
		})
		w := f.post(key1, `{}`)
		if flushedEarly || !w.Flushed || w.Body.String() != "head"+big {
			t.Fatalf("flushed early %v, flushed %v, body %q", flushedEarly, w.Flushed, w.Body)
		}
	})
	t.Run("a retry status over the cap releases the key", func(t *testing.T) {
		f := newFixture(t, Config{MaxResponseBytes: 64}, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, big)
		})
		if w := f.post(key1, `{}`); w.Code != 503 || w.Body.String() != big {
			t.Fatalf("first answer %d %q", w.Code, w.Body)
		}
		f.post(key1, `{}`)
		if f.runs.Load() != 2 {
			t.Fatalf("runs %d: the key was not released", f.runs.Load())
		}
	})
	t.Run("a retry status over the cap keeps the key until the handler returns", func(t *testing.T) {
		streamed, done := make(chan struct{}), make(chan struct{})
		var unblock sync.Once
		defer unblock.Do(func() { close(done) })
		f := newFixture(t, Config{MaxResponseBytes: 64}, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, big)
			if r.Header.Get("X-First") != "" {
				close(streamed)
				<-done // still working after the response streamed
			}
		})
		first := make(chan *httptest.ResponseRecorder)
		go func() {
			r := req(http.MethodPost, "/payments", "alice", key1, `{}`)
			r.Header.Set("X-First", "1")
			first <- f.do(r)
		}()
		<-streamed
		problemOf(t, f.post(key1, `{}`), http.StatusConflict)
		if n := f.runs.Load(); n != 1 {
			t.Fatalf("a retry ran beside the handler: runs %d", n)
		}
		unblock.Do(func() { close(done) })
		if w := <-first; w.Code != http.StatusServiceUnavailable || w.Body.String() != big {
			t.Fatalf("first answer %d %q", w.Code, w.Body)
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeReleased || e.Reason != observe.ReasonIdempotencyHandlerRetry {
			t.Errorf("event %+v", e)
		}
		f.post(key1, `{}`)
		if f.runs.Load() != 2 {
			t.Fatalf("runs %d: the key was not released once the handler returned", f.runs.Load())
		}
	})
	t.Run("headers over MaxStoredHeaderBytes are not stored", func(t *testing.T) {
		f := newFixture(t, Config{ReplayHeaders: []string{"Link"}}, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", strings.Repeat("l", MaxStoredHeaderBytes))
			w.WriteHeader(201)
		})
		if w := f.post(key1, `{}`); w.Code != 201 {
			t.Fatalf("first answer %d", w.Code)
		}
		problemOf(t, f.post(key1, `{}`), http.StatusInternalServerError)
	})
}

func TestMiddlewareStoreFaults(t *testing.T) {
	t.Run("acquire failure is 503 with Retry-After and the handler does not run", func(t *testing.T) {
		fs := &faultStore{Recorder: newStore(), acquireErr: errInjected}
		f := newFixture(t, Config{Store: fs, RetryAfter: 1500 * time.Millisecond}, nil)
		w := f.post(key1, `{}`)
		problemOf(t, w, http.StatusServiceUnavailable)
		if w.Header().Get("Retry-After") != "2" || f.runs.Load() != 0 {
			t.Fatalf("Retry-After %q runs %d", w.Header().Get("Retry-After"), f.runs.Load())
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeStoreFailure || e.Reason != observe.ReasonIdempotencyStoreAcquire || e.StoreLatency <= 0 {
			t.Errorf("event %+v", e)
		}
		if !strings.Contains(f.logs.String(), "level=WARN") || !strings.Contains(f.logs.String(), "injected store failure") || !strings.Contains(f.logs.String(), "status=503") {
			t.Errorf("log %s", f.logs)
		}
		// Nothing was taken: once the store is back, the same key runs
		// the handler, once.
		fs.acquireErr = nil
		if w := f.post(key1, `{}`); w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "" || f.runs.Load() != 1 {
			t.Fatalf("the same key once the store is back: %d, replayed %q, %d runs; want 201 from one run", w.Code, w.Header().Get(ReplayedHeader), f.runs.Load())
		}
		if w := f.post(key1, `{}`); w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) == "" || f.runs.Load() != 1 {
			t.Fatalf("its retry: %d, replayed %q, %d runs; want the 201 replayed", w.Code, w.Header().Get(ReplayedHeader), f.runs.Load())
		}
	})
	t.Run("a client gone before the acquire is not a store failure, and asks nothing", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		fs := &faultStore{Recorder: newStore(), acquireErr: context.Canceled}
		f := newFixture(t, Config{Store: fs}, nil)
		w := f.do(req(http.MethodPost, "/payments", "alice", key1, `{}`).WithContext(ctx))
		if w.Code != http.StatusServiceUnavailable || f.runs.Load() != 0 {
			t.Fatalf("status %d runs %d", w.Code, f.runs.Load())
		}
		if n := fs.acquires.Load(); n != 0 {
			t.Fatalf("%d acquires for a request whose client was gone; want none", n)
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeRefused || e.Reason != observe.ReasonIdempotencyGoneBeforeLease {
			t.Errorf("event %+v", e)
		}
		if f.logs.Len() != 0 {
			t.Errorf("logged: %s", f.logs)
		}
	})
	t.Run("a client gone while the key is leased does not cut the acquire", func(t *testing.T) {
		// The store's answer is known (no lease of unknown outcome), and
		// the handler, whose context ignores the client, runs and is
		// recorded, as when the client leaves just after the acquire.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var deadlineOnly, cancelled bool
		fs := &faultStore{Recorder: newStore(), duringAcquire: func(actx context.Context) {
			cancel()
			deadlineOnly, cancelled = replay.EndsOnlyAtDeadline(actx), actx.Err() != nil
		}}
		f := newFixture(t, Config{Store: fs}, nil)
		f.do(req(http.MethodPost, "/payments", "alice", key1, `{}`).WithContext(ctx))
		if !deadlineOnly || cancelled {
			t.Fatalf("the acquire's context: deadline-only %v, cancelled with the request %v; want true, false", deadlineOnly, cancelled)
		}
		if f.runs.Load() != 1 || fs.confirms.Load() != 1 {
			t.Fatalf("runs %d, confirms %d; want the handler run and recorded once", f.runs.Load(), fs.confirms.Load())
		}
		fs.duringAcquire = nil
		w := f.post(key1, `{}`)
		if f.runs.Load() != 1 || w.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("retry: runs %d, replayed %q; want the recorded response", f.runs.Load(), w.Header().Get(ReplayedHeader))
		}
	})
	t.Run("acquired without a token is 503", func(t *testing.T) {
		fs := &faultStore{Recorder: newStore(), noToken: true}
		f := newFixture(t, Config{Store: fs}, nil)
		problemOf(t, f.post(key1, `{}`), http.StatusServiceUnavailable)
		if f.runs.Load() != 0 {
			t.Fatal("handler ran")
		}
	})
	t.Run("a confirm that fails twice is retried and recorded", func(t *testing.T) {
		fs := &faultStore{Recorder: newStore(), confirmErr: errInjected}
		fs.confirmFails.Store(2)
		f := newFixture(t, Config{Store: fs}, nil)
		first := f.post(key1, `{}`)
		if first.Code != 201 || fs.confirms.Load() != 3 {
			t.Fatalf("status %d after %d confirms", first.Code, fs.confirms.Load())
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeProcessed {
			t.Errorf("event %+v", e)
		}
		if w := f.post(key1, `{}`); w.Body.String() != first.Body.String() || f.runs.Load() != 1 {
			t.Fatalf("retry %q runs %d", w.Body, f.runs.Load())
		}
	})
	t.Run("a confirm that always fails still answers the handler's response, logs and observes it", func(t *testing.T) {
		fs := &faultStore{Recorder: newStore(), confirmErr: errInjected}
		fs.confirmFails.Store(-1)
		f := newFixture(t, Config{Store: fs, Lease: 200 * time.Millisecond, Window: time.Hour}, nil)
		start := time.Now()
		w := f.post(key1, `{"amount":1}`)
		if w.Code != 201 || !strings.Contains(w.Body.String(), `"run":1`) {
			t.Fatalf("answer %d %q", w.Code, w.Body)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("confirm retried for %v, past the lease", took)
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeStoreFailure || e.Reason != observe.ReasonIdempotencyStoreConfirm {
			t.Errorf("event %+v", e)
		}
		if !strings.Contains(f.logs.String(), "level=ERROR") || !strings.Contains(f.logs.String(), "injected store failure") {
			t.Errorf("log %s", f.logs)
		}
		// The key runs again once the lease ends.
		time.Sleep(250 * time.Millisecond)
		fs.confirmFails.Store(0)
		f.post(key1, `{"amount":1}`)
		if f.runs.Load() != 2 {
			t.Fatalf("runs %d", f.runs.Load())
		}
	})
	t.Run("a lease lost while the handler ran is a store failure and the handler's response is sent", func(t *testing.T) {
		entered, finish := make(chan struct{}), make(chan struct{})
		fs := &faultStore{Recorder: newStore()}
		f := newFixture(t, Config{Store: fs, Lease: 50 * time.Millisecond, Window: time.Hour}, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Slow") != "" {
				close(entered)
				<-finish // past the lease
			}
			w.WriteHeader(201)
		})
		var wg sync.WaitGroup
		wg.Add(1)
		slow := req(http.MethodPost, "/payments", "alice", key1, `{}`)
		slow.Header.Set("X-Slow", "1")
		var slowAnswer *httptest.ResponseRecorder
		go func() { defer wg.Done(); slowAnswer = f.do(slow) }()
		<-entered
		time.Sleep(60 * time.Millisecond) // the slow attempt's lease has ended
		w := f.post(key1, `{}`)
		close(finish)
		if w.Code != 201 || w.Header().Get(ReplayedHeader) != "" {
			t.Fatalf("second attempt %d replayed %q, want a run of its own", w.Code, w.Header().Get(ReplayedHeader))
		}
		wg.Wait()
		if slowAnswer.Code != 201 {
			t.Fatalf("slow attempt answered %d, want its handler's 201", slowAnswer.Code)
		}
		var lost bool
		for _, e := range f.obs.all() {
			lost = lost || (e.Outcome == observe.OutcomeStoreFailure && e.Reason == observe.ReasonIdempotencyLeaseLost)
		}
		if !lost {
			t.Errorf("events %+v lack a lost lease", f.obs.all())
		}
	})
	t.Run("a release that fails is a store failure and the key stays busy until its lease ends", func(t *testing.T) {
		fs := &faultStore{Recorder: newStore(), releaseErr: errInjected}
		f := newFixture(t, Config{Store: fs}, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
		if w := f.post(key1, `{}`); w.Code != 503 {
			t.Fatalf("answer %d", w.Code)
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeStoreFailure || e.Reason != observe.ReasonIdempotencyStoreRelease {
			t.Errorf("event %+v", e)
		}
		problemOf(t, f.post(key1, `{}`), http.StatusConflict)
	})
	t.Run("a key claimed without a record is 500 and the handler does not run", func(t *testing.T) {
		store := newStore()
		f := newFixture(t, Config{Store: store}, nil)
		if _, err := store.Claim(context.Background(), StoreID("alice", "POST /payments", strings.Trim(key1, `"`)), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		problemOf(t, f.post(key1, `{}`), http.StatusInternalServerError)
		if f.runs.Load() != 0 {
			t.Fatal("handler ran")
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeStoreFailure || e.Reason != observe.ReasonIdempotencyNoRecord {
			t.Errorf("event %+v", e)
		}
	})
	t.Run("Retry-After of a busy key is the lease when the store reports no wait or a longer one", func(t *testing.T) {
		for _, wait := range []time.Duration{0, -time.Second, time.Hour} {
			st := stubStore{Recorder: newStore(), rec: replay.Record{Lease: replay.Lease{State: replay.LeaseBusy, Wait: wait}}}
			f := newFixture(t, Config{Store: st, Lease: 7 * time.Second}, nil)
			if w := f.post(key1, `{}`); w.Code != http.StatusConflict || w.Header().Get("Retry-After") != "7" {
				t.Errorf("wait %v: %d Retry-After %q, want 409 and 7", wait, w.Code, w.Header().Get("Retry-After"))
			}
		}
	})
	t.Run("a done key with a result but no fingerprint is 500", func(t *testing.T) {
		st := stubStore{Recorder: newStore(), rec: replay.Record{Lease: replay.Lease{State: replay.LeaseDone}, Result: []byte{0xa0}}}
		f := newFixture(t, Config{Store: st}, nil)
		problemOf(t, f.post(key1, `{}`), http.StatusInternalServerError)
		if e := f.obs.last(t); e.Reason != observe.ReasonIdempotencyNoRecord {
			t.Errorf("event %+v", e)
		}
	})
	t.Run("a store failure with no Logger does not panic", func(t *testing.T) {
		mw, err := New(Config{Store: &faultStore{Recorder: newStore(), acquireErr: errInjected}, Keys: testKeys, Caller: func(*http.Request) (string, error) { return "a", nil }})
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		mw.Wrap(http.NotFoundHandler()).ServeHTTP(w, req(http.MethodPost, "/p", "", key1, `{}`))
		problemOf(t, w, http.StatusServiceUnavailable)
	})
	t.Run("a key leased without a record is 409", func(t *testing.T) {
		store := newStore()
		f := newFixture(t, Config{Store: store}, nil)
		if _, err := store.AcquireLease(context.Background(), StoreID("alice", "POST /payments", strings.Trim(key1, `"`)), 3*time.Second); err != nil {
			t.Fatal(err)
		}
		w := f.post(key1, `{}`)
		problemOf(t, w, http.StatusConflict)
		if ra := w.Header().Get("Retry-After"); ra != "3" || f.runs.Load() != 0 {
			t.Fatalf("Retry-After %q runs %d", ra, f.runs.Load())
		}
	})
	t.Run("a stored response that does not decode is 500", func(t *testing.T) {
		store := newStore()
		f := newFixture(t, Config{Store: store}, nil)
		id := StoreID("alice", "POST /payments", strings.Trim(key1, `"`))
		fp := Fingerprint(http.MethodPost, "/payments", "", http.Header{"Content-Type": {"application/json"}}, []byte(`{}`))
		rec, _ := store.AcquireRecord(context.Background(), id, time.Minute, fp)
		if err := store.ConfirmRecord(context.Background(), id, rec.Token, time.Now().Add(time.Hour), fp, []byte{0xa0}); err != nil {
			t.Fatal(err)
		}
		problemOf(t, f.post(key1, `{}`), http.StatusInternalServerError)
		if e := f.obs.last(t); e.Reason != observe.ReasonIdempotencyRecordCorrupt || f.runs.Load() != 0 {
			t.Errorf("event %+v runs %d", e, f.runs.Load())
		}
	})
}

func TestZeroMiddlewareAnswers500(t *testing.T) {
	for name, h := range map[string]http.Handler{
		"zero Middleware": (&Middleware{}).Wrap(http.NotFoundHandler()),
		"nil Middleware":  (*Middleware)(nil).Wrap(http.NotFoundHandler()),
		"nil handler": func() http.Handler {
			mw, _ := New(Config{Store: newStore(), Keys: testKeys, Caller: func(*http.Request) (string, error) { return "a", nil }})
			return mw.Wrap(nil)
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req(http.MethodGet, "/", "", "", ""))
			problemOf(t, w, http.StatusInternalServerError)
		})
	}
}

// TestMiddlewareStoreRefusingTheResponseNeverRunsTwice pins that a store
// refusing a response for its size or its byte budget (replay.ErrTooLarge,
// replay.ErrFull) leaves the key done, not leased: after the lease its
// retry gets 500, never a second run.
func TestMiddlewareStoreRefusingTheResponseNeverRunsTwice(t *testing.T) {
	const size = 600_000 // two of them are over the smallest byte budget
	t.Run("memory store with its byte budget full", func(t *testing.T) {
		now := time.Now()
		var mu sync.Mutex
		st := &replay.MemoryStore{MaxRecordBytes: replay.MaxFingerprintBytes + replay.MaxResultBytes, Now: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		}}
		f := newFixture(t, Config{Store: st, MaxResponseBytes: size + 100, Lease: time.Minute, Window: time.Hour}, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, strings.Repeat("x", size))
		})
		for _, k := range []string{`"k0"`, `"k1"`} {
			if w := f.post(k, `{}`); w.Code != 200 || w.Body.Len() != size {
				t.Fatalf("first answer for %s: %d, %d bytes", k, w.Code, w.Body.Len())
			}
		}
		mu.Lock()
		now = now.Add(2 * time.Minute) // past the lease of k1
		mu.Unlock()
		w := f.post(`"k1"`, `{}`)
		if w.Code != http.StatusInternalServerError {
			t.Fatalf("retry of k1: status %d (%d bytes), want 500; runs %d", w.Code, w.Body.Len(), f.runs.Load())
		}
		p := problemOf(t, w, http.StatusInternalServerError)
		if f.runs.Load() != 2 || !strings.Contains(p["detail"].(string), "too large") {
			t.Fatalf("runs %d (want 2: k0 and k1 once each), detail %q", f.runs.Load(), p["detail"])
		}
		if !strings.Contains(f.logs.String(), "level=ERROR") || !strings.Contains(f.logs.String(), "byte budget full") {
			t.Errorf("not logged as an error: %s", f.logs)
		}
		if w := f.post(`"k0"`, `{}`); w.Code != 200 || w.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("k0 replay %d", w.Code)
		}
	})
	for _, refusal := range []error{replay.ErrTooLarge, replay.ErrFull} {
		t.Run("store refusing every record with "+refusal.Error()+" gets a done entry without one", func(t *testing.T) {
			fs := &faultStore{Recorder: newStore(), confirmErr: fmt.Errorf("refused: %w", refusal)}
			fs.confirmFails.Store(-1)
			f := newFixture(t, Config{Store: fs, Lease: 50 * time.Millisecond, Window: time.Hour}, nil)
			if w := f.post(key1, `{}`); w.Code != http.StatusCreated {
				t.Fatalf("first answer %d", w.Code)
			}
			time.Sleep(100 * time.Millisecond) // past the lease
			problemOf(t, f.post(key1, `{}`), http.StatusInternalServerError)
			if f.runs.Load() != 1 {
				t.Fatalf("handler ran %d times", f.runs.Load())
			}
			if e := f.obs.all(); len(e) < 2 || e[0].Outcome != observe.OutcomeStoreFailure || e[0].Reason != observe.ReasonIdempotencyStoreConfirm {
				t.Errorf("events %+v", e)
			}
		})
	}
}

func TestMiddlewareTrailersAndResponseController(t *testing.T) {
	trailing := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, body)
			w.Header().Set("X-Sum", "42")
			w.Header().Set(http.TrailerPrefix+"X-Late", "yes")
		}
	}
	for _, tc := range []struct{ name, body string }{
		{"buffered response sends the handler's trailers", "short"},
		{"streamed response over the cap sends the handler's trailers", strings.Repeat("x", 100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{MaxResponseBytes: 64}, trailing(tc.body))
			res := f.post(key1, `{}`).Result()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusCreated || string(b) != tc.body ||
				res.Trailer.Get("X-Sum") != "42" || res.Trailer.Get("X-Late") != "yes" {
				t.Fatalf("status %d body %d bytes trailer %v", res.StatusCode, len(b), res.Trailer)
			}
		})
	}
	t.Run("a ResponseController sets deadlines and cannot hijack", func(t *testing.T) {
		var deadlineErr, hijackErr error
		f := newFixture(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			deadlineErr = rc.SetWriteDeadline(time.Now().Add(time.Minute))
			_, _, hijackErr = rc.Hijack()
			w.WriteHeader(http.StatusCreated)
		})
		srv := httptest.NewServer(f.h)
		defer srv.Close()
		r, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{}`))
		r.Header.Set("X-User", "alice")
		r.Header.Set("Idempotency-Key", key1)
		res, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated || deadlineErr != nil || !errors.Is(hijackErr, http.ErrNotSupported) {
			t.Fatalf("status %d, SetWriteDeadline %v, Hijack %v", res.StatusCode, deadlineErr, hijackErr)
		}
	})
}

// fencedError is a store refusal that knows when it ends (as redisstore's
// fenced shard does).
type fencedError struct{ at time.Time }

func (e fencedError) Error() string      { return "store: shard fenced" }
func (e fencedError) RetryAt() time.Time { return e.at }

// A store refusal is answered 503 with a Retry-After of the seconds until
// it ends when the store says (replay.RetryAt), at most MaxFenceRetryAfter
// however far the end is, with a detail and a log record stating the end;
// Config.RetryAfter when it does not say; and without Retry-After, with a
// detail naming the operator, when only an operator can lift it
// (replay.ErrConfig).
func TestMiddlewareStoreRefusalRetryAfterTellsWhenItEnds(t *testing.T) {
	day := time.Now().Add(25 * time.Hour)
	tests := []struct {
		name     string
		err      error
		want     string    // Retry-After; "" for none
		end      time.Time // the end the detail and the log state; zero for none
		operator bool
	}{
		{"fence ends in 30 s", fmt.Errorf("claim: %w", fencedError{time.Now().Add(30 * time.Second)}), "30", time.Time{}, false},
		{"fence ends in 1.2 s: rounded up", fencedError{time.Now().Add(1200 * time.Millisecond)}, "2", time.Time{}, false},
		{"fence already over: at least 1", fencedError{time.Now().Add(-time.Minute)}, "1", time.Time{}, false},
		{"fence ends in 25 h: capped at MaxFenceRetryAfter, the end in the detail", fencedError{day}, "30", day, false},
		{"fence ends in 90 000 s: capped", fmt.Errorf("claim: %w", fencedError{day.Add(time.Hour)}), "30", day.Add(time.Hour), false},
		{"end unknown: RetryAfter", fencedError{}, "7", time.Time{}, false},
		{"store down: RetryAfter", errInjected, "7", time.Time{}, false},
		{"operator only", fmt.Errorf("store: %w", replay.ErrConfig), "", time.Time{}, true},
		{"operator only, even with an end", errors.Join(replay.ErrConfig, fencedError{time.Now().Add(time.Hour)}), "", time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &faultStore{Recorder: newStore(), acquireErr: tt.err}
			f := newFixture(t, Config{Store: fs, RetryAfter: 7 * time.Second}, nil)
			w := f.post(key1, `{}`)
			p := problemOf(t, w, http.StatusServiceUnavailable)
			if got := w.Header().Values("Retry-After"); (tt.want == "" && len(got) != 0) || (tt.want != "" && (len(got) != 1 || got[0] != tt.want)) {
				t.Fatalf("Retry-After %q; want %q", got, tt.want)
			}
			detail, _ := p["detail"].(string)
			if strings.Contains(detail, "operator") != tt.operator {
				t.Fatalf("detail %q; operator named %v, want %v", detail, !tt.operator, tt.operator)
			}
			if !tt.end.IsZero() {
				when := httpx.FenceEnd(tt.end)
				if !strings.Contains(detail, when) {
					t.Fatalf("detail %q; want the fence's end %s", detail, when)
				}
				if !strings.Contains(f.logs.String(), "store_refuses_until="+when) {
					t.Fatalf("log %s; want store_refuses_until=%s", f.logs, when)
				}
			}
			if f.runs.Load() != 0 {
				t.Fatalf("the handler ran %d times", f.runs.Load())
			}
		})
	}
}

// ctxRecorder is a Recorder that records the context of each step that
// settles a key (ConfirmRecord, ConfirmLease, ReleaseLease), and refuses
// every ConfirmRecord with refuse when that is set.
type ctxRecorder struct {
	replay.Recorder
	ctxSteps
	refuse error
}

func (s *ctxRecorder) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, res []byte) error {
	s.record("ConfirmRecord", ctx)
	if s.refuse != nil {
		return s.refuse
	}
	return s.Recorder.ConfirmRecord(ctx, id, token, until, fp, res)
}

func (s *ctxRecorder) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	s.record("ConfirmLease", ctx)
	return s.Recorder.ConfirmLease(ctx, id, token, until)
}

func (s *ctxRecorder) ReleaseLease(ctx context.Context, id, token string) error {
	s.record("ReleaseLease", ctx)
	return s.Recorder.ReleaseLease(ctx, id, token)
}

// TestConfirmAndReleaseRunUnderADeadlineOnlyContext: once the handler has
// answered, the store steps that settle the key (the record, the record of
// a response not stored, a release) run under a context that only its
// deadline ends (replay.WithDeadlineOnly), however the client's request
// ends (it is cancelled while the handler runs), so that a store whose
// client enforces deadlines itself runs them on the caller's goroutine.
// Each deadline is the one meant: a record's at the lease's end, a
// release's a quarter of the lease after it began.
func TestConfirmAndReleaseRunUnderADeadlineOnlyContext(t *testing.T) {
	const lease = time.Minute
	tests := []struct {
		name   string
		refuse error
		status int
		want   []stepWant
	}{
		{"the response is recorded", nil, http.StatusCreated, []stepWant{{"ConfirmRecord", lease}}},
		{"a response the store refuses for its size is recorded as done without it", replay.ErrTooLarge, http.StatusCreated,
			[]stepWant{{"ConfirmRecord", lease}, {"ConfirmRecord", lease}, {"ConfirmLease", lease}}},
		{"a retry status releases the key", nil, http.StatusServiceUnavailable, []stepWant{{"ReleaseLease", lease / 4}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := &ctxRecorder{Recorder: newStore(), refuse: tc.refuse}
			r, cancel := cancellable(req(http.MethodPost, "/payments", "alice", key1, `{}`))
			defer cancel()
			handlerDeadlineOnly := true
			f := newFixture(t, Config{Store: store, Lease: lease}, func(w http.ResponseWriter, r *http.Request) {
				// The handler's context is not marked: the middleware
				// cancels it when the handler returns, and code the
				// handler started must see that at once.
				handlerDeadlineOnly = replay.EndsOnlyAtDeadline(r.Context())
				cancel() // the client goes away while the handler runs
				w.WriteHeader(tc.status)
			})
			from := time.Now()
			w := f.do(r)
			to := time.Now()
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d", w.Code, tc.status)
			}
			if handlerDeadlineOnly {
				t.Error("the handler ran under a context marked deadline-only; want one its return cancels")
			}
			checkSteps(t, store.list(), tc.want, from, to)
		})
	}
}
