package cursorwire

import (
	"bytes"
	"testing"
)

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
