package cursorwire

import (
	"bytes"
	"encoding/hex"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
)

var (
	// encMode is the Core Deterministic Encoding AppendBody reproduces
	// byte for byte.
	encMode = func() cbor.EncMode {
		m, err := cbor.CoreDetEncOptions().EncMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
	// decMode is the strict decoding DecodeBody is tested against: it
	// accepts exactly what this mode accepts that is also the canonical
	// encoding of its value.
	decMode = func() cbor.DecMode {
		m, err := cbor.DecOptions{
			DupMapKey:         cbor.DupMapKeyEnforcedAPF,
			IndefLength:       cbor.IndefLengthForbidden,
			TagsMd:            cbor.TagsForbidden,
			ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
			MaxNestedLevels:   4,
			MaxArrayElements:  16,
			MaxMapPairs:       16,
			UTF8:              cbor.UTF8RejectInvalid,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
)

// Differential tests of the hand-written cursor codec (codec.go)
// against fxamacker/cbor, in both directions:
//
//   - encode: AppendBody produces byte for byte what encMode
//     (Core Deterministic Encoding) produces for the same Payload;
//   - decode: DecodeBody accepts an input exactly when the strict
//     decMode accepts it and re-encoding the result with
//     encMode gives back the input (it is the canonical encoding),
//     and then yields the same values. The one normalisation: the session
//     is re-encoded as a byte string even when fxamacker decoded a CBOR
//     null into a nil slice, because the issuer never writes null there.

// wireOf converts decoded fields to the fxamacker struct.
func wireOf(f *Fields) Payload {
	return Payload{
		Version:  f.Version,
		Tool:     string(f.Tool),
		Caller:   string(f.Caller),
		Args:     f.Args,
		Page:     uint64(f.Page),
		IssuedAt: f.Issued,
		Session:  f.Session,
		State:    f.State,
	}
}

func sameWire(a, b Payload) bool {
	return a.Version == b.Version && a.Tool == b.Tool && a.Caller == b.Caller &&
		bytes.Equal(a.Args, b.Args) && a.Page == b.Page && a.IssuedAt == b.IssuedAt &&
		bytes.Equal(a.Session, b.Session) && bytes.Equal(a.State, b.State)
}

// bodyWire converts a body to encode to the fxamacker struct.
func bodyWire(b *Body) Payload {
	return Payload{
		Version:  b.Version,
		Tool:     b.Tool,
		Caller:   b.Caller,
		Args:     b.Args,
		Page:     uint64(b.Page),
		IssuedAt: b.Issued,
		Session:  b.Session,
		State:    b.State,
	}
}

// checkDecode is the decode-direction property for one input.
func checkDecode(t *testing.T, in []byte) {
	t.Helper()
	f, handOK := DecodeBody(in)

	var w Payload
	// Payload.Page is a uint64 (the CLI shows forged pages); the issuer
	// writes and DecodeBody accepts at most 2^32-1.
	fxOK := decMode.Unmarshal(in, &w) == nil && w.Page <= math.MaxUint32
	canonical := false
	if fxOK {
		// The issuer's session is never nil, so the encoder always writes
		// a byte string there; fxamacker would write a nil one as null.
		norm := w
		if norm.Session == nil {
			norm.Session = []byte{}
		}
		re, err := encMode.Marshal(&norm)
		canonical = err == nil && bytes.Equal(re, in)
	}
	if handOK != canonical {
		t.Fatalf("input %x: hand decoder ok=%v, fxamacker ok=%v canonical=%v", in, handOK, fxOK, canonical)
	}
	if !handOK {
		if f.Tool != nil || f.Session != nil || f.Version != 0 {
			t.Fatalf("input %x: rejected but fields not zero", in)
		}
		return
	}
	if got := wireOf(&f); !sameWire(got, w) {
		t.Fatalf("input %x: hand decoded %+v, fxamacker %+v", in, got, w)
	}
}

// checkEncode is the encode-direction property for one payload, plus
// the round trip through the hand decoder.
func checkEncode(t *testing.T, f Body) {
	t.Helper()
	if !utf8.ValidString(f.Tool) || !utf8.ValidString(f.Caller) {
		return // Issue refuses these before encoding
	}
	if f.Session == nil {
		f.Session = []byte{} // the issuer's session is never nil
	}
	w := bodyWire(&f)
	if len(w.Args) == 0 {
		w.Args = nil
	}
	want, err := encMode.Marshal(&w)
	if err != nil {
		t.Fatalf("fxamacker: %v", err)
	}
	got := AppendBody([]byte("prefix"), &f)
	if !bytes.Equal(got[len("prefix"):], want) {
		t.Fatalf("payload %+v:\n hand      %x\n fxamacker %x", w, got[len("prefix"):], want)
	}
	if n := BodyLen(&f); n != len(want) {
		t.Fatalf("BodyLen = %d, encoding is %d bytes", n, len(want))
	}
	back, ok := DecodeBody(want)
	if !ok || !sameWire(wireOf(&back), w) {
		t.Fatalf("round trip of %x failed: ok=%v %+v", want, ok, wireOf(&back))
	}
}

// bodySeeds are canonical bodies and near misses of each kind the
// decoder refuses.
func bodySeeds() [][]byte {
	full := AppendBody(nil, &Body{
		Version: 1, Tool: "search_issues", Caller: "user:1",
		Args: bytes.Repeat([]byte{7}, 32), Page: 3, Issued: 1_700_000_000,
		Session: []byte("sess0001"), State: []byte{1, 2, 3},
	})
	minimal := AppendBody(nil, &Body{Version: 1, Session: []byte{}, Issued: -5})
	hx := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			panic(err)
		}
		return b
	}
	seeds := [][]byte{
		full, minimal,
		append(append([]byte(nil), full...), 0), // trailing byte
		full[:len(full)-1],                      // truncated
		hx("a601010260036005000600074000"),      // wrong pair count
		hx("a6010102600360050006000740"),        // canonical minimal, issued 0
		hx("a601180102600360050006000740"),      // non-minimal version
		hx("a60101026003600500061a00000001" + "0740"),
		hx("a6020101016003600500060007" + "40"),               // keys out of order
		hx("a6010101010360050006000740"),                      // duplicate key
		hx("a60101026003600500060007" + "5f40ff"),             // indefinite byte string
		hx("a6010102c0600360050006000740"),                    // tagged text
		hx("a601010261ff0360050006000740"),                    // invalid UTF-8
		hx("a601010260036005000600074009f6"),                  // unknown key 9 (7 pairs head wrong)
		hx("a7010102600360050006000740" + "0940"),             // unknown key 9
		hx("a70101026003600440050006000740"),                  // empty args present
		hx("a6010102400360050006000740"),                      // byte string as tool
		hx("a601010260036005f60006000740"),                    // null page
		hx("a6010102600360051b00000001000000000600074" + "0"), // page over uint32
		hx("a60101026003600500063b80000000000000000740"),      // issued below int64
		hx("bf0101026003600500060007" + "40ff"),               // indefinite map
		hx("a60101026003600500060007f6"),                      // null session
		hx("f6"), hx(""), hx("a0"),
	}
	return seeds
}

func FuzzCursorCBORDecode(f *testing.F) {
	for _, s := range bodySeeds() {
		f.Add(s)
	}
	f.Fuzz(checkDecode)
}

func FuzzCursorCBOREncode(f *testing.F) {
	f.Add("search_issues", "user:1", bytes.Repeat([]byte{7}, 32), uint64(1), uint32(3), int64(1_700_000_000), []byte("sess0001"), []byte{1, 2, 3})
	f.Add("", "", []byte{}, uint64(0), uint32(0), int64(0), []byte{}, []byte{})
	f.Add("é", "\u2603", []byte{1}, uint64(math.MaxUint64), uint32(math.MaxUint32), int64(math.MinInt64), bytes.Repeat([]byte{1}, 300), bytes.Repeat([]byte{2}, 70000))
	f.Add("x", "y", []byte(nil), uint64(24), uint32(256), int64(-25), []byte(nil), []byte(nil))
	f.Add("x", "y", []byte{0}, uint64(65536), uint32(65535), int64(math.MaxInt64), []byte{0}, []byte{0})
	f.Fuzz(func(t *testing.T, tool, caller string, args []byte, version uint64, page uint32, issued int64, session, state []byte) {
		checkEncode(t, Body{
			Version: version, Tool: tool, Caller: caller, Args: args,
			Page: page, Issued: issued, Session: session, State: state,
		})
	})
}

// TestCursorCodecMatchesFxamacker runs both properties over the seeds and
// over every single-byte mutation of a canonical body, so the differential
// check runs in plain `go test` too.
func TestCursorCodecMatchesFxamacker(t *testing.T) {
	for _, s := range bodySeeds() {
		checkDecode(t, s)
	}
	body := bodySeeds()[0]
	for i := range body {
		for _, delta := range []byte{1, 0x20, 0x80, 0xff} {
			m := append([]byte(nil), body...)
			m[i] += delta
			checkDecode(t, m)
		}
		checkDecode(t, body[:i])
	}
	for _, n := range []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, math.MaxUint64} {
		checkEncode(t, Body{
			Version: n, Tool: strings.Repeat("t", int(n%300)), Caller: "c",
			Args: bytes.Repeat([]byte{1}, int(n%40)), Page: uint32(n), Issued: -int64(n >> 1),
			Session: []byte("s"), State: bytes.Repeat([]byte{2}, int(n%257)),
		})
	}
}

