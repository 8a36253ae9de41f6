package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/replay"
)

func newVerifier(t testing.TB, cfg Config) *Verifier {
	t.Helper()
	v, err := NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// newSigner returns a signer for the sending side of cfg: the receiving
// options, which NewSigner refuses, are left out.
func newSigner(t testing.TB, cfg Config) *Signer {
	t.Helper()
	s, err := NewSigner(Config{Scheme: cfg.Scheme, Secrets: cfg.Secrets,
		SignatureHeader: cfg.SignatureHeader, IDHeader: cfg.IDHeader, Now: cfg.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stepClock is the shared settable test clock.
type stepClock = clocktest.Clock

func newStepClock() *stepClock { return clocktest.New() }

// The signatures below are built with crypto/hmac directly, independently
// of the package's pooled keys and parsers.

// signSHA256 is the HMACSHA256 signature header value of body.
func signSHA256(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// standardMAC is HMAC-SHA256(secret, msg).
func standardMAC(secret []byte, msg string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// signStandard is one Standard Webhooks signature entry.
func signStandard(secret []byte, id string, ts int64, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(standardMAC(secret, id+"."+strconv.FormatInt(ts, 10)+"."+string(body)))
}

func stdHeaders(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sig)
	return h
}

// recordingHandler counts calls and records the body and delivery it saw.
type recordingHandler struct {
	calls  atomic.Int32
	status int
	panics bool
	mu     sync.Mutex
	bodies []string
	ids    []string
}

func (h *recordingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.calls.Add(1)
	b, err := io.ReadAll(r.Body)
	if err != nil {
		panic(err)
	}
	d, _ := DeliveryFrom(r.Context())
	h.mu.Lock()
	h.bodies = append(h.bodies, string(b))
	h.ids = append(h.ids, d.ID)
	h.mu.Unlock()
	if h.panics {
		panic(http.ErrAbortHandler)
	}
	if h.status != 0 {
		w.WriteHeader(h.status)
	}
	io.WriteString(w, "processed")
}

func deliver(h http.Handler, hdr http.Header, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func signed(t *testing.T, s *Signer, id, body string) http.Header {
	t.Helper()
	h := http.Header{}
	if err := s.Sign(h, id, []byte(body)); err != nil {
		t.Fatal(err)
	}
	return h
}

const (
	githubSecret = "It's a Secret to Everybody"
	githubBody   = "Hello, World!"
	githubSig    = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

	// The Standard Webhooks reference vector.
	stdSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	stdID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	stdTS     = 1614265330
	stdBody   = `{"test": 2432232314}`
	stdSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

	// A second Standard Webhooks secret (24 random bytes) for rotation tests.
	stdSecret2 = "whsec_3q2+7wAAAAD+ZmxvYXRpbmctcG9pbnQh"
)

// hmacSecret is an HMAC-SHA256 secret long enough for FIPS 140-3 mode.
const hmacSecret = "hmac-test-secret-1"

// Test secrets of the schemes added for issue 12.
const (
	stripeSecret  = "whsec_ctoken_stripe_test_secret"
	stripeSecret2 = "whsec_ctoken_stripe_test_secret_2"
	slackSecret   = "8f742231b10e8888abcd99yyyzzz85a5"
	shopifySecret = "hush-shopify-client-secret"
)

// txStore is a [replay.Transactor] over a MemoryStore, standing in for
// pgstore in the tests of Lease.Begin and Config.Transactional. A work's
// writes are kept aside and become rows only when its Commit has found
// the lease still live by the store's clock and confirmed it
// (MemoryStore.ConfirmLease, which refuses a lease that is no longer the
// holder's with replay.ErrLeaseLost); a rollback or a lost lease discards
// them, and once the work has ended its transaction refuses every write.
// The fault fields make BeginWork, Commit or Rollback fail.
type txStore struct {
	*replay.MemoryStore
	now func() time.Time

	mu          sync.Mutex
	expires     map[string]time.Time // each lease token's end, by the store's clock
	beginErr    error                // BeginWork fails with it
	nilWork     bool                 // BeginWork answers no work and no error (outside the contract)
	commitErr   error                // Commit returns it, an unknown outcome ...
	commitKeeps bool                 // ... after committing the work and the record (true) or before (false)
	rollbackErr error                // Rollback returns it (the writes are discarded all the same)
	rows        map[string]int
	refused     int // writes refused because their work had ended
	begins      int
	commits     int
	rollbacks   int
	releases    int
	steps       []ctxStep // the context of each Rollback and ReleaseLease
}

func newTxStore(now func() time.Time) *txStore {
	s := &txStore{MemoryStore: &replay.MemoryStore{Now: now}, now: now, rows: map[string]int{}, expires: map[string]time.Time{}}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

func (s *txStore) AcquireLease(ctx context.Context, id string, lease time.Duration) (replay.Lease, error) {
	start := s.now()
	l, err := s.MemoryStore.AcquireLease(ctx, id, lease)
	if err == nil && l.State == replay.LeaseAcquired {
		s.mu.Lock()
		s.expires[l.Token] = start.Add(lease)
		s.mu.Unlock()
	}
	return l, err
}

var _ replay.Transactor = (*txStore)(nil)

func (s *txStore) BeginWork(ctx context.Context, id, token string) (replay.Work, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begins++
	switch {
	case s.beginErr != nil:
		return nil, s.beginErr
	case s.nilWork:
		return nil, nil
	}
	return &txWork{s: s, id: id, token: token}, nil
}

func (s *txStore) ReleaseLease(ctx context.Context, id, token string) error {
	s.mu.Lock()
	s.releases++
	s.steps = append(s.steps, stepOf("ReleaseLease", ctx))
	s.mu.Unlock()
	return s.MemoryStore.ReleaseLease(ctx, id, token)
}

// stats returns the committed rows (a copy) and the refused writes.
func (s *txStore) stats() (rows map[string]int, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.rows), s.refused
}

// counts returns how often BeginWork, Commit, Rollback and ReleaseLease
// were called.
func (s *txStore) counts() (begins, commits, rollbacks, releases int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.begins, s.commits, s.rollbacks, s.releases
}

// txWork is a work of a txStore.
type txWork struct {
	s         *txStore
	id, token string

	mu      sync.Mutex
	ended   bool
	outcome error
	writes  []string
}

type txKey struct{}

var (
	errNoTx    = errors.New("no transaction in the context")
	errTxEnded = errors.New("transaction has ended")
)

func (w *txWork) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, w)
}

func (w *txWork) Commit(ctx context.Context, until time.Time, fingerprint, result []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return w.outcome
	}
	w.ended = true
	s := w.s
	s.mu.Lock()
	s.commits++
	fault, keeps := s.commitErr, s.commitKeeps
	live := s.now().Before(s.expires[w.token])
	s.mu.Unlock()
	if fault != nil && !keeps {
		w.outcome = fault
		return fault
	}
	if !live {
		w.outcome = replay.ErrLeaseLost
		return w.outcome
	}
	if err := s.MemoryStore.ConfirmLease(ctx, w.id, w.token, until); err != nil {
		w.outcome = err
		return err
	}
	s.mu.Lock()
	for _, r := range w.writes {
		s.rows[r]++
	}
	s.mu.Unlock()
	w.outcome = fault
	return fault
}

func (w *txWork) Rollback(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return w.outcome
	}
	w.ended = true
	s := w.s
	s.mu.Lock()
	s.rollbacks++
	s.steps = append(s.steps, stepOf("Rollback", ctx))
	w.outcome = s.rollbackErr
	s.mu.Unlock()
	return w.outcome
}

// txInsert writes row in the transaction ctx carries, as a handler writes
// through pgstore.TxFrom.
func txInsert(ctx context.Context, row string) error {
	w, ok := ctx.Value(txKey{}).(*txWork)
	if !ok {
		return errNoTx
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		w.s.mu.Lock()
		w.s.refused++
		w.s.mu.Unlock()
		return errTxEnded
	}
	w.writes = append(w.writes, row)
	return nil
}
