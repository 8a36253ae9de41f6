package idempotency

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
	"github.com/fxamacker/cbor/v2"
)

func TestEncodeResponse(t *testing.T) {
	t.Run("round trip", func(t *testing.T) {
		in := Response{Status: 201, Header: [][2]string{{"Content-Type", "application/json"}, {"Link", "</a>"}, {"Link", "</b>"}}, Body: []byte{0, 1, 2, 0xff}}
		b, err := EncodeResponse(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := DecodeResponse(b)
		if err != nil || out.Status != 201 || !bytes.Equal(out.Body, in.Body) || len(out.Header) != 3 || out.Header[2] != in.Header[2] || out.TooLarge {
			t.Fatalf("DecodeResponse = %+v, %v", out, err)
		}
	})
	for _, tc := range []struct {
		name string
		r    Response
		want error
	}{
		{"status 199", Response{Status: 199}, ErrRecord},
		{"status 600", Response{Status: 600}, ErrRecord},
		{"status 0", Response{}, ErrRecord},
		{"header name not a token", Response{Status: 200, Header: [][2]string{{"Bad Name", "v"}}}, ErrRecord},
		{"header value with CR", Response{Status: 200, Header: [][2]string{{"X-A", "a\rb"}}}, ErrRecord},
		{"too large marker with a body", Response{Status: 200, TooLarge: true, Body: []byte("x")}, ErrRecord},
		{"too large marker with a header", Response{Status: 200, TooLarge: true, Header: [][2]string{{"X-A", "a"}}}, ErrRecord},
		{"65 header lines", Response{Status: 200, Header: make([][2]string, maxStoredHeaders+1)}, replay.ErrTooLarge},
		{"headers over MaxStoredHeaderBytes", Response{Status: 200, Header: [][2]string{{"X-A", strings.Repeat("a", MaxStoredHeaderBytes)}}}, replay.ErrTooLarge},
		{"body over MaxResultBytes", Response{Status: 200, Body: make([]byte, replay.MaxResultBytes)}, replay.ErrTooLarge},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			for i := range tc.r.Header {
				if tc.r.Header[i][0] == "" {
					tc.r.Header[i] = [2]string{"X-A", "a"}
				}
			}
			if b, err := EncodeResponse(tc.r); !errors.Is(err, tc.want) || b != nil {
				t.Fatalf("EncodeResponse = %x, %v; want %v", b, err, tc.want)
			}
		})
	}
}

