package idempotency

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
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

// clearAEAD stands in for XAES-256-GCM in the benchmarks' unsealed floor:
// the same layout and lengths (24 zero bytes, the plaintext, 16 zero
// bytes), no cryptography.
type clearAEAD struct{}

func (clearAEAD) Seal(dst, plaintext, _ []byte) []byte {
	dst = append(dst, make([]byte, 24)...)
	dst = append(dst, plaintext...)
	return append(dst, make([]byte, 16)...)
}

func (clearAEAD) Open(dst, sealed, _ []byte) ([]byte, error) {
	return append(dst, sealed[24:len(sealed)-16]...), nil
}

// BenchmarkRecordSeal measures what sealing costs a 4 KiB response, in one
// run: the middleware's first request (record path) and replayed request
// with the records sealed (XAES-256-GCM) and, as their floors, with the
// same layout unsealed (clearAEAD); and the record codec alone: encode
// against encode+seal, decode against open+decode, and each against the
// same codec written on fxamacker/cbor (encode/cbor-library,
// decode/cbor-library).
func BenchmarkRecordSeal(b *testing.B) {
	const size = 4 << 10
	respBody := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	reqBody := []byte(`{"amount":100,"currency":"eur","to":"x"}`)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(respBody)
	})
	newMW := func(b *testing.B, n int, sealed bool) http.Handler {
		store := &replay.MemoryStore{Max: n + 16, MaxRecordBytes: max(replay.DefaultMaxRecordBytes, (n+16)*(size+512))}
		mw, err := New(Config{Store: store, Keys: testKeys, Caller: func(*http.Request) (string, error) { return "alice", nil },
			Route: func(*http.Request) string { return "POST /payments" }})
		if err != nil {
			b.Fatal(err)
		}
		if !sealed {
			mw.p.records.aeads[0] = clearAEAD{}
		}
		return mw.Wrap(handler)
	}
	serve := func(b *testing.B, h http.Handler, key func(i int) string) {
		r := httptest.NewRequest(http.MethodPost, "/payments", nil)
		r.Header.Set("Content-Type", "application/json")
		rd := bytes.NewReader(reqBody)
		w := &benchWriter{h: http.Header{}}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rd.Reset(reqBody)
			r.Body = io.NopCloser(rd)
			r.ContentLength = int64(len(reqBody))
			r.Header["Idempotency-Key"] = []string{key(i)}
			clear(w.h)
			h.ServeHTTP(w, r)
			if w.status != http.StatusCreated {
				b.Fatalf("status %d", w.status)
			}
		}
	}
	for _, sealed := range []bool{true, false} {
		name := map[bool]string{true: "sealed", false: "unsealed"}[sealed]
		b.Run("first/"+name, func(b *testing.B) {
			serve(b, newMW(b, b.N, sealed), func(i int) string { return `"k` + strconv.Itoa(i) + `"` })
		})
		b.Run("replayed/"+name, func(b *testing.B) {
			serve(b, newMW(b, 1, sealed), func(int) string { return `"k"` })
		})
	}
	resp := Response{Status: 201, Header: [][2]string{{"Content-Type", "application/json"}}, Body: respBody}
	s, _ := newSealer(testKeys)
	id, fp := StoreID("alice", "POST /payments", "k"), make([]byte, FingerprintSize)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeResponse(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode+seal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.seal(id, fp, resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same codec on fxamacker/cbor (refEncodeResponse, the reference
	// of the differential tests): what the hand-written codec saves.
	b.Run("encode/cbor-library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := refEncodeResponse(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	enc, _ := EncodeResponse(resp)
	sealedRec, _ := s.seal(id, fp, resp)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeResponse(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/cbor-library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := refDecodeResponse(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The floor of the AEAD itself: AES-256-GCM (crypto/cipher) sealing
	// and opening the same encoded bytes, into a buffer of its own.
	block, _ := aes.NewCipher(make([]byte, 32))
	gcm, _ := cipher.NewGCM(block)
	nonce := make([]byte, gcm.NonceSize())
	gcmOut := make([]byte, 0, len(enc)+gcm.Overhead())
	b.Run("floor/aes-256-gcm-seal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			gcmOut = gcm.Seal(gcmOut[:0], nonce, enc, []byte(id))
		}
	})
	gcmSealed := gcm.Seal(nil, nonce, enc, []byte(id))
	gcmPlain := make([]byte, 0, len(enc))
	b.Run("floor/aes-256-gcm-open", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if gcmPlain, err = gcm.Open(gcmPlain[:0], nonce, gcmSealed, []byte(id)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("open+decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, fault := s.open(id, fp, sealedRec); fault != openOK {
				b.Fatal(fault)
			}
		}
	})
}

// BenchmarkMiddlewareResponseSizes measures the middleware's first request
// (the handler's response buffered, encoded, sealed and recorded in a
// replay.MemoryStore) and replayed request (the record copied out of the
// store, opened, decoded and written) at response bodies of 256 B, 4 KiB,
// 64 KiB and 256 KiB, each beside its floors in the same run: one-copy is
// one copy of the body into a new slice, the least a stored response can
// cost; seal the response encoded and sealed (XAES-256-GCM) once, the
// least a sealed record costs; and bare the handler alone (what it
// allocates itself, setting its headers). The headers cases hold the body at 4 KiB and store 1, 8
// or 32 header lines (ReplayHeaders), to show what the lines cost in time
// and allocations.
func BenchmarkMiddlewareResponseSizes(b *testing.B) {
	reqBody := []byte(`{"amount":100,"currency":"eur","to":"x"}`)
	run := func(b *testing.B, size, lines int) {
		respBody := bytes.Repeat([]byte("0123456789abcdef"), size/16)
		names := []string{"Content-Type"}
		for i := 1; i < lines; i++ {
			names = append(names, "X-Line-"+strconv.Itoa(i))
		}
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			h := w.Header()
			h.Set("Content-Type", "application/json")
			for _, n := range names[1:] {
				h.Set(n, "value-of-"+n)
			}
			w.WriteHeader(http.StatusCreated)
			w.Write(respBody)
		})
		newMW := func(b *testing.B, n int) http.Handler {
			store := &replay.MemoryStore{Max: n + 16, MaxRecordBytes: max(replay.DefaultMaxRecordBytes, (n+16)*(size+2048))}
			mw, err := New(Config{Store: store, Keys: testKeys, Caller: func(*http.Request) (string, error) { return "alice", nil },
				Route: func(*http.Request) string { return "POST /payments" }, ReplayHeaders: names})
			if err != nil {
				b.Fatal(err)
			}
			return mw.Wrap(handler)
		}
		serve := func(b *testing.B, h http.Handler, key func(i int) string) {
			r := httptest.NewRequest(http.MethodPost, "/payments", nil)
			r.Header.Set("Content-Type", "application/json")
			rd := bytes.NewReader(reqBody)
			w := &benchWriter{h: http.Header{}}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rd.Reset(reqBody)
				r.Body = io.NopCloser(rd)
				r.ContentLength = int64(len(reqBody))
				r.Header["Idempotency-Key"] = []string{key(i)}
				clear(w.h)
				h.ServeHTTP(w, r)
				if w.status != http.StatusCreated {
					b.Fatalf("status %d", w.status)
				}
			}
		}
		b.Run("first", func(b *testing.B) {
			serve(b, newMW(b, b.N), func(i int) string { return `"k` + strconv.Itoa(i) + `"` })
		})
		b.Run("replayed", func(b *testing.B) {
			serve(b, newMW(b, 1), func(int) string { return `"k"` })
		})
		b.Run("bare", func(b *testing.B) {
			serve(b, handler, func(int) string { return "" })
		})
		b.Run("seal", func(b *testing.B) {
			s, _ := newSealer(testKeys)
			id, fp := StoreID("alice", "POST /payments", "k"), make([]byte, FingerprintSize)
			resp := Response{Status: http.StatusCreated, Header: [][2]string{{"Content-Type", "application/json"}}, Body: respBody}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				enc, err := s.seal(id, fp, resp)
				if err != nil {
					b.Fatal(err)
				}
				benchBytes = enc
			}
		})
		b.Run("one-copy", func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				benchBytes = append([]byte(nil), respBody...)
			}
		})
	}
	for _, size := range []int{256, 4 << 10, 64 << 10, 256 << 10} {
		b.Run("body="+byteSize(size), func(b *testing.B) { run(b, size, 1) })
	}
	for _, lines := range []int{1, 8, 32} {
		b.Run("body=4KiB/headers="+strconv.Itoa(lines), func(b *testing.B) { run(b, 4<<10, lines) })
	}
}

// benchBytes keeps the one-copy floor's copy alive.
var benchBytes []byte

// byteSize names a size in B or KiB.
func byteSize(n int) string {
	if n < 1<<10 {
		return strconv.Itoa(n) + "B"
	}
	return strconv.Itoa(n>>10) + "KiB"
}
