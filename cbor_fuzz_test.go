package ctoken

import (
	"bytes"
	"encoding/hex"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
)

// cursorWire is the cursor payload as fxamacker/cbor sees it: a map with
// small integer keys. Issue and Verify use the hand-written codec of
// cursor_cbor.go; this struct and the modes below define what that codec
// must match.
type cursorWire struct {
	Version  uint   `cbor:"1,keyasint"`
	Tool     string `cbor:"2,keyasint"`
	Caller   string `cbor:"3,keyasint"`
	Args     []byte `cbor:"4,keyasint,omitempty"`
	Page     uint32 `cbor:"5,keyasint"`
	IssuedAt int64  `cbor:"6,keyasint"`
	Session  []byte `cbor:"7,keyasint"`
	State    []byte `cbor:"8,keyasint,omitempty"`
}

var (
	// cursorEncMode is the Core Deterministic Encoding appendCursorBody
	// reproduces byte for byte.
	cursorEncMode = stateEncMode
	// cursorDecMode is the strict decoding decodeCursorBody is tested
	// against: it accepts exactly what this mode accepts that is also the
	// canonical encoding of its value.
	cursorDecMode = mustDecMode(cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		MaxNestedLevels:   4,
		MaxArrayElements:  16,
		MaxMapPairs:       16,
		UTF8:              cbor.UTF8RejectInvalid,
	})
)

// Differential tests of the hand-written cursor codec (cursor_cbor.go)
// against fxamacker/cbor, in both directions:
//
//   - encode: appendCursorBody produces byte for byte what cursorEncMode
//     (Core Deterministic Encoding) produces for the same cursorWire;
//   - decode: decodeCursorBody accepts an input exactly when the strict
//     cursorDecMode accepts it and re-encoding the result with
//     cursorEncMode gives back the input (it is the canonical encoding),
//     and then yields the same values. The one normalisation: the session
//     is re-encoded as a byte string even when fxamacker decoded a CBOR
//     null into a nil slice, because the issuer never writes null there.

// wireOf converts decoded fields to the fxamacker struct.
func wireOf(f *cursorFields) cursorWire {
	return cursorWire{
		Version:  uint(f.version),
		Tool:     string(f.tool),
		Caller:   string(f.caller),
		Args:     f.args,
		Page:     f.page,
		IssuedAt: f.issued,
		Session:  f.session,
		State:    f.state,
	}
}

func sameWire(a, b cursorWire) bool {
	return a.Version == b.Version && a.Tool == b.Tool && a.Caller == b.Caller &&
		bytes.Equal(a.Args, b.Args) && a.Page == b.Page && a.IssuedAt == b.IssuedAt &&
		bytes.Equal(a.Session, b.Session) && bytes.Equal(a.State, b.State)
}

// bodyWire converts a body to encode to the fxamacker struct.
func bodyWire(b *cursorBody) cursorWire {
	return cursorWire{
		Version:  uint(b.version),
		Tool:     b.tool,
		Caller:   b.caller,
		Args:     b.args,
		Page:     b.page,
		IssuedAt: b.issued,
		Session:  b.session,
		State:    b.state,
	}
}

// checkCursorDecode is the decode-direction property for one input.
func checkCursorDecode(t *testing.T, in []byte) {
	t.Helper()
	f, handOK := decodeCursorBody(in)

	var w cursorWire
	fxOK := cursorDecMode.Unmarshal(in, &w) == nil
	canonical := false
	if fxOK {
		// The issuer's session is never nil, so the encoder always writes
		// a byte string there; fxamacker would write a nil one as null.
		norm := w
		if norm.Session == nil {
			norm.Session = []byte{}
		}
		re, err := cursorEncMode.Marshal(&norm)
		canonical = err == nil && bytes.Equal(re, in)
	}
	if handOK != canonical {
		t.Fatalf("input %x: hand decoder ok=%v, fxamacker ok=%v canonical=%v", in, handOK, fxOK, canonical)
	}
	if !handOK {
		if f.tool != nil || f.session != nil || f.version != 0 {
			t.Fatalf("input %x: rejected but fields not zero", in)
		}
		return
	}
	if got := wireOf(&f); !sameWire(got, w) {
		t.Fatalf("input %x: hand decoded %+v, fxamacker %+v", in, got, w)
	}
}

