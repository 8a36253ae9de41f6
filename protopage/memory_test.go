package protopage_test

import (
	"crypto/sha256"
	"runtime"
	"strings"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/internal/fingerprintpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestFingerprintOfALargeRequestTakesAtMostTwiceItsWireSize fingerprints
// 1 MiB requests a client can send: a packed list of zeros (1 wire byte an
// element, 8 in the encoding), which must take a small fraction of its
// size since the encoding is hashed as it is written, and unknown fields
// of alternating numbers, whose sort may take 4 bytes per record (at most
// twice the wire size). They took 48 and 70 times their wire size when
// the whole encoding was built before hashing and every unknown record
// had a 32-byte entry.
func TestFingerprintOfALargeRequestTakesAtMostTwiceItsWireSize(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation figures are not meaningful under -race (sync.Pool drops items at random); run without -race")
	}
	f := newFixture(t, protopage.Config{})
	const size = 1 << 20
	var unknown []byte
	for i := 0; len(unknown) < size; i++ {
		unknown = protowire.AppendVarint(protowire.AppendTag(unknown, protowire.Number(1000+i%2), protowire.VarintType), 0)
	}
	nested := &fingerprintpb.Nested{}
	nested.ProtoReflect().SetUnknown(unknown)
	for _, tc := range []struct {
		name string
		req  *fingerprintpb.Request
		max  float64 // allocated bytes per wire byte
	}{
		{"packed zeros", &fingerprintpb.Request{RInt32: make([]int32, size)}, 1.0 / 16},
		{"unknown fields out of order", &fingerprintpb.Request{FMessage: &fingerprintpb.Nested{Values: []int64{1}}, RMessage: []*fingerprintpb.Nested{nested}}, 2},
	} {
		req, wire := tc.req, proto.Size(tc.req)
		fingerprint(t, f.Pager, req) // warm the plans and the pool
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fingerprint(t, f.Pager, req)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		if float64(alloc) > tc.max*float64(wire) {
			t.Errorf("%s: %d bytes on the wire, the fingerprint allocated %d (at most %g a byte)", tc.name, wire, alloc, tc.max)
		} else {
			t.Logf("%s: %d bytes on the wire, the fingerprint allocated %d", tc.name, wire, alloc)
		}
	}
}

// TestFingerprintHashedAsWrittenIsTheHashOfTheWholeEncoding checks that
// hashing the encoding piece by piece (past the encoder's 16 KiB buffer:
// long strings and bytes, a long list, nested messages, unknown fields in
// and out of order) gives the SHA-256 of the encoding written whole.
func TestFingerprintHashedAsWrittenIsTheHashOfTheWholeEncoding(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	long := strings.Repeat("x", 40<<10+3)
	var inOrder, outOfOrder []byte
	for i := range 20000 {
		inOrder = protowire.AppendVarint(protowire.AppendTag(inOrder, 900, protowire.VarintType), uint64(i))
		outOfOrder = protowire.AppendVarint(protowire.AppendTag(outOfOrder, protowire.Number(900+i%3), protowire.VarintType), uint64(i))
	}
	withUnknown := func(u []byte) *fingerprintpb.Nested {
		n := &fingerprintpb.Nested{Name: long}
		n.ProtoReflect().SetUnknown(u)
		return n
	}
	for name, req := range map[string]*fingerprintpb.Request{
		"small":             {FString: "s"},
		"long string":       {FString: long},
		"long bytes":        {FBytes: []byte(long), FString: "after"},
		"long list":         {RInt32: make([]int32, 10000), FFar: "after"},
		"nested":            {RMessage: []*fingerprintpb.Nested{{Name: long}, {Values: make([]int64, 5000)}}},
		"unknown in order":  {FMessage: withUnknown(inOrder)},
		"unknown unordered": {FMessage: withUnknown(outOfOrder), MString: map[string]string{long: long}},
	} {
		input, err := protopage.FingerprintInput(f.Pager, req)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := fingerprint(t, f.Pager, req), ctoken.Fingerprint(sha256.Sum256(input)); got != want {
			t.Errorf("%s (%d bytes): hashed as written %x, whole %x", name, len(input), got, want)
		}
	}
}
