package redisstore

import (
	"crypto/fips140"
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

// TestScriptDigestsAreTheScriptsSHA1 checks the EVALSHA names against the
// scripts. Under GODEBUG=fips140=only crypto/sha1 refuses to run (the reason
// the digests are constants), so there the test asserts that refusal instead.
func TestScriptDigestsAreTheScriptsSHA1(t *testing.T) {
	for _, s := range []script{claimLua, acquireLua, confirmLua, releaseLua, cancelLua} {
		got, refused := sha1Hex(s.src)
		if refused {
			if !fips140.Enabled() {
				t.Fatal("crypto/sha1 refused to run outside FIPS 140-3 mode")
			}
			continue
		}
		if got != s.sha {
			t.Errorf("script digest %s, want SHA-1 %s of\n%s", s.sha, got, s.src)
		}
	}
}

func sha1Hex(src string) (digest string, refused bool) {
	defer func() {
		if recover() != nil {
			refused = true
		}
	}()
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:]), false
}
