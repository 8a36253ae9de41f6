package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
)

// The world of one scenario: a real HTTP server (httptest, 127.0.0.1)
// running idempotency.Middleware over a replay.MemoryStore, and a handler
// that behaves as the feature file's reference world does
// (idempot-js tests/spec/steps/world.js): it answers every method at
// /api with 200 and {"success":true,"body":<the request body>}, and
// creates one order for each POST or PATCH it runs.

const (
	// caller is the authenticated caller of every request.
	caller = "conformance-client"
	// route is the ServeMux pattern the handler is registered under, so
	// the key's scope (idempotency.StoreID).
	route = "/api"
	// holdHeader marks a request whose handler blocks until the scenario
	// ends: "the key is currently being processed" is a real request in
	// the handler. The fingerprint covers no header but Content-Type, so
	// the marker does not make it a different request.
	holdHeader = "Conformance-Hold"
	// requestTimeout bounds each request of a scenario.
	requestTimeout = 10 * time.Second
)

// errStoreDown is the failure of the unavailable store.
var errStoreDown = errors.New("conformance: store unavailable (connection refused)")

// downStore is a replay.Recorder whose every call fails, as the
// reference world's UnavailableIdempotencyStore does.
type downStore struct{}

func (downStore) Claim(context.Context, string, time.Time) (bool, error) { return false, errStoreDown }
func (downStore) AcquireLease(context.Context, string, time.Duration) (replay.Lease, error) {
	return replay.Lease{}, errStoreDown
}
func (downStore) ConfirmLease(context.Context, string, string, time.Time) error { return errStoreDown }
func (downStore) ReleaseLease(context.Context, string, string) error            { return errStoreDown }
func (downStore) AcquireRecord(context.Context, string, time.Duration, []byte) (replay.Record, error) {
	return replay.Record{}, errStoreDown
}
func (downStore) ConfirmRecord(context.Context, string, string, time.Time, []byte, []byte) error {
	return errStoreDown
}

// spyStore is a replay.Recorder that remembers the store IDs it recorded,
// in order, so the storage steps can find "the latest record".
type spyStore struct {
	replay.Recorder
	mu       sync.Mutex
	recorded []string
}

func (s *spyStore) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, res []byte) error {
	err := s.Recorder.ConfirmRecord(ctx, id, token, until, fp, res)
	if err == nil {
		s.mu.Lock()
		s.recorded = append(s.recorded, id)
		s.mu.Unlock()
	}
	return err
}

// ids returns the store IDs recorded so far, oldest first.
func (s *spyStore) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.recorded...)
}

// sentRequest is a keyed request the handler answered.
type sentRequest struct {
	method, path, key string
	body              []byte
}

// response is one answer the scenario got.
type response struct {
	status int
	header http.Header
	body   []byte
}

// world is the state of one scenario.
type world struct {
	ctx     context.Context
	spy     *spyStore
	store   replay.Recorder // spy, or downStore{}
	keys    *ctoken.Keyring // seals the stored responses
	srv     *httptest.Server
	orders  int // orders created, under mu
	mu      sync.Mutex
	key     *string // nil: no Idempotency-Key header
	last    *response
	held    chan struct{} // closed at the end of the scenario
	holding sync.WaitGroup
	entered chan struct{} // one value per held request that reached the handler

	// sent maps the store ID of each key to the first request with it
	// that the handler answered, under mu.
	sent map[string]sentRequest

	// bareKeyRefused is set when a key that is an RFC 9110 token (what
	// the bare-key change accepts) was answered 400: the symptom
	// of the scenarios that wait on that change.
	bareKeyRefused atomic.Bool
}

func newWorld(ctx context.Context) *world {
	spy := &spyStore{Recorder: &replay.MemoryStore{}}
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		panic(err) // a fresh random key always makes a ring
	}
	return &world{
		ctx: ctx, spy: spy, store: spy, keys: keys, sent: map[string]sentRequest{},
		held: make(chan struct{}), entered: make(chan struct{}, 8),
	}
}