// checkCursorEncode is the encode-direction property for one payload, plus
// the round trip through the hand decoder.
func checkCursorEncode(t *testing.T, f cursorBody) {
	t.Helper()
	if !utf8.ValidString(f.tool) || !utf8.ValidString(f.caller) {
		return // Issue refuses these before encoding
	}
	if f.session == nil {
		f.session = []byte{} // the issuer's session is never nil
	}
	w := bodyWire(&f)
	if len(w.Args) == 0 {
		w.Args = nil
	}
	want, err := cursorEncMode.Marshal(&w)
	if err != nil {
		t.Fatalf("fxamacker: %v", err)
	}
	got := appendCursorBody([]byte("prefix"), &f)
	if !bytes.Equal(got[len("prefix"):], want) {
		t.Fatalf("payload %+v:\n hand      %x\n fxamacker %x", w, got[len("prefix"):], want)
	}
	if n := cursorBodyLen(&f); n != len(want) {
		t.Fatalf("cursorBodyLen = %d, encoding is %d bytes", n, len(want))
	}
	back, ok := decodeCursorBody(want)
	if !ok || !sameWire(wireOf(&back), w) {
		t.Fatalf("round trip of %x failed: ok=%v %+v", want, ok, wireOf(&back))
	}
}

// cursorBodySeeds are canonical bodies and near misses of each kind the
// decoder refuses.
func cursorBodySeeds() [][]byte {
	full := appendCursorBody(nil, &cursorBody{
		version: 1, tool: "search_issues", caller: "user:1",
		args: bytes.Repeat([]byte{7}, 32), page: 3, issued: 1_700_000_000,
		session: []byte("sess0001"), state: []byte{1, 2, 3},
	})
	minimal := appendCursorBody(nil, &cursorBody{version: 1, session: []byte{}, issued: -5})
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
	for _, s := range cursorBodySeeds() {
		f.Add(s)
	}
	f.Fuzz(checkCursorDecode)
}

func FuzzCursorCBOREncode(f *testing.F) {
	f.Add("search_issues", "user:1", bytes.Repeat([]byte{7}, 32), uint64(1), uint32(3), int64(1_700_000_000), []byte("sess0001"), []byte{1, 2, 3})
	f.Add("", "", []byte{}, uint64(0), uint32(0), int64(0), []byte{}, []byte{})
	f.Add("é", "\u2603", []byte{1}, uint64(math.MaxUint64), uint32(math.MaxUint32), int64(math.MinInt64), bytes.Repeat([]byte{1}, 300), bytes.Repeat([]byte{2}, 70000))
	f.Add("x", "y", []byte(nil), uint64(24), uint32(256), int64(-25), []byte(nil), []byte(nil))
	f.Add("x", "y", []byte{0}, uint64(65536), uint32(65535), int64(math.MaxInt64), []byte{0}, []byte{0})
	f.Fuzz(func(t *testing.T, tool, caller string, args []byte, version uint64, page uint32, issued int64, session, state []byte) {
		checkCursorEncode(t, cursorBody{
			version: version, tool: tool, caller: caller, args: args,
			page: page, issued: issued, session: session, state: state,
		})
	})
}

// TestCursorCodecMatchesFxamacker runs both properties over the seeds and
// over every single-byte mutation of a canonical body, so the differential
// check runs in plain `go test` too.
func TestCursorCodecMatchesFxamacker(t *testing.T) {
	for _, s := range cursorBodySeeds() {
		checkCursorDecode(t, s)
	}
	body := cursorBodySeeds()[0]
	for i := range body {
		for _, delta := range []byte{1, 0x20, 0x80, 0xff} {
			m := append([]byte(nil), body...)
			m[i] += delta
			checkCursorDecode(t, m)
		}
		checkCursorDecode(t, body[:i])
	}
	for _, n := range []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, math.MaxUint64} {
		checkCursorEncode(t, cursorBody{
			version: n, tool: strings.Repeat("t", int(n%300)), caller: "c",
			args: bytes.Repeat([]byte{1}, int(n%40)), page: uint32(n), issued: -int64(n >> 1),
			session: []byte("s"), state: bytes.Repeat([]byte{2}, int(n%257)),
		})
	}
}
