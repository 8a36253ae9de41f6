package mac

import (
	"bytes"
	"crypto/fips140"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

func reference(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}

func mustKey(t testing.TB, key []byte) *Key {
	t.Helper()
	k, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSumMatchesCryptoHMAC(t *testing.T) {
	key := []byte("a key of thirty-two bytes, exact")
	k := mustKey(t, key)
	for _, msg := range []string{"", "x", strings.Repeat("long message ", 100)} {
		want := reference(key, []byte(msg))
		if got := k.Sum([]byte("prefix"), []byte(msg)); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("Sum(%q) = %x, want prefix+%x", msg, got, want)
		}
		if !k.Equal([]byte(msg), want) {
			t.Fatalf("Equal(%q, genuine tag) = false", msg)
		}
	}
}

func TestEqualRejectsWrongTagsAndLengths(t *testing.T) {
	key := []byte("a key of thirty-two bytes, exact")
	k := mustKey(t, key)
	tag := reference(key, []byte("msg"))
	for _, bad := range [][]byte{nil, tag[:31], append(append([]byte(nil), tag...), 0), func() []byte {
		b := append([]byte(nil), tag...)
		b[31] ^= 1
		return b
	}()} {
		if k.Equal([]byte("msg"), bad) {
			t.Fatalf("Equal accepted %x", bad)
		}
	}
}

func TestMultiPartMessageEqualsConcatenation(t *testing.T) {
	key := []byte("a key of thirty-two bytes, exact")
	k := mustKey(t, key)
	long := strings.Repeat("0123456789", 30) // spans several scratch buffers
	st := k.Begin()
	st.WriteString(long)
	st.WriteByte('.')
	st.Write([]byte("body"))
	got := *st.Tag()
	k.End(st)
	want := reference(key, []byte(long+".body"))
	if !bytes.Equal(got[:], want) {
		t.Fatalf("multi-part tag %x, want %x", got, want)
	}
	// A pooled state is reset by Begin.
	st = k.Begin()
	st.WriteString("x")
	ok := st.Equal(reference(key, []byte("x")))
	k.End(st)
	if !ok {
		t.Fatal("reused state not reset")
	}
}

func TestNewCopiesKey(t *testing.T) {
	key := []byte("a key of thirty-two bytes, exact")
	k := mustKey(t, key)
	want := reference(key, []byte("m"))
	key[0] ^= 0xff
	if !k.Equal([]byte("m"), want) {
		t.Fatal("Key changed with its caller's slice")
	}
}

func TestKeyPrintsNoKeyBytes(t *testing.T) {
	key := []byte("SECRET-KEY-BYTES-0123456789abcdef")
	k := mustKey(t, key)
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%x"} {
		if out := fmt.Sprintf(f, k); strings.Contains(out, "SECRET") || strings.Contains(out, fmt.Sprintf("%x", key[:8])) {
			t.Fatalf("%s prints key bytes: %s", f, out)
		}
	}
}

func TestNewRefusesShortKeysOnlyInFIPSMode(t *testing.T) {
	for _, n := range []int{0, 1, MinFIPSKeyBytes - 1, MinFIPSKeyBytes, 32} {
		k, err := New(make([]byte, n))
		if fips140.Enabled() && n < MinFIPSKeyBytes {
			if k != nil || !errors.Is(err, ErrKeyTooShortFIPS) || !strings.Contains(err.Error(), "FIPS 140-3 mode") {
				t.Fatalf("FIPS mode, %d-byte key: %v, %v; want ErrKeyTooShortFIPS", n, k, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%d-byte key: %v", n, err)
		}
		k.Equal([]byte("m"), nil) // must not panic
	}
}

func TestConcurrentUseIsRaceFree(t *testing.T) {
	key := []byte("a key of thirty-two bytes, exact")
	k := mustKey(t, key)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := []byte{byte(i)}
			want := reference(key, msg)
			for range 200 {
				if !k.Equal(msg, want) {
					t.Error("mismatch under concurrency")
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestEqualDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	key := []byte("a key of thirty-two bytes, exact")
	k := mustKey(t, key)
	msg, tag := []byte("msg"), reference(key, []byte("msg"))
	k.Equal(msg, tag)
	if n := testing.AllocsPerRun(100, func() {
		st := k.Begin()
		st.WriteString("id")
		st.Write(msg)
		st.Equal(tag)
		k.End(st)
	}); n != 0 {
		t.Fatalf("allocs = %v", n)
	}
}

// fipsChildEnv marks the run of TestNewFIPSBoundaryInAFIPSProcess that the
// test starts in a child process with GODEBUG=fips140=on.
const fipsChildEnv = "CTOKEN_MAC_FIPS_CHILD"

// Kills mac.go `len(key) < MinFIPSKeyBytes` (→ `<=`, and negated), which an
// ordinary test process never evaluates: in FIPS 140-3 mode a key one byte
// under MinFIPSKeyBytes is refused and a key of exactly MinFIPSKeyBytes is
// accepted. The test re-runs itself in a child process with
// GODEBUG=fips140=on, unless it already runs in FIPS mode.
func TestNewFIPSBoundaryInAFIPSProcess(t *testing.T) {
	if fips140.Enabled() {
		if _, err := New(make([]byte, MinFIPSKeyBytes-1)); !errors.Is(err, ErrKeyTooShortFIPS) {
			t.Fatalf("FIPS mode, %d-byte key: %v, want ErrKeyTooShortFIPS", MinFIPSKeyBytes-1, err)
		}
		k, err := New(make([]byte, MinFIPSKeyBytes))
		if err != nil {
			t.Fatalf("FIPS mode, %d-byte key: %v, want accepted", MinFIPSKeyBytes, err)
		}
		if len(k.Sum(nil, []byte("m"))) != Size {
			t.Fatal("FIPS mode: a key of MinFIPSKeyBytes does not sum")
		}
		return
	}
	if os.Getenv(fipsChildEnv) != "" {
		t.Fatal("child process started with GODEBUG=fips140=on is not in FIPS mode")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNewFIPSBoundaryInAFIPSProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=on", fipsChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child in FIPS mode failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestNewFIPSBoundaryInAFIPSProcess") {
		t.Fatalf("child in FIPS mode did not run the test:\n%s", out)
	}
}
