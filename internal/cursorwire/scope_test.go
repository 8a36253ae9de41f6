package cursorwire

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// parseScope reads a scope back: the test's proof that AppendScope is
// injective (a scope has exactly one reading, and it gives back the tool,
// the caller and the arguments it was written from).
func parseScope(in []byte) (tool, caller string, args []byte, ok bool) {
	rest, found := bytes.CutPrefix(in, []byte(ScopeLabel))
	if !found {
		return "", "", nil, false
	}
	str := func() (string, bool) {
		n, l := binary.Uvarint(rest)
		if l <= 0 || n > uint64(len(rest)-l) || l != uvarintLen(n) {
			return "", false
		}
		s := string(rest[l : l+int(n)])
		rest = rest[l+int(n):]
		return s, true
	}
	if tool, ok = str(); !ok {
		return "", "", nil, false
	}
	if caller, ok = str(); !ok {
		return "", "", nil, false
	}
	switch {
	case len(rest) == 1 && rest[0] == ScopeArgsUnbound:
		return tool, caller, nil, true
	case len(rest) == 33 && rest[0] == ScopeArgsBound:
		return tool, caller, rest[1:], true
	}
	return "", "", nil, false
}

// checkScope is the property of AppendScope for one scope: ScopeLen is its
// length, it starts with the label, and it reads back to exactly its input.
func checkScope(t *testing.T, tool, caller string, args []byte) {
	t.Helper()
	got := AppendScope([]byte("prefix"), tool, caller, args)[len("prefix"):]
	if n := ScopeLen(tool, caller, args); n != len(got) {
		t.Fatalf("ScopeLen = %d, AppendScope wrote %d bytes", n, len(got))
	}
	gt, gc, ga, ok := parseScope(got)
	if !ok || gt != tool || gc != caller || !bytes.Equal(ga, args) {
		t.Fatalf("scope %x of (%q, %q, %x) reads back as (%q, %q, %x, %v)", got, tool, caller, args, gt, gc, ga, ok)
	}
}

// TestScopeEncodingIsInjective pins the scope layout: label, uvarint
// lengths, the arguments marker, and that two scopes that differ anywhere,
// including where one string ends and the next begins, have different
// encodings.
func TestScopeEncodingIsInjective(t *testing.T) {
	fp := bytes.Repeat([]byte{0xab}, 32)
	t.Run("known answer", func(t *testing.T) {
		got := AppendScope(nil, "search", "alice", nil)
		want := append([]byte("ctoken.scope\x00\x06search\x05alice"), 0x00)
		if !bytes.Equal(got, want) {
			t.Fatalf("got %x, want %x", got, want)
		}
		got = AppendScope(nil, "", "", fp)
		want = append([]byte("ctoken.scope\x00\x00\x00\x01"), fp...)
		if !bytes.Equal(got, want) {
			t.Fatalf("got %x, want %x", got, want)
		}
	})
	t.Run("round trip", func(t *testing.T) {
		long := strings.Repeat("c", 1024)
		for _, c := range []struct {
			tool, caller string
			args         []byte
		}{
			{"", "", nil}, {"", "", fp}, {"t", "c", nil}, {"\xff\xfe", "\x00", fp},
			{strings.Repeat("t", 127), strings.Repeat("c", 128), fp}, {"tool", long, nil},
		} {
			checkScope(t, c.tool, c.caller, c.args)
		}
	})
	t.Run("boundaries differ", func(t *testing.T) {
		pairs := [][2][]byte{
			{AppendScope(nil, "ab", "c", nil), AppendScope(nil, "a", "bc", nil)},
			{AppendScope(nil, "", "ab", nil), AppendScope(nil, "ab", "", nil)},
			{AppendScope(nil, "t", "c", nil), AppendScope(nil, "t", "c", make([]byte, 32))},
			{AppendScope(nil, "t", "c\x00", nil), AppendScope(nil, "t", "c", nil)},
		}
		for i, p := range pairs {
			if bytes.Equal(p[0], p[1]) {
				t.Errorf("pair %d: both scopes encode as %x", i, p[0])
			}
		}
	})
}

func FuzzScope(f *testing.F) {
	f.Add("search", "alice", []byte(nil))
	f.Add("", strings.Repeat("c", 300), bytes.Repeat([]byte{1}, 32))
	f.Add("\xff", "", []byte{0})
	f.Fuzz(func(t *testing.T, tool, caller string, args []byte) {
		if len(args) != 0 && len(args) != 32 {
			args = append(make([]byte, 32), args...)[len(args):] // a fingerprint is 32 bytes
		}
		checkScope(t, tool, caller, args)
		// Any other input never reads as a scope of other values.
		if gt, gc, ga, ok := parseScope(append(AppendScope(nil, tool, caller, args), 0)); ok {
			t.Fatalf("a scope with a byte after it reads as (%q, %q, %x)", gt, gc, ga)
		}
	})
}
