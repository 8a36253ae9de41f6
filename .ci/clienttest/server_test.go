package clienttest

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
)

// seen is one request as the server received it, and what it answered.
type seen struct {
	key         []string // the Idempotency-Key header values
	contentType string
	body        []byte
	status      int
	replayed    string // the answer's Idempotent-Replayed header
	retryAfter  string // the answer's Retry-After header
}

// api is an httptest server that runs idempotency.Middleware (a
// MemoryStore; the caller is the bearer token) in front of the handlers
// registered on its mux, and records every request it received.
type api struct {
	t    *testing.T
	srv  *httptest.Server
	mux  *http.ServeMux
	mw   *idempotency.Middleware
	runs atomic.Int32 // handler runs, across routes
	// dropNext, when set, makes the server run the next request through
	// the middleware (so its response is recorded) and then close the
	// connection without answering: a response lost on the way back.
	dropNext atomic.Bool

	mu   sync.Mutex
	reqs []seen
}

// newAPI starts an api whose mux gets routes from register; each handler
// is wrapped by the middleware.
func newAPI(t *testing.T, register func(a *api)) *api {
	t.Helper()
	a := &api{t: t, mux: http.NewServeMux()}
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store: &replay.MemoryStore{},
		Keys:  keys,
		Caller: func(r *http.Request) (string, error) {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || tok == "" {
				return "", errors.New("no bearer token")
			}
			return tok, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	a.mw = mw
	register(a)
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

// handle registers h for pattern, behind the middleware, counting runs.
func (a *api) handle(pattern string, h http.HandlerFunc) {
	a.mux.Handle(pattern, a.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.runs.Add(1)
		h(w, r)
	})))
}

func (a *api) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "unreadable", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s := seen{key: r.Header.Values("Idempotency-Key"), contentType: r.Header.Get("Content-Type"), body: body}
	if a.dropNext.CompareAndSwap(true, false) {
		rec := httptest.NewRecorder()
		a.mux.ServeHTTP(rec, r)
		s.status, s.replayed = rec.Code, rec.Header().Get(idempotency.ReplayedHeader)
		a.record(s)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			a.t.Error(err)
			return
		}
		conn.Close()
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	a.mux.ServeHTTP(sw, r)
	s.status, s.replayed, s.retryAfter = sw.status, w.Header().Get(idempotency.ReplayedHeader), w.Header().Get("Retry-After")
	a.record(s)
}

func (a *api) record(s seen) {
	a.mu.Lock()
	a.reqs = append(a.reqs, s)
	a.mu.Unlock()
}

// requests returns the requests received so far.
func (a *api) requests() []seen {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]seen(nil), a.reqs...)
}

// last returns the last request received.
func (a *api) last() seen {
	a.t.Helper()
	r := a.requests()
	if len(r) == 0 {
		a.t.Fatal("no request received")
	}
	return r[len(r)-1]
}

// raw sends a request by hand: the key header exactly as given.
func (a *api) raw(method, path, bearer, key, contentType string, body []byte) (*http.Response, []byte) {
	a.t.Helper()
	r, err := http.NewRequest(method, a.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+bearer)
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Content-Type", contentType)
	resp, err := a.srv.Client().Do(r)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return resp, b
}

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
