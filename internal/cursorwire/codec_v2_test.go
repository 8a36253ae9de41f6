package cursorwire

import (
	"bytes"
	"math"
	"testing"
)

// Differential tests of the signed and sealed codecs (codec_v2.go)
// against fxamacker/cbor, with codec_test.go's modes: the hand
// decoders accept an input exactly when the strict decMode decodes it into
// the matching struct and re-encoding it gives back the input, and the
// encoders write byte for byte what encMode writes.

// v2Layouts are the three maps of codec_v2.go: the hand decoder and how
// fxamacker decodes and re-encodes the same input.
var v2Layouts = []struct {
	name string
	hand func([]byte) (Fields, bool)
	fx   func([]byte) (Fields, []byte, bool)
}{
	{"v2", DecodeV2, func(in []byte) (Fields, []byte, bool) {
		var w PayloadV2
		if decMode.Unmarshal(in, &w) != nil || w.Page > math.MaxUint32 {
			return Fields{}, nil, false
		}
		norm := w
		if norm.Session == nil {
			norm.Session = []byte{}
		}
		re, err := encMode.Marshal(&norm)
		if len(w.KeyID) != KeyIDSize {
			return Fields{}, nil, false // the decoder's one check of a value's size
		}
		return Fields{Version: w.Version, KeyID: w.KeyID, Page: uint32(w.Page), Issued: w.IssuedAt, Session: w.Session, State: w.State}, re, err == nil
	}},
	{"sealed header", func(in []byte) (Fields, bool) {
		f, n, ok := DecodeSealedHeader(in)
		if !ok || n != len(in) {
			return Fields{}, false // a prefix is checked whole here
		}
		return f, true
	}, func(in []byte) (Fields, []byte, bool) {
		var w SealedHeader
		if decMode.Unmarshal(in, &w) != nil {
			return Fields{}, nil, false
		}
		norm := w
		if norm.Session == nil {
			norm.Session = []byte{}
		}
		re, err := encMode.Marshal(&norm)
		if len(w.KeyID) != KeyIDSize {
			return Fields{}, nil, false
		}
		return Fields{Version: w.Version, KeyID: w.KeyID, Issued: w.IssuedAt, Session: w.Session}, re, err == nil
	}},
	{"sealed inner", func(in []byte) (Fields, bool) {
		page, state, n, ok := decodeInnerMap(in)
		if !ok || n != len(in) {
			return Fields{}, false // the map alone; padding: TestSealedInnerPadding
		}
		return Fields{Page: page, State: state}, true
	}, func(in []byte) (Fields, []byte, bool) {
		var w SealedInner
		if decMode.Unmarshal(in, &w) != nil || w.Page > math.MaxUint32 {
			return Fields{}, nil, false
		}
		re, err := encMode.Marshal(&w)
		return Fields{Page: uint32(w.Page), State: w.State}, re, err == nil
	}},
}

func sameFields(a, b Fields) bool {
	return a.Version == b.Version && bytes.Equal(a.KeyID, b.KeyID) && a.Page == b.Page && a.Issued == b.Issued &&
		bytes.Equal(a.Session, b.Session) && bytes.Equal(a.State, b.State)
}

// checkDecodeV2 is the decode-direction property of every layout for in.
func checkDecodeV2(t *testing.T, in []byte) {
	t.Helper()
	for _, l := range v2Layouts {
		f, handOK := l.hand(in)
		w, re, fxOK := l.fx(in)
		canonical := fxOK && bytes.Equal(re, in)
		if handOK != canonical {
			t.Fatalf("%s: input %x: hand decoder ok=%v, fxamacker ok=%v canonical=%v", l.name, in, handOK, fxOK, canonical)
		}
		if !handOK {
			if !sameFields(f, Fields{}) {
				t.Fatalf("%s: input %x: refused but fields not zero", l.name, in)
			}
			continue
		}
		if !sameFields(f, w) {
			t.Fatalf("%s: input %x: hand decoded %+v, fxamacker %+v", l.name, in, f, w)
		}
	}
}