// Kills codec.go `len(r.in)-r.pos < size` and `n > uint64(len(r.in)-r.pos)`
// with `-` made `+`: every proper prefix of a canonical body — cut inside a
// head's argument or inside a string — is refused without reading past the
// end of the input. Each prefix is a copy whose capacity is its length, so
// a read past the end panics instead of reading stale bytes.
func TestDecodeBodyRefusesEveryTruncationWithoutReadingPastTheEnd(t *testing.T) {
	full := AppendBody(nil, &Body{
		Version: 1, Tool: "search_issues", Caller: "user:1",
		Args: bytes.Repeat([]byte{7}, 32), Page: 70_000, Issued: 1_700_000_000,
		Session: []byte("sess0001"), State: bytes.Repeat([]byte{1}, 300),
	})
	if _, ok := DecodeBody(full); !ok {
		t.Fatal("test setup: the full body does not decode")
	}
	for n := range len(full) {
		in := make([]byte, n)
		copy(in, full)
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("DecodeBody of the first %d of %d bytes panicked: %v", n, len(full), p)
				}
			}()
			if f, ok := DecodeBody(in); ok || f.Tool != nil || f.Session != nil {
				t.Fatalf("the first %d of %d bytes decoded: ok=%v %+v", n, len(full), ok, f)
			}
		}()
	}
}

