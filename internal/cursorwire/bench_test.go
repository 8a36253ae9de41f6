package cursorwire

import (
	"bytes"
	"testing"
)

// benchBody is a cursor body of the size the root benchmarks issue: a
// tool, a caller, a 32-byte args fingerprint, a 16-byte session and no
// state.
var benchBody = Body{
	Version: 1,
	Tool:    "search_issues",
	Caller:  "user-42",
	Args:    bytes.Repeat([]byte{0xa5}, 32),
	Page:    3,
	Issued:  1_790_000_000,
	Session: bytes.Repeat([]byte{0x5a}, 16),
}

// BenchmarkBodyCodec measures the hand-written codec (AppendBody,
// DecodeBody) beside fxamacker/cbor doing the same work with the modes the
// differential tests hold it to: the "with/without" numbers for keeping a
// hand codec. Each pair produces or reads the same bytes.
func BenchmarkBodyCodec(b *testing.B) {
	enc := AppendBody(nil, &benchBody)
	if got, err := encMode.Marshal(bodyWire(&benchBody)); err != nil || !bytes.Equal(got, enc) {
		b.Fatal("the two encoders disagree")
	}
	b.Run("encode/hand", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			buf = AppendBody(buf[:0], &benchBody)
		}
	})
	b.Run("encode/fxamacker", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encMode.Marshal(bodyWire(&benchBody)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := DecodeBody(enc); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("decode/fxamacker", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p Payload
			if err := decMode.Unmarshal(enc, &p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkV2Decode measures DecodeV2 on the body of a version 2 cursor
// with 64 bytes of state (the root benchmarks' cursor), beside decodeMap,
// the generic reader it was before (the with/without of its straight-line
// reading).
func BenchmarkV2Decode(b *testing.B) {
	enc := AppendV2(nil, &BodyV2{Version: Version, Page: 3, Issued: 1_790_000_000,
		Session: bytes.Repeat([]byte{0x5a}, SessionTagSize), State: bytes.Repeat([]byte{0xa5}, 64)})
	b.Run("straight", func(b *testing.B) {
		for b.Loop() {
			if _, ok := DecodeV2(enc); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("decodeMap", func(b *testing.B) {
		const required = 1<<KeyVersion | 1<<KeyPage | 1<<KeyIssued | 1<<KeySession
		for b.Loop() {
			if _, n, ok := decodeMap(enc, required|1<<KeyState, required); !ok || n != len(enc) {
				b.Fatal("refused")
			}
		}
	})
}