func TestResponseLimits(t *testing.T) {
	// A status-200 record with a body of n bytes encodes to 12 + n bytes
	// near the cap: map head, version, status (2 bytes), key 4 and a
	// 5-byte byte-string head.
	const overhead = 12
	raw := func(t *testing.T, w wireResponse) []byte {
		t.Helper()
		b, err := recordEnc.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("exactly MaxResultBytes encodes and decodes", func(t *testing.T) {
		b, err := EncodeResponse(Response{Status: 200, Body: make([]byte, replay.MaxResultBytes-overhead)})
		if err != nil || len(b) != replay.MaxResultBytes {
			t.Fatalf("%d bytes, %v", len(b), err)
		}
		if _, err := DecodeResponse(b); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("one byte over MaxResultBytes is refused both ways", func(t *testing.T) {
		if _, err := EncodeResponse(Response{Status: 200, Body: make([]byte, replay.MaxResultBytes-overhead+1)}); !errors.Is(err, replay.ErrTooLarge) {
			t.Fatalf("encode: %v", err)
		}
		b := raw(t, wireResponse{Version: 1, Status: 200, Body: make([]byte, replay.MaxResultBytes-overhead+1)})
		if _, err := DecodeResponse(b); len(b) != replay.MaxResultBytes+1 || !errors.Is(err, ErrRecord) {
			t.Fatalf("decode of %d bytes: %v", len(b), err)
		}
	})
	t.Run("64 header lines decode, 65 do not", func(t *testing.T) {
		var hdr [][2]string
		for i := range maxStoredHeaders {
			hdr = append(hdr, [2]string{"X-H", strconv.Itoa(i)})
		}
		b, err := EncodeResponse(Response{Status: 200, Header: hdr})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := DecodeResponse(b); err != nil || len(r.Header) != maxStoredHeaders || r.Header[63] != hdr[63] {
			t.Fatalf("decode: %d headers, %v", len(r.Header), err)
		}
		flat := []string{}
		for range maxStoredHeaders + 1 {
			flat = append(flat, "X-H", "v")
		}
		if _, err := DecodeResponse(raw(t, wireResponse{Version: 1, Status: 200, Header: flat})); !errors.Is(err, ErrRecord) {
			t.Fatalf("65 lines: %v", err)
		}
	})
	t.Run("header bytes up to MaxStoredHeaderBytes decode, one more does not", func(t *testing.T) {
		at := func(n int) []byte {
			return raw(t, wireResponse{Version: 1, Status: 200, Header: []string{"X-A", strings.Repeat("v", n-len("X-A"))}})
		}
		if _, err := DecodeResponse(at(MaxStoredHeaderBytes)); err != nil {
			t.Fatalf("at the cap: %v", err)
		}
		if _, err := DecodeResponse(at(MaxStoredHeaderBytes + 1)); !errors.Is(err, ErrRecord) {
			t.Fatalf("over the cap: %v", err)
		}
		if _, err := EncodeResponse(Response{Status: 200, Header: [][2]string{{"X-A", strings.Repeat("v", MaxStoredHeaderBytes-3)}}}); err != nil {
			t.Fatalf("encode at the cap: %v", err)
		}
	})
	t.Run("a status past the int range is refused", func(t *testing.T) {
		for _, st := range []uint{600, 999, 1000, 1 << 63, ^uint(0)} {
			if _, err := DecodeResponse(raw(t, wireResponse{Version: 1, Status: st})); !errors.Is(err, ErrRecord) {
				t.Errorf("status %d: %v", st, err)
			}
		}
	})
}

func TestStoredHeader(t *testing.T) {
	h := http.Header{}
	h.Add("Content-Type", "text/plain")
	h.Add("X-A", " a\r\nb\x00 \x7f")
	h.Add("X-A", "c")
	h.Add("X-Skipped", "s")
	got := storedHeader(h, []string{"X-A", "Content-Type", "Location"})
	want := [][2]string{{"X-A", "a  b"}, {"X-A", "c"}, {"Content-Type", "text/plain"}}
	h.Add("X-Tab", "a\tb c")
	if got := storedHeader(h, []string{"X-Tab"}); len(got) != 1 || got[0][1] != "a\tb c" {
		t.Fatalf("a valid value with a tab and a space changed: %q", got)
	}
	if len(got) != len(want) {
		t.Fatalf("storedHeader = %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("header %d = %q, want %q", i, got[i], want[i])
		}
	}
	if _, err := EncodeResponse(Response{Status: 200, Header: got}); err != nil {
		t.Fatalf("cleaned headers do not encode: %v", err)
	}
}

// sealedVectors is testdata/sealed.json, written by testdata/sealed.py from
// the layout in doc.go, independently of this package.
type sealedVectors struct {
	About   string   `json:"about"`
	KeysHex []string `json:"keys_hex"`
	Ring    []int    `json:"ring"`
	Sealed  []struct {
		Name           string `json:"name"`
		Key            int    `json:"key"`
		StoreID        string `json:"store_id"`
		FingerprintHex string `json:"fingerprint_hex"`
		NonceHex       string `json:"nonce_hex"`
		PlaintextHex   string `json:"plaintext_hex"`
		SealedHex      string `json:"sealed_hex"`
	} `json:"sealed"`
	Rejects []struct {
		Name           string `json:"name"`
		StoreID        string `json:"store_id"`
		FingerprintHex string `json:"fingerprint_hex"`
		SealedHex      string `json:"sealed_hex"`
		Fault          string `json:"fault"`
	} `json:"rejects"`
}

func loadSealedVectors(t testing.TB) (sealedVectors, [][]byte) {
	t.Helper()
	b, err := os.ReadFile("testdata/sealed.json")
	if err != nil {
		t.Fatal(err)
	}
	var v sealedVectors
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	if len(v.Sealed) == 0 || len(v.Rejects) == 0 || len(v.Ring) == 0 {
		t.Fatal("a section of the sealed vectors is empty")
	}
	keys := make([][]byte, len(v.KeysHex))
	for i, k := range v.KeysHex {
		if keys[i], err = hex.DecodeString(k); err != nil {
			t.Fatal(err)
		}
	}
	return v, keys
}

// vectorSealer is the sealer of the vectors' ring.
func vectorSealer(t testing.TB, v sealedVectors, keys [][]byte) sealer {
	t.Helper()
	var ring [][]byte
	for _, i := range v.Ring {
		ring = append(ring, keys[i])
	}
	kr, err := ctoken.NewKeyring(ring[0], ring[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := newSealer(kr)
	if !ok {
		t.Fatal("newSealer refused the vectors' ring")
	}
	return s
}

// fixedNonce is XAES-256-GCM under one nonce, written out from AES and GCM
// as the C2SP specification gives it: the test seam that makes a seal
// reproducible. It opens with the real AEAD.
type fixedNonce struct {
	recordAEAD
	key, nonce []byte
}

func (f fixedNonce) Seal(dst, plaintext, ad []byte) []byte {
	block, err := aes.NewCipher(f.key)
	if err != nil {
		panic(err)
	}
	l := make([]byte, 16)
	block.Encrypt(l, l)
	k1 := make([]byte, 16)
	for i := range 16 {
		k1[i] = l[i] << 1
		if i < 15 {
			k1[i] |= l[i+1] >> 7
		}
	}
	if l[0]&0x80 != 0 {
		k1[15] ^= 0x87
	}
	var kx []byte
	for i := byte(1); i <= 2; i++ {
		m := append([]byte{0, i, 'X', 0}, f.nonce[:12]...)
		for j := range m {
			m[j] ^= k1[j]
		}
		block.Encrypt(m, m)
		kx = append(kx, m...)
	}
	kb, err := aes.NewCipher(kx)
	if err != nil {
		panic(err)
	}
	g, err := cipher.NewGCM(kb)
	if err != nil {
		return nil // FIPS 140-only mode refuses a chosen nonce
	}
	return g.Seal(append(dst, f.nonce...), f.nonce[12:], plaintext, ad)
}

func TestSealedRecordVectors(t *testing.T) {
	v, keys := loadSealedVectors(t)
	s := vectorSealer(t, v, keys)
	for _, c := range v.Sealed {
		t.Run(c.Name, func(t *testing.T) {
			fp, pt, want := unhex(t, c.FingerprintHex), unhex(t, c.PlaintextHex), unhex(t, c.SealedHex)
			wantResp, err := DecodeResponse(pt)
			if err != nil {
				t.Fatalf("the vector's plaintext does not decode: %v", err)
			}
			got, fault := s.open(c.StoreID, fp, want)
			if fault != openOK || !reflect.DeepEqual(got, wantResp) {
				t.Fatalf("open = %+v, fault %d; want %+v", got, fault, wantResp)
			}
			// Sealed under the vector's key as primary, with its nonce.
			kr, err := ctoken.NewKeyring(keys[c.Key])
			if err != nil {
				t.Fatal(err)
			}
			one, _ := newSealer(kr)
			sub, _ := ctoken.DeriveKey(keys[c.Key], sealLabel)
			one.aeads[0] = fixedNonce{recordAEAD: one.aeads[0], key: sub, nonce: unhex(t, c.NonceHex)}
			sealed, err := one.seal(c.StoreID, fp, wantResp)
			if err != nil {
				t.Fatal(err)
			}
			if sealed == nil || len(sealed) == sealHeaderSize {
				t.Skip("GCM with a chosen nonce is not available (FIPS 140-only mode)")
			}
			if !bytes.Equal(sealed, want) {
				t.Fatalf("seal = %x\nwant   %x", sealed, want)
			}
			if wantResp.TooLarge {
				return // the marker is never a buffered response
			}
			// The same response buffered as a handler writes it seals to
			// the same bytes, and its body is left as written.
			var buf respBuffer
			buf.Write(wantResp.Body)
			sealed, err = one.sealBuffered(c.StoreID, fp, wantResp.Status, wantResp.Header, &buf)
			if err != nil || !bytes.Equal(sealed, want) {
				t.Fatalf("sealBuffered = %x, %v\nwant           %x", sealed, err, want)
			}
			if !bytes.Equal(buf.Bytes(), wantResp.Body) {
				t.Fatal("sealBuffered changed the buffered body")
			}
		})
	}
}

// TestSealBufferedMatchesSeal seals responses whose encoding before the
// body fits the buffer's room and responses whose headers do not: both
// open to the response given, and the buffered body is left as written.
func TestSealBufferedMatchesSeal(t *testing.T) {
	s, _ := newSealer(testKeys)
	fp := bytes.Repeat([]byte{7}, FingerprintSize)
	long := [][2]string{{"Content-Type", "application/json"}, {"Link", strings.Repeat("l", respRoom)}}
	cases := []struct {
		name string
		r    Response
	}{
		{"no body", Response{Status: 204}},
		{"small body, no header", Response{Status: 201, Body: []byte("{}")}},
		{"body and a header", Response{Status: 201, Header: [][2]string{{"Content-Type", "application/json"}}, Body: bytes.Repeat([]byte("b"), 70000)}},
		{"headers past the room", Response{Status: 200, Header: long, Body: []byte("body")}},
		{"headers that just fit", Response{Status: 200, Header: [][2]string{{"X", strings.Repeat("v", respRoom-14)}}, Body: []byte("b")}},
		{"headers one byte past", Response{Status: 200, Header: [][2]string{{"X", strings.Repeat("v", respRoom-13)}}, Body: []byte("b")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf respBuffer
			for chunk := range slices.Chunk(tc.r.Body, 1000) {
				buf.Write(chunk)
			}
			if buf.Len() != len(tc.r.Body) {
				t.Fatalf("Len = %d, want %d", buf.Len(), len(tc.r.Body))
			}
			sealed, err := s.sealBuffered("id", fp, tc.r.Status, tc.r.Header, &buf)
			if err != nil {
				t.Fatal(err)
			}
			got, fault := s.open("id", fp, sealed)
			want, _ := DecodeResponse(must(EncodeResponse(tc.r)))
			if fault != openOK || !reflect.DeepEqual(got, want) {
				t.Fatalf("open = %+v, fault %d; want %+v", got, fault, want)
			}
			if !bytes.Equal(buf.Bytes(), tc.r.Body) {
				t.Fatal("sealBuffered changed the buffered body")
			}
		})
	}
}

// must returns b, failing the program for a non-nil err (test inputs
// that are valid by construction).
func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestSealedRecordOpenRefuses(t *testing.T) {
	v, keys := loadSealedVectors(t)
	s := vectorSealer(t, v, keys)
	faults := map[string]openFault{"malformed": openMalformed, "unknown_key": openUnknownKey, "forged": openForged, "undecodable": openUndecodable}
	for _, c := range v.Rejects {
		t.Run(c.Name, func(t *testing.T) {
			want, ok := faults[c.Fault]
			if !ok {
				t.Fatalf("unknown fault %q", c.Fault)
			}
			got, fault := s.open(c.StoreID, unhex(t, c.FingerprintHex), unhex(t, c.SealedHex))
			if fault != want || !reflect.DeepEqual(got, Response{}) {
				t.Fatalf("open = %+v, fault %d; want fault %d and nothing", got, fault, want)
			}
			if strings.Contains(fault.message(), c.StoreID) || fault.message() == "" {
				t.Fatalf("message %q", fault.message())
			}
		})
	}
	t.Run("over replay.MaxResultBytes, before any decoding", func(t *testing.T) {
		b := make([]byte, replay.MaxResultBytes+1)
		b[0] = sealVersion
		copy(b[1:], s.ids[0][:])
		if _, fault := s.open("id", nil, b); fault != openMalformed {
			t.Fatalf("fault %d, want malformed", fault)
		}
	})
	t.Run("every single flipped bit of a sealed record", func(t *testing.T) {
		good, err := s.seal("id", []byte("fp"), Response{Status: 201, Body: []byte("{}")})
		if err != nil {
			t.Fatal(err)
		}
		if _, fault := s.open("id", []byte("fp"), good); fault != openOK {
			t.Fatalf("the unflipped record: fault %d", fault)
		}
		for i := range len(good) * 8 {
			b := bytes.Clone(good)
			b[i/8] ^= 1 << (i % 8)
			if r, fault := s.open("id", []byte("fp"), b); fault == openOK || r.Status != 0 {
				t.Fatalf("bit %d flipped: opened %+v", i, r)
			}
		}
	})
}

func TestSealRefusesWhatDoesNotFitMaxResultBytes(t *testing.T) {
	kr, err := ctoken.NewKeyring(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newSealer(kr)
	// 12 bytes of CBOR around a body near the cap (TestResponseLimits).
	fits := Response{Status: 200, Body: make([]byte, maxSealedPlaintext-12)}
	b, err := s.seal("id", nil, fits)
	if err != nil || len(b) != replay.MaxResultBytes {
		t.Fatalf("the largest sealable response: %d bytes, %v", len(b), err)
	}
	if r, fault := s.open("id", nil, b); fault != openOK || len(r.Body) != len(fits.Body) {
		t.Fatalf("open of the largest: fault %d", fault)
	}
	over := Response{Status: 200, Body: make([]byte, maxSealedPlaintext-11)}
	if b, err := s.seal("id", nil, over); !errors.Is(err, replay.ErrTooLarge) || b != nil {
		t.Fatalf("one byte more: %d bytes, %v", len(b), err)
	}
	if b, err := s.seal("id", nil, Response{Status: 99}); !errors.Is(err, ErrRecord) || b != nil {
		t.Fatalf("an invalid response: %v", err)
	}
	if b, err := (sealer{}).seal("id", nil, fits); !errors.Is(err, ErrRecord) || b != nil {
		t.Fatalf("a zero sealer: %v", err)
	}
}

func TestSealedRecordRotation(t *testing.T) {
	old, next, other := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{3}, 32)
	ring := func(keys ...[]byte) sealer {
		kr, err := ctoken.NewKeyring(keys[0], keys[1:]...)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := newSealer(kr)
		return s
	}
	b, err := ring(old).seal("id", []byte("fp"), Response{Status: 201, Body: []byte("paid")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    sealer
		want openFault
	}{
		{"the same ring", ring(old), openOK},
		{"a new primary with the old key after it", ring(next, old), openOK},
		{"the old key retired from the ring", ring(next), openUnknownKey},
		{"another ring", ring(other, next), openUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, fault := tc.s.open("id", []byte("fp"), b)
			if fault != tc.want || (fault == openOK) != (string(r.Body) == "paid") {
				t.Fatalf("open = %+v, fault %d; want %d", r, fault, tc.want)
			}
		})
	}
	t.Run("a new record is sealed under the new primary", func(t *testing.T) {
		s := ring(next, old)
		b, _ := s.seal("id", nil, Response{Status: 200})
		if !bytes.Equal(b[1:sealHeaderSize], s.ids[0][:]) || bytes.Equal(b[1:sealHeaderSize], s.ids[1][:]) {
			t.Fatalf("key id %x, ring %x", b[1:sealHeaderSize], s.ids)
		}
	})
}

func TestNewRefusesAMissingKeyring(t *testing.T) {
	caller := func(*http.Request) (string, error) { return "a", nil }
	for name, kr := range map[string]*ctoken.Keyring{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			m, err := New(Config{Store: newStore(), Caller: caller, Keys: kr})
			if !errors.Is(err, ErrConfig) || m != nil || !strings.Contains(err.Error(), "Keys") {
				t.Fatalf("New = %v, %v; want ErrConfig naming Keys", m, err)
			}
		})
	}
}

// TestMiddlewareRefusesAnEditedRecord edits the stored record of a done key
// in every way a store's holder could, and checks that each retry is a 500
// with ErrRecord, logged at Error, the handler not run again, and nothing
// of the record replayed.
func TestMiddlewareRefusesAnEditedRecord(t *testing.T) {
	other, err := ctoken.NewKeyring(bytes.Repeat([]byte{0x77}, 32))
	if err != nil {
		t.Fatal(err)
	}
	otherSealer, _ := newSealer(other)
	for _, tc := range []struct {
		name string
		edit func(id string, fp, b []byte) []byte
		want string // in the log line
	}{
		{"a flipped ciphertext byte", func(_ string, _, b []byte) []byte { b[len(b)/2] ^= 1; return b }, "fails authentication"},
		{"a flipped tag byte", func(_ string, _, b []byte) []byte { b[len(b)-1] ^= 0x80; return b }, "fails authentication"},
		{"truncated", func(_ string, _, b []byte) []byte { return b[:len(b)-1] }, "fails authentication"},
		{"cut to its header", func(_ string, _, b []byte) []byte { return b[:sealHeaderSize] }, "not a sealed record"},
		{"another version", func(_ string, _, b []byte) []byte { b[0] = 2; return b }, "not a sealed record"},
		{"a flipped key id", func(_ string, _, b []byte) []byte { b[2] ^= 1; return b }, "not in the keyring"},
		{"sealed under a key not in the ring", func(id string, fp, _ []byte) []byte {
			b, _ := otherSealer.seal(id, fp, Response{Status: 200, Body: []byte("forged")})
			return b
		}, "not in the keyring"},
		{"sealed for another store ID", func(id string, fp, _ []byte) []byte {
			s, _ := newSealer(testKeys)
			b, _ := s.seal(id+"x", fp, Response{Status: 200, Body: []byte("moved")})
			return b
		}, "fails authentication"},
		{"the response in clear", func(string, []byte, []byte) []byte {
			b, _ := EncodeResponse(Response{Status: 200, Body: []byte("clear")})
			return b
		}, "not a sealed record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore()
			f := newFixture(t, Config{Store: store}, nil)
			first := f.post(key1, `{"amount":100}`)
			if first.Code != http.StatusCreated {
				t.Fatalf("first: %d", first.Code)
			}
			id := StoreID("alice", "POST /payments", strings.Trim(key1, `"`))
			rec, err := store.AcquireRecord(context.Background(), id, time.Minute, nil)
			if err != nil || rec.State != replay.LeaseDone {
				t.Fatalf("stored record: %+v, %v", rec, err)
			}
			if bytes.Contains(rec.Result, first.Body.Bytes()) || bytes.Contains(rec.Result, []byte("/payments/1")) {
				t.Fatal("the store holds the response in clear")
			}
			// A fresh store holding the edited record under the same ID.
			edited := newStore()
			l, _ := edited.AcquireRecord(context.Background(), id, time.Minute, rec.Fingerprint)
			if err := edited.ConfirmRecord(context.Background(), id, l.Token, time.Now().Add(time.Hour), rec.Fingerprint,
				tc.edit(id, rec.Fingerprint, bytes.Clone(rec.Result))); err != nil {
				t.Fatal(err)
			}
			g := newFixture(t, Config{Store: edited}, nil)
			w := g.post(key1, `{"amount":100}`)
			problemOf(t, w, http.StatusInternalServerError)
			if g.runs.Load() != 0 || w.Header().Get(ReplayedHeader) != "" || w.Header().Get("Location") != "" {
				t.Fatalf("runs %d, headers %v", g.runs.Load(), w.Header())
			}
			if e := g.obs.last(t); e.Outcome != observe.OutcomeStoreFailure || e.Reason != observe.ReasonIdempotencyRecordCorrupt {
				t.Errorf("event %+v", e)
			}
			logs := g.logs.String()
			if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, tc.want) || !strings.Contains(logs, "status=500") {
				t.Errorf("log %q, want an Error line with %q", logs, tc.want)
			}
			if strings.Contains(logs, id) || strings.Contains(logs, "amount") {
				t.Errorf("log names the store ID or the body: %q", logs)
			}
		})
	}
}

// TestMiddlewareSealsTheTooLargeMarker checks that the marker of a
// response too large to store is sealed like any record: the store holds
// no clear CBOR, and an edited marker is refused like any record.
func TestMiddlewareSealsTheTooLargeMarker(t *testing.T) {
	store := newStore()
	f := newFixture(t, Config{Store: store, MaxResponseBytes: 8}, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "a response over eight bytes")
	})
	if w := f.post(key1, `{}`); w.Code != http.StatusOK {
		t.Fatalf("first: %d", w.Code)
	}
	id := StoreID("alice", "POST /payments", strings.Trim(key1, `"`))
	rec, err := store.AcquireRecord(context.Background(), id, time.Minute, nil)
	if err != nil || rec.State != replay.LeaseDone {
		t.Fatalf("%+v, %v", rec, err)
	}
	if _, err := DecodeResponse(rec.Result); err == nil {
		t.Fatal("the marker is stored in clear")
	}
	s, _ := newSealer(testKeys)
	if r, fault := s.open(id, rec.Fingerprint, rec.Result); fault != openOK || !r.TooLarge || r.Status != http.StatusOK {
		t.Fatalf("marker opens as %+v, fault %d", r, fault)
	}
	problemOf(t, f.post(key1, `{}`), http.StatusInternalServerError)
	if f.runs.Load() != 1 {
		t.Fatalf("runs %d", f.runs.Load())
	}
}