// Kills codec.go `ok = ok && len(f.State) > 0` (→ `||`, and `>= 0`): a
// body whose key 8 (state) holds an empty byte string is refused — Issue omits
// an empty state, so accepting it would be a second spelling of a cursor.
func TestDecodeBodyRefusesAnExplicitEmptyState(t *testing.T) {
	body := AppendBody(nil, &Body{Version: 1, Tool: "t", Caller: "c", Page: 1, Issued: 5, Session: []byte("s")})
	if body[0] != cborMap|6 {
		t.Fatalf("test setup: map head %#x, want 6 pairs", body[0])
	}
	if _, ok := DecodeBody(body); !ok {
		t.Fatal("test setup: the body without state does not decode")
	}
	withEmpty := append(append([]byte{cborMap | 7}, body[1:]...), KeyState, cborBytes) // a byte string of length 0
	if f, ok := DecodeBody(withEmpty); ok {
		t.Fatalf("a body with an explicit empty state decoded: %+v", f)
	}
	withOne := append(append([]byte{cborMap | 7}, body[1:]...), KeyState, cborBytes|1, 9)
	if f, ok := DecodeBody(withOne); !ok || !bytes.Equal(f.State, []byte{9}) {
		t.Fatalf("a body with a one-byte state: ok=%v state=%x", ok, f.State)
	}
}
