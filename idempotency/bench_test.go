package idempotency

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// benchWriter is a ResponseWriter that keeps nothing, so that the
// benchmarks measure the middleware and not a recorder.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) WriteHeader(code int)        { w.status = code }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkMiddleware measures the middleware's added cost per request in
// one run, beside its floors: bare is the payments handler alone;
// first is a request with a new key (AcquireRecord, the handler into a
// buffer, EncodeResponse, ConfirmRecord); replayed is a retry answered
// from the store (AcquireRecord, DecodeResponse, the write); store-claim
// is replay.MemoryStore.Claim of a new ID, and store-record the store's
// own AcquireRecord + ConfirmRecord of a new ID with the same fingerprint
// and result sizes as first. Every request carries the same 40-byte JSON
// body and gets a 201 with a 60-byte JSON body.
func BenchmarkMiddleware(b *testing.B) {
	body := []byte(`{"amount":100,"currency":"eur","to":"x"}`)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"pay_0123456789","amount":100,"currency":"eur","to":"x"}`))
	})
	newStore := func(n int) *replay.MemoryStore {
		return &replay.MemoryStore{Max: n + 16, MaxRecordBytes: max(replay.DefaultMaxRecordBytes, (n+16)*512)}
	}
	newMW := func(b *testing.B, store replay.Recorder) http.Handler {
		mw, err := New(Config{Store: store, Keys: testKeys, Caller: func(*http.Request) (string, error) { return "alice", nil },
			Route: func(*http.Request) string { return "POST /payments" }})
		if err != nil {
			b.Fatal(err)
		}
		return mw.Wrap(handler)
	}
	// serve runs h b.N times on one reused request, key(i) naming the key
	// of iteration i ("" for none), and checks every answer.
	serve := func(b *testing.B, h http.Handler, key func(i int) string, want int) {
		r := httptest.NewRequest(http.MethodPost, "/payments", nil)
		r.Header.Set("Content-Type", "application/json")
		rd := bytes.NewReader(body)
		w := &benchWriter{h: http.Header{}}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rd.Reset(body)
			r.Body = io.NopCloser(rd)
			r.ContentLength = int64(len(body))
			if k := key(i); k != "" {
				r.Header["Idempotency-Key"] = []string{k}
			}
			clear(w.h)
			h.ServeHTTP(w, r)
			if w.status != want {
				b.Fatalf("status %d, want %d", w.status, want)
			}
		}
	}
	newKey := func(i int) string { return `"k` + strconv.Itoa(i) + `"` }
	b.Run("bare", func(b *testing.B) {
		serve(b, handler, func(int) string { return "" }, http.StatusCreated)
	})
	b.Run("first", func(b *testing.B) {
		serve(b, newMW(b, newStore(b.N)), newKey, http.StatusCreated)
	})
	b.Run("replayed", func(b *testing.B) {
		h := newMW(b, newStore(1))
		serve(b, h, func(int) string { return `"k"` }, http.StatusCreated)
	})
	b.Run("store-claim", func(b *testing.B) {
		s := newStore(b.N)
		until := time.Now().Add(time.Hour)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if first, err := s.Claim(ctx, StoreID("alice", "POST /payments", strconv.Itoa(i)), until); !first || err != nil {
				b.Fatal(first, err)
			}
		}
	})
	b.Run("store-record", func(b *testing.B) {
		s := newStore(b.N)
		fp := make([]byte, FingerprintSize)
		result, err := EncodeResponse(Response{Status: 201, Header: [][2]string{{"Content-Type", "application/json"}},
			Body: []byte(`{"id":"pay_0123456789","amount":100,"currency":"eur","to":"x"}`)})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			id := StoreID("alice", "POST /payments", strconv.Itoa(i))
			rec, err := s.AcquireRecord(ctx, id, time.Minute, fp)
			if err != nil || rec.State != replay.LeaseAcquired {
				b.Fatal(rec, err)
			}
			if err := s.ConfirmRecord(ctx, id, rec.Token, time.Now().Add(time.Hour), fp, result); err != nil {
				b.Fatal(err)
			}
		}
	})
}
