package cursorwire

import (
	"bytes"
	"testing"
)

// benchBody is the signed body of the root benchmarks' cursor: 64 bytes of
// state.
var benchBody = BodyV2{Version: Version, KeyID: []byte{1, 2, 3, 4}, Page: 3, Issued: 1_790_000_000,
	Session: bytes.Repeat([]byte{0x5a}, SessionTagSize), State: bytes.Repeat([]byte{0xa5}, 64)}

// BenchmarkBodyCodec measures the hand-written codec (AppendV2, DecodeV2)
// beside fxamacker/cbor doing the same work with the modes the
// differential tests hold it to: the "with/without" numbers for keeping a
// hand codec. Each pair produces or reads the same bytes.
func BenchmarkBodyCodec(b *testing.B) {
	enc := AppendV2(nil, &benchBody)
	wire := PayloadV2{Version: benchBody.Version, KeyID: benchBody.KeyID, Page: uint64(benchBody.Page),
		IssuedAt: benchBody.Issued, Session: benchBody.Session, State: benchBody.State}
	if got, err := encMode.Marshal(&wire); err != nil || !bytes.Equal(got, enc) {
		b.Fatal("the two encoders disagree")
	}
	b.Run("encode/hand", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			buf = AppendV2(buf[:0], &benchBody)
		}
	})
	b.Run("encode/fxamacker", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encMode.Marshal(&wire); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := DecodeV2(enc); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("decode/fxamacker", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p PayloadV2
			if err := decMode.Unmarshal(enc, &p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
