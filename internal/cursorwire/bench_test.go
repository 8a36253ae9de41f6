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