// checkEncodeV2 is the encode-direction property of every layout.
func checkEncodeV2(t *testing.T, b BodyV2) {
	t.Helper()
	if b.Session == nil {
		b.Session = []byte{}
	}
	if b.KeyID == nil {
		b.KeyID = []byte{}
	}
	w := PayloadV2{Version: b.Version, KeyID: b.KeyID, Page: uint64(b.Page), IssuedAt: b.Issued, Session: b.Session, State: b.State}
	if len(w.State) == 0 {
		w.State = nil
	}
	encodings := []struct {
		name      string
		hand      []byte
		handLen   int
		fxOf      any
		roundTrip func([]byte) (Fields, bool)
		want      Fields
	}{
		{"v2", AppendV2([]byte("prefix"), &b), V2Len(&b), &w, v2Layouts[0].hand,
			Fields{Version: b.Version, KeyID: b.KeyID, Page: b.Page, Issued: b.Issued, Session: b.Session, State: w.State}},
		{"sealed header", AppendSealedHeader([]byte("prefix"), b.Version, b.KeyID, b.Issued, b.Session), SealedHeaderLen(b.Version, b.KeyID, b.Issued, b.Session),
			&SealedHeader{Version: b.Version, KeyID: b.KeyID, IssuedAt: b.Issued, Session: b.Session}, v2Layouts[1].hand,
			Fields{Version: b.Version, KeyID: b.KeyID, Issued: b.Issued, Session: b.Session}},
		{"sealed inner", appendInnerMap([]byte("prefix"), b.Page, b.State), SealedInnerLen(b.Page, b.State),
			&SealedInner{Page: uint64(b.Page), State: w.State}, v2Layouts[2].hand, Fields{Page: b.Page, State: w.State}},
	}
	for _, e := range encodings {
		want, err := encMode.Marshal(e.fxOf)
		if err != nil {
			t.Fatalf("%s: fxamacker: %v", e.name, err)
		}
		got := e.hand[len("prefix"):]
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %+v:\n hand      %x\n fxamacker %x", e.name, b, got, want)
		}
		if e.handLen != len(want) {
			t.Fatalf("%s: length function says %d, encoding is %d bytes", e.name, e.handLen, len(want))
		}
		back, ok := e.roundTrip(want)
		if len(b.KeyID) != KeyIDSize && e.name != "sealed inner" {
			ok, back = !ok, e.want // a key id of another size encodes but never decodes
		}
		if !ok || !sameFields(back, e.want) {
			t.Fatalf("%s: round trip of %x failed: ok=%v %+v", e.name, want, ok, back)
		}
	}
}

// v2Seeds are canonical maps of each layout and near misses.
func v2Seeds() [][]byte {
	kid := []byte{1, 2, 3, 4}
	full := AppendV2(nil, &BodyV2{Version: 2, KeyID: kid, Page: 3, Issued: 1_700_000_000,
		Session: []byte("tag00001"), State: []byte{1, 2, 3}})
	minimal := AppendV2(nil, &BodyV2{Version: 2, KeyID: kid, Issued: -5, Session: []byte{}})
	header := AppendSealedHeader(nil, 3, kid, 1_700_000_000, []byte("tag00001"))
	inner := appendInnerMap(nil, 70_000, bytes.Repeat([]byte{4}, 300))
	return [][]byte{
		full, minimal, header, inner, appendInnerMap(nil, 0, nil),
		append(append([]byte(nil), full...), 0), full[:len(full)-1],
		append(append([]byte(nil), header...), 0, 1, 2),
		{0xa2, 0x05, 0x00, 0x08, 0x40},                                                             // inner: empty state present
		{0xa1, 0x08, 0x41, 0x00},                                                                   // inner: page missing
		{0xa2, 0x05, 0x00, 0x09, 0x40},                                                             // inner: key 9
		{0xa4, 0x01, 0x03, 0x02, 0x44, 1, 2, 3, 4, 0x06, 0x00, 0x07},                               // header cut in the session
		{0xa4, 0x01, 0x03, 0x02, 0x44, 1, 2, 3, 4, 0x07, 0x40, 0x06, 0x00},                         // header out of order
		{0xa4, 0x01, 0x03, 0x02, 0x43, 1, 2, 3, 0x06, 0x00, 0x07, 0x40},                            // header: 3-byte key id
		{0xa5, 0x01, 0x02, 0x02, 0x44, 1, 2, 3, 4, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40},             // canonical minimal
		{0xa5, 0x01, 0x02, 0x02, 0x45, 1, 2, 3, 4, 5, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40},          // 5-byte key id
		{0xa5, 0x01, 0x02, 0x02, 0x40, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40, 0x08, 0x41, 0x00},       // empty key id
		{0xa5, 0x01, 0x02, 0x02, 0x64, 'a', 'b', 'c', 'd', 0x05, 0x00, 0x06, 0x00, 0x07, 0x40},     // text key id
		{0xa6, 0x01, 0x02, 0x02, 0x44, 1, 2, 3, 4, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40, 0x08, 0xf6}, // null state
		{0xa6, 0x01, 0x02, 0x02, 0x44, 1, 2, 3, 4, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40, 0x09, 0x40}, // key 9
		{0xa4, 0x01, 0x02, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40},                                     // no key id
		{0xa6, 0x01, 0x02, 0x02, 0x44, 1, 2, 3, 4, 0x03, 0x60, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40}, // key 3 (a caller, never released)
		// DecodeV2 reads the keys in order: a value head that fails but is
		// followed by the next key is still refused, in each position.
		{0xa5, 0x01, 0x18, 0x02, 0x02, 0x44, 1, 2, 3, 4, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40},       // version head not minimal
		{0xa5, 0x01, 0x02, 0x02, 0x58, 0x04, 1, 2, 3, 4, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40},       // key id head not minimal
		{0xa5, 0x01, 0x02, 0x02, 0x44, 1, 2, 3, 4, 0x05, 0x18, 0x03, 0x06, 0x00, 0x07, 0x40},       // page head not minimal
		{0xa5, 0x01, 0x02, 0x02, 0x44, 1, 2, 3, 4, 0x05, 0x1c, 0x06, 0x00, 0x07, 0x40},             // page head reserved
		{0xa5, 0x01, 0x02, 0x02, 0x44, 1, 2, 3, 4, 0x05, 0x00, 0x06, 0x18, 0x05, 0x07, 0x40},       // issued head not minimal
		{0xa5, 0x01, 0x02, 0x02, 0x44, 1, 2, 3, 4, 0x05, 0x00, 0x06, 0x00, 0x07, 0x58, 0x00},       // session head not minimal
		{0xa6, 0x01, 0x02, 0x02, 0x44, 1, 2, 3, 4, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40, 0x08, 0x40}, // empty state present
		{0xa6, 0x01, 0x02, 0x02, 0x44, 1, 2, 3, 4, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40},             // 6 pairs, state missing
		{}, {0xa0}, {0xf6},
	}
}