// TestAddReplayedAddsLinesInOrderLikeHeaderAdd checks addReplayed against
// http.Header.Add: the same values under the same names in the same order,
// for names in one run, names whose lines are interleaved, names left out,
// and names already holding values; and that a later append to one name
// does not change another's values.
func TestAddReplayedAddsLinesInOrderLikeHeaderAdd(t *testing.T) {
	only := func(names ...string) func(string) (string, bool) {
		return func(n string) (string, bool) {
			n = http.CanonicalHeaderKey(n)
			return n, slices.Contains(names, n)
		}
	}
	cases := []struct {
		name   string
		before http.Header
		lines  [][2]string
		accept func(string) (string, bool)
	}{
		{"one line", nil, [][2]string{{"Content-Type", "a/b"}}, only("Content-Type")},
		{"runs", nil, [][2]string{{"Link", "1"}, {"Link", "2"}, {"Vary", "x"}, {"Link-Extra", "3"}}, only("Link", "Vary", "Link-Extra")},
		{"interleaved", nil, [][2]string{{"Link", "1"}, {"Vary", "x"}, {"Link", "2"}, {"Vary", "y"}, {"Link", "3"}}, only("Link", "Vary")},
		{"some refused", nil, [][2]string{{"Set-Cookie", "s"}, {"Link", "1"}, {"Set-Cookie", "t"}, {"Link", "2"}}, only("Link")},
		{"lower-case names", nil, [][2]string{{"link", "1"}, {"LINK", "2"}}, only("Link")},
		{"name already set", http.Header{"Link": {"outer"}}, [][2]string{{"Link", "1"}, {"Link", "2"}}, only("Link")},
		{"none", nil, nil, only("Link")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, want := tc.before.Clone(), tc.before.Clone()
			if got == nil {
				got, want = http.Header{}, http.Header{}
			}
			addReplayed(got, tc.lines, tc.accept)
			for _, kv := range tc.lines {
				if name, ok := tc.accept(kv[0]); ok {
					want.Add(name, kv[1])
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("addReplayed = %v, Header.Add %v", got, want)
			}
			for name := range got {
				got[name] = append(got[name], "appended")
				want[name] = append(want[name], "appended")
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("after appending to each name: %v, want %v", got, want)
			}
		})
	}
}