// start (re)starts the server over the world's store.
func (w *world) start() error {
	w.stop()
	mw, err := idempotency.New(idempotency.Config{
		Store:    w.store,
		Caller:   func(*http.Request) (string, error) { return caller, nil },
		Required: true, // the feature file's first scenario: POST without a key is 400
		Keys:     w.keys,
	})
	if err != nil {
		return fmt.Errorf("idempotency.New: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(route, mw.Wrap(http.HandlerFunc(w.handle)))
	w.srv = httptest.NewServer(mux)
	return nil
}

// stop releases held requests and closes the server.
func (w *world) stop() {
	select {
	case <-w.held:
	default:
		close(w.held)
	}
	w.holding.Wait()
	if w.srv != nil {
		w.srv.Close()
		w.srv = nil
	}
	w.held = make(chan struct{})
}

// handle is the endpoint "that creates an order".
func (w *world) handle(rw http.ResponseWriter, r *http.Request) {
	if r.Header.Get(holdHeader) != "" {
		w.entered <- struct{}{}
		select {
		case <-w.held:
		case <-r.Context().Done():
		}
		http.Error(rw, "held request ended", http.StatusServiceUnavailable) // releases the key: nothing happened
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(rw, "unreadable body", http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodPost || r.Method == http.MethodPatch {
		w.mu.Lock()
		w.orders++
		w.mu.Unlock()
	}
	parsed := json.RawMessage("{}")
	if len(bytes.TrimSpace(body)) > 0 && json.Valid(body) {
		parsed = body
	}
	out, err := json.Marshal(struct {
		Success bool            `json:"success"`
		Body    json.RawMessage `json:"body"`
	}{true, parsed})
	if err != nil {
		http.Error(rw, "cannot encode", http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/json; charset=utf-8")
	rw.WriteHeader(http.StatusOK)
	rw.Write(out)
}

// orderCount returns the orders created so far.
func (w *world) orderCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.orders
}

// send sends one request to the server, with the world's key header (if
// any) and, when body is not nil, a JSON body, as the reference world's
// sendRequest does. The answer becomes w.last.
func (w *world) send(method, path string, body []byte) error {
	resp, err := w.do(method, path, body, w.key, nil)
	if err != nil {
		return err
	}
	w.last = resp
	return nil
}

// do sends one request and reads the whole answer.
func (w *world) do(method, path string, body []byte, key *string, extra http.Header) (*response, error) {
	if w.srv == nil {
		return nil, errors.New("no endpoint: the scenario set none up")
	}
	ctx, cancel := context.WithTimeout(w.ctx, requestTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, w.srv.URL+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != nil {
		req.Header.Set(idempotency.DefaultHeader, *key)
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	res, err := w.srv.Client().Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if key != nil && res.StatusCode == http.StatusBadRequest && isBareToken(*key, idempotency.DefaultMaxKeyBytes) {
		w.bareKeyRefused.Store(true)
	}
	if key != nil && res.Header.Get("Content-Type") != "application/problem+json" && res.Header.Get(idempotency.ReplayedHeader) == "" {
		// The handler's own answer: the request that made the key's
		// record, if any was made.
		id := idempotency.StoreID(caller, route, *key)
		w.mu.Lock()
		if _, ok := w.sent[id]; !ok {
			w.sent[id] = sentRequest{method: method, path: path, key: *key, body: body}
		}
		w.mu.Unlock()
	}
	return &response{status: res.StatusCode, header: res.Header, body: b}, nil
}

// hold starts a request with key and body whose handler blocks until the
// scenario ends, and returns once the handler runs: the key is then
// leased by a live request.
func (w *world) hold(key string, body []byte) error {
	w.holding.Add(1)
	done := make(chan error, 1)
	go func() {
		defer w.holding.Done()
		resp, err := w.do(http.MethodPost, route, body, &key, http.Header{holdHeader: {"1"}})
		if err == nil {
			err = fmt.Errorf("answered %d", resp.status)
		}
		done <- err
	}()
	select {
	case <-w.entered:
		return nil
	case err := <-done:
		return fmt.Errorf("the held request ended before its handler ran: %w", err)
	case <-time.After(requestTimeout):
		return errors.New("the held request's handler did not start in time")
	}
}

// record returns the store's record of key (scoped to caller and route),
// and whether the middleware recorded it.
func (w *world) record(key string) (replay.Record, bool, error) {
	id := idempotency.StoreID(caller, route, key)
	found := false
	for _, r := range w.spy.ids() {
		found = found || r == id
	}
	if !found {
		return replay.Record{}, false, nil
	}
	// A recorded ID is done: AcquireRecord reads it and changes nothing.
	rec, err := w.spy.AcquireRecord(w.ctx, id, time.Second, []byte{1})
	return rec, true, err
}

// latest returns the response stored in the most recent record, read the
// only way ctoken reads one: a retry of the request that made it, which
// must be answered from the store (Idempotent-Replayed: true) without
// running the handler. The storage steps so hold whatever form the
// store keeps records in.
func (w *world) latest() (*response, error) {
	ids := w.spy.ids()
	if len(ids) == 0 {
		return nil, errors.New("no idempotency record was made")
	}
	w.mu.Lock()
	req, ok := w.sent[ids[len(ids)-1]]
	w.mu.Unlock()
	if !ok {
		return nil, errors.New("the latest record is of no request this scenario sent")
	}
	before := w.orderCount()
	resp, err := w.do(req.method, req.path, req.body, &req.key, nil)
	if err != nil {
		return nil, err
	}
	if resp.header.Get(idempotency.ReplayedHeader) != "true" || w.orderCount() != before {
		return nil, fmt.Errorf("a retry of the recorded request was not answered from the record (status %d)", resp.status)
	}
	return resp, nil
}

// isBareToken reports whether key is non-empty, unquoted, at most max
// bytes, and made of RFC 9110 token characters.
func isBareToken(key string, max int) bool {
	if key == "" || len(key) > max {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