func FuzzCursorV2Decode(f *testing.F) {
	for _, s := range v2Seeds() {
		f.Add(s)
	}
	f.Fuzz(checkDecodeV2)
}

func FuzzCursorV2Encode(f *testing.F) {
	f.Add(uint64(2), []byte{1, 2, 3, 4}, uint32(3), int64(1_700_000_000), []byte("tag00001"), []byte{1, 2, 3})
	f.Add(uint64(0), []byte{}, uint32(0), int64(0), []byte{}, []byte{})
	f.Add(uint64(math.MaxUint64), []byte{9, 9, 9}, uint32(math.MaxUint32), int64(math.MinInt64), bytes.Repeat([]byte{1}, 300), bytes.Repeat([]byte{2}, 70000))
	f.Fuzz(func(t *testing.T, version uint64, keyID []byte, page uint32, issued int64, session, state []byte) {
		checkEncodeV2(t, BodyV2{Version: version, KeyID: keyID, Page: page, Issued: issued, Session: session, State: state})
	})
}

// TestCursorV2CodecMatchesFxamacker runs both properties over the seeds and
// every single-byte mutation and truncation of each canonical seed, in
// plain `go test`.
func TestCursorV2CodecMatchesFxamacker(t *testing.T) {
	for _, s := range v2Seeds() {
		checkDecodeV2(t, s)
	}
	for _, body := range v2Seeds()[:5] {
		for i := range body {
			for _, delta := range []byte{1, 0x20, 0x80, 0xff} {
				m := append([]byte(nil), body...)
				m[i] += delta
				checkDecodeV2(t, m)
			}
			checkDecodeV2(t, body[:i])
		}
	}
	for _, n := range []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, math.MaxUint64} {
		checkEncodeV2(t, BodyV2{Version: n, KeyID: []byte{byte(n), 2, 3, 4}, Page: uint32(n), Issued: -int64(n >> 1),
			Session: bytes.Repeat([]byte{3}, int(n%70)), State: bytes.Repeat([]byte{2}, int(n%257))})
	}
}

