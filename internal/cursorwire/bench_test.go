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

// BenchmarkV2Decode measures DecodeV2 on the body of a signed cursor
// with 64 bytes of state (the root benchmarks' cursor), beside decodeMap,
// the generic reader it was before (the with/without of its straight-line
// reading).
func BenchmarkV2Decode(b *testing.B) {
	enc := AppendV2(nil, &benchBody)
	b.Run("straight", func(b *testing.B) {
		for b.Loop() {
			if _, ok := DecodeV2(enc); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("decodeMap", func(b *testing.B) {
		const required = 1<<KeyVersion | 1<<KeyKeyID | 1<<KeyPage | 1<<KeyIssued | 1<<KeySession
		for b.Loop() {
			if _, n, ok := decodeMap(enc, required|1<<KeyState, required); !ok || n != len(enc) {
				b.Fatal("refused")
			}
		}
	})
}
