package mac

import (
	"crypto/fips140"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

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