// TestSealedInnerPadding: the plaintext of a sealed cursor is its map and
// zero bytes to exactly SealedPlaintextLen of its state, so its length says
// only the class of the state's length (states of 0 to 256 bytes fall into
// 5 classes) and nothing of the page, and it has one spelling.
func TestSealedInnerPadding(t *testing.T) {
	t.Run("classes", func(t *testing.T) {
		classes := map[int]bool{}
		for n := 0; n <= 256; n++ {
			var first int
			for _, page := range []uint32{0, 23, 24, 255, 256, 65535, 65536, math.MaxUint32} {
				pt := AppendSealedInner(nil, page, bytes.Repeat([]byte{7}, n))
				if first == 0 {
					first = len(pt)
				} else if len(pt) != first {
					t.Fatalf("state %d: page %d pads to %d bytes, page 0 to %d", n, page, len(pt), first)
				}
				classes[len(pt)] = true
				gotPage, state, ok := DecodeSealedInner(pt)
				if !ok || gotPage != page || len(state) != n {
					t.Fatalf("state %d page %d: round trip %v %d %x", n, page, ok, gotPage, state)
				}
			}
		}
		if len(classes) != 5 || !classes[PadBlock] || !classes[MaxPadded] {
			t.Fatalf("padded lengths %v, want the 5 classes 64..256 and 288", classes)
		}
	})
	t.Run("refusals", func(t *testing.T) {
		good := AppendSealedInner(nil, 3, []byte("state"))
		for _, tc := range []struct {
			name string
			in   []byte
		}{
			{"no padding", appendInnerMap(nil, 3, []byte("state"))},
			{"one byte short", good[:len(good)-1]},
			{"one byte more", append(append([]byte(nil), good...), 0)},
			{"a padding byte not zero", append(append([]byte(nil), good[:len(good)-1]...), 1)},
			{"a whole block more", append(append([]byte(nil), good...), make([]byte, PadBlock)...)},
			{"over MaxPadded", append(appendInnerMap(nil, 3, bytes.Repeat([]byte{1}, 290)), make([]byte, 0)...)},
			{"empty", nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if page, state, ok := DecodeSealedInner(tc.in); ok || page != 0 || state != nil {
					t.Fatalf("accepted %x", tc.in)
				}
			})
		}
		if _, ok := PaddedLen(MaxPadded + 1); ok {
			t.Fatal("PaddedLen accepted a map over MaxPadded")
		}
	})
}

// TestReadPrefix: the layout and key id are read at fixed positions, and
// nothing but the two layouts' prefixes is accepted.
func TestReadPrefix(t *testing.T) {
	kid := []byte{9, 8, 7, 6}
	signed := AppendV2(nil, &BodyV2{Version: Version, KeyID: kid, Session: make([]byte, SessionTagSize)})
	withState := AppendV2(nil, &BodyV2{Version: Version, KeyID: kid, Session: make([]byte, SessionTagSize), State: []byte{1}})
	sealed := AppendSealedHeader(nil, VersionSealed, kid, 5, make([]byte, SessionTagSize))
	for _, tc := range []struct {
		name    string
		in      []byte
		version byte
	}{
		{"signed", signed, Version},
		{"signed with state", withState, Version},
		{"sealed", sealed, VersionSealed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, id, ok := ReadPrefix(tc.in)
			if !ok || v != tc.version || !bytes.Equal(id, kid) {
				t.Fatalf("ReadPrefix = %d %x %v", v, id, ok)
			}
		})
	}
	bad := func(in []byte, i int, b byte) []byte {
		out := append([]byte(nil), in...)
		out[i] = b
		return out
	}
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"short", signed[:PrefixLen-1]},
		{"signed header with 4 pairs", bad(signed, 0, 0xa4)},
		{"sealed header with 5 pairs", bad(sealed, 0, 0xa5)},
		{"version 1", bad(signed, 2, 1)},
		{"version 4", bad(signed, 2, 4)},
		{"key 1 missing", bad(signed, 1, 2)},
		{"key 2 missing", bad(signed, 3, 5)},
		{"3-byte key id", bad(signed, 4, 0x43)},
		{"text key id", bad(signed, 4, 0x64)},
		{"a cursor of the layout before key ids", []byte{0xa4, 0x01, 0x02, 0x05, 0x00, 0x06, 0x00, 0x07, 0x40}},
		{"a format 1 cursor", []byte{0xa6, 0x01, 0x01, 0x02, 0x61, 't', 0x03, 0x61, 'c', 0x05, 0x00}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, ok := ReadPrefix(tc.in); ok {
				t.Fatalf("accepted %x", tc.in)
			}
		})
	}
}