// The record codec as it was written on a CBOR library (fxamacker/cbor,
// Core Deterministic Encoding, a strict decoder, and a decode that
// re-encodes to refuse what is not canonical): the reference that the
// hand-written EncodeResponse and DecodeResponse must match byte for byte
// and verdict for verdict (TestCodecMatchesTheCBORLibrary,
// FuzzRecordDecodeMatchesTheCBORLibrary).

// wireResponse is the CBOR form of Response.
type wireResponse struct {
	Version  uint     `cbor:"1,keyasint"`
	Status   uint     `cbor:"2,keyasint"`
	Header   []string `cbor:"3,keyasint,omitempty"`
	Body     []byte   `cbor:"4,keyasint,omitempty"`
	TooLarge bool     `cbor:"5,keyasint,omitempty"`
}

var (
	recordEnc = func() cbor.EncMode {
		m, err := cbor.CoreDetEncOptions().EncMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
	recordDec = func() cbor.DecMode {
		m, err := cbor.DecOptions{
			DupMapKey:         cbor.DupMapKeyEnforcedAPF,
			IndefLength:       cbor.IndefLengthForbidden,
			TagsMd:            cbor.TagsForbidden,
			ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
			MaxNestedLevels:   4,
			MaxArrayElements:  2 * maxStoredHeaders,
			MaxMapPairs:       16,
			UTF8:              cbor.UTF8RejectInvalid,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
)

// refEncodeResponse is EncodeResponse on the CBOR library.
func refEncodeResponse(r Response) ([]byte, error) {
	if err := checkResponse(r.Status, len(r.Header), r.TooLarge, len(r.Body)); err != nil {
		return nil, err
	}
	w := wireResponse{Version: recordVersion, Status: uint(r.Status), Body: r.Body, TooLarge: r.TooLarge}
	n := 0
	for _, kv := range r.Header {
		if !isToken(kv[0]) || !validFieldValue(kv[1]) {
			return nil, errRecordCorrupt
		}
		n += len(kv[0]) + len(kv[1])
		w.Header = append(w.Header, kv[0], kv[1])
	}
	if n > MaxStoredHeaderBytes || len(r.Header) > maxStoredHeaders {
		return nil, replay.ErrTooLarge
	}
	b, err := recordEnc.Marshal(w)
	if err != nil {
		return nil, errRecordCorrupt
	}
	if len(b) > replay.MaxResultBytes {
		return nil, replay.ErrTooLarge
	}
	return b, nil
}

// refDecodeResponse is DecodeResponse on the CBOR library.
func refDecodeResponse(b []byte) (Response, error) {
	if len(b) == 0 || len(b) > replay.MaxResultBytes {
		return Response{}, errRecordCorrupt
	}
	var w wireResponse
	if err := recordDec.Unmarshal(b, &w); err != nil {
		return Response{}, errRecordCorrupt
	}
	if w.Version != recordVersion || len(w.Header)%2 != 0 {
		return Response{}, errRecordCorrupt
	}
	if err := checkResponse(int(w.Status), len(w.Header)/2, w.TooLarge, len(w.Body)); err != nil {
		return Response{}, errRecordCorrupt
	}
	r := Response{Status: int(w.Status), Body: w.Body, TooLarge: w.TooLarge}
	n := 0
	for i := 0; i < len(w.Header); i += 2 {
		name, value := w.Header[i], w.Header[i+1]
		if !isToken(name) || !validFieldValue(value) {
			return Response{}, errRecordCorrupt
		}
		n += len(name) + len(value)
		r.Header = append(r.Header, [2]string{name, value})
	}
	if n > MaxStoredHeaderBytes {
		return Response{}, errRecordCorrupt
	}
	again, err := recordEnc.Marshal(w)
	if err != nil || !bytes.Equal(again, b) {
		return Response{}, errRecordCorrupt
	}
	return r, nil
}

// sameVerdict reports whether two codec errors agree: both nil, or both
// matching the same of replay.ErrTooLarge and ErrRecord.
func sameVerdict(a, b error) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	return errors.Is(a, replay.ErrTooLarge) == errors.Is(b, replay.ErrTooLarge) && errors.Is(a, ErrRecord) == errors.Is(b, ErrRecord)
}

// checkDecodeMatches decodes b with both codecs and fails unless they
// agree on the verdict and, when both accept, on the response.
func checkDecodeMatches(t *testing.T, b []byte) {
	t.Helper()
	got, err := DecodeResponse(b)
	want, wantErr := refDecodeResponse(b)
	if !sameVerdict(err, wantErr) {
		t.Fatalf("DecodeResponse(%x) error %v, the CBOR library's %v", b, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeResponse(%x) = %+v, the CBOR library's %+v", b, got, want)
	}
}

// codecResponses returns responses around every edge of the encoding:
// each head size of status, header count, name, value and body, the caps
// on lines and header bytes, invalid fields and the TooLarge marker.
func codecResponses() []Response {
	var rs []Response
	for _, st := range []int{0, 199, 200, 201, 255, 256, 404, 599, 600, 65535, 65536, 1 << 40, -1} {
		rs = append(rs, Response{Status: st}, Response{Status: st, Body: []byte("x")}, Response{Status: st, TooLarge: true})
	}
	for _, n := range []int{1, 23, 24, 255, 256, 65535, 65536, replay.MaxResultBytes - 12, replay.MaxResultBytes - 11} {
		rs = append(rs, Response{Status: 200, Body: bytes.Repeat([]byte{0xff}, n)})
	}
	for _, lines := range []int{1, 11, 12, 13, 63, 64, 65} {
		var h [][2]string
		for i := range lines {
			h = append(h, [2]string{"X-L" + strconv.Itoa(i), strings.Repeat("v", i*7)})
		}
		rs = append(rs, Response{Status: 201, Header: h, Body: []byte("{}")}, Response{Status: 201, Header: h, TooLarge: true})
	}
	for _, v := range []string{"", "a", strings.Repeat("a", 23), strings.Repeat("a", 24), strings.Repeat("a", 255), strings.Repeat("a", 256),
		strings.Repeat("a", MaxStoredHeaderBytes-12), strings.Repeat("a", MaxStoredHeaderBytes-11), "é", "\xff", "a\x00b", " a", "a\t", "a\tb"} {
		rs = append(rs, Response{Status: 200, Header: [][2]string{{"Content-Type", v}}})
	}
	for _, n := range []string{"", "Bad Name", "X-Ok", "é", strings.Repeat("n", 300)} {
		rs = append(rs, Response{Status: 200, Header: [][2]string{{n, "v"}}, Body: []byte("b")})
	}
	return rs
}

// TestCodecMatchesTheCBORLibrary checks the hand-written codec against
// the CBOR library: EncodeResponse writes the same bytes (or refuses with
// the same error) for responses around every edge, and DecodeResponse
// gives the same verdict and response for each encoding and for every
// one-byte change, truncation and extension of it.
func TestCodecMatchesTheCBORLibrary(t *testing.T) {
	for i, r := range codecResponses() {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			got, err := EncodeResponse(r)
			want, wantErr := refEncodeResponse(r)
			if !sameVerdict(err, wantErr) || !bytes.Equal(got, want) {
				t.Fatalf("EncodeResponse = %x, %v; the CBOR library %x, %v", got, err, want, wantErr)
			}
			if err != nil || len(want) > 4<<10 {
				if err == nil {
					checkDecodeMatches(t, want)
				}
				return
			}
			checkDecodeMatches(t, want)
			for j := range want {
				checkDecodeMatches(t, want[:j])
				for _, c := range []byte{0x00, 0x01, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1f, 0x40, 0x5f, 0x60, 0x7f, 0x80, 0x9f, 0xa0, 0xa6, 0xbf, 0xc0, 0xf4, 0xf5, 0xf6, 0xff, want[j] + 1, want[j] - 1} {
					b := bytes.Clone(want)
					b[j] = c
					checkDecodeMatches(t, b)
				}
			}
			checkDecodeMatches(t, append(bytes.Clone(want), 0x00))
		})
	}
	t.Run("non-minimal heads", func(t *testing.T) {
		for _, hexed := range []string{
			"a2010118c8", "a2180101021900c8", "a2011801021900c8", "a3010218c804581a" + strings.Repeat("00", 26),
			"a401011900c80381646e616d650441ff", "a301011900c804590001ff", "a301011900c8045a00000001ff",
			"a301011900c8045b0000000000000001ff", "a301011900c8f5", "a301011900c805f4", "a401011900c8040141ff05f5",
		} {
			b, err := hex.DecodeString(hexed)
			if err != nil {
				t.Fatal(err)
			}
			checkDecodeMatches(t, b)
		}
	})
}

// FuzzRecordDecodeMatchesTheCBORLibrary feeds arbitrary bytes to both
// codecs: the verdicts and the responses agree.
func FuzzRecordDecodeMatchesTheCBORLibrary(f *testing.F) {
	for _, r := range codecResponses() {
		if b, err := refEncodeResponse(r); err == nil && len(b) < 4<<10 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecodeMatches(t, b) })
}
