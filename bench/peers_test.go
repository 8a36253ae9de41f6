// Package bench compares ctoken's cursors with the libraries a Go server
// would otherwise use for the same job, on one identical logical cursor, and
// with the two floors: what the bare primitives cost on the same bytes.
//
// Every implementation issues and verifies the same content: tool
// "search_issues", a 41-character caller ID, a 32-byte args fingerprint,
// page 3, 64 bytes of opaque state, an issued-at time and an expiry (either
// an explicit exp claim or issued-at plus a TTL checked at verify, in each
// library's idiom). Verify includes what a server must check before using
// the cursor: authenticity, expiry, and that tool, caller and args match the
// current request. ctoken additionally carries and checks a server session.
//
// Run ./run.sh for the markdown table. No benchmark asserts on time.
package bench

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"runtime"
	"testing"
	"time"

	"aidanwoods.dev/go-paseto"
	"github.com/ctoken/ctoken"
	"github.com/fernet/fernet-go"
	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/securecookie"
	"github.com/tink-crypto/tink-go/v2/aead"
	"github.com/tink-crypto/tink-go/v2/keyset"
	"github.com/tink-crypto/tink-go/v2/tink"
)

// The logical cursor.
var (
	tool   = "search_issues"
	caller = "user:7f3c9a12-4b8e-4d2a-9c1f-5e6b7a8c9d0e" // 41 characters
	args   = ctoken.Fingerprint(sha256.Sum256([]byte(`{"query":"is:open label:bug","per_page":50}`)))
	page   = uint32(3)
	state  = bytes.Repeat([]byte{0xa5}, 64)
	ttl    = 5 * time.Minute
	scope  = ctoken.CursorScope{ToolID: tool, CallerID: caller, Args: args}
)

// Fixed keys, so runs are comparable.
var (
	key32  = bytes.Repeat([]byte{0x5a}, 32)
	key32b = bytes.Repeat([]byte{0xa5}, 32)
)

var b64 = base64.RawURLEncoding

var errScope = errors.New("cursor scope mismatch")

// claims is the cursor for libraries that serialise a Go value.
type claims struct {
	Tool   string `json:"tool"`
	Caller string `json:"caller"`
	Args   []byte `json:"args"`
	Page   uint32 `json:"page"`
	State  []byte `json:"state"`
}

func newClaims() claims {
	return claims{Tool: tool, Caller: caller, Args: args[:], Page: page, State: state}
}

// check is the scope check every verifier runs on the decoded cursor.
func (c *claims) check() error {
	if c.Tool != tool || c.Caller != caller || !bytes.Equal(c.Args, args[:]) {
		return errScope
	}
	return nil
}

// timedClaims carries issued-at and expiry itself, for AEADs that have no
// notion of time.
type timedClaims struct {
	claims
	Iat int64 `json:"iat"`
	Exp int64 `json:"exp"`
}

// impl is one implementation: issue returns a token, verify checks one.
type impl struct {
	name   string
	issue  func() (string, error)
	verify func(string) error
}

func implementations(b testing.TB) []impl {
	b.Helper()
	return []impl{
		ctokenImpl(b),
		floorHMAC(b),
		floorGCM(b),
		securecookieImpl(b, "securecookie-hash", nil),
		securecookieImpl(b, "securecookie-hash+block", key32b),
		jwtImpl(),
		pasetoImpl(b),
		fernetImpl(b),
		tinkImpl(b),
	}
}

// cpuMeter measures the CPU time of a benchmark's loop on its own OS
// thread (cpu-ns/op): unlike ns/op it does not count time spent waiting for
// a CPU, so it stays meaningful on a shared machine.
type cpuMeter struct{ start int64 }

func startCPU() cpuMeter {
	runtime.LockOSThread()
	return cpuMeter{start: threadCPU()}
}

func (m cpuMeter) done(b *testing.B) {
	end := threadCPU()
	runtime.UnlockOSThread()
	if m.start >= 0 && end >= 0 && b.N > 0 {
		b.ReportMetric(float64(end-m.start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkCursor runs issue and verify of every implementation. Each
// sub-benchmark reports the token length as token-B and its CPU time per
// operation as cpu-ns/op.
func BenchmarkCursor(b *testing.B) {
	for _, im := range implementations(b) {
		token, err := im.issue()
		if err != nil {
			b.Fatalf("%s: issue: %v", im.name, err)
		}
		if err := im.verify(token); err != nil {
			b.Fatalf("%s: verify: %v", im.name, err)
		}
		b.Run(im.name+"/issue", func(b *testing.B) {
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if _, err := im.issue(); err != nil {
					b.Fatal(err)
				}
			}
			cpu.done(b)
			b.ReportMetric(float64(len(token)), "token-B")
		})
		b.Run(im.name+"/verify", func(b *testing.B) {
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if err := im.verify(token); err != nil {
					b.Fatal(err)
				}
			}
			cpu.done(b)
			b.ReportMetric(float64(len(token)), "token-B")
		})
	}
}

// TestEveryImplementationRefusesATamperedToken makes sure no verifier in
// the comparison is a no-op: each refuses its own token with one character
// changed, and accepts the original.
func TestEveryImplementationRefusesATamperedToken(t *testing.T) {
	for _, im := range implementations(t) {
		token, err := im.issue()
		if err != nil {
			t.Fatalf("%s: issue: %v", im.name, err)
		}
		if err := im.verify(token); err != nil {
			t.Fatalf("%s: verify of a fresh token: %v", im.name, err)
		}
		i := len(token) / 2
		c := byte('A')
		if token[i] == 'A' {
			c = 'B'
		}
		tampered := token[:i] + string(c) + token[i+1:]
		if err := im.verify(tampered); err == nil {
			t.Errorf("%s: verify accepted a tampered token", im.name)
		}
	}
}

func ctokenImpl(b testing.TB) impl {
	kr, err := ctoken.NewKeyring(key32)
	if err != nil {
		b.Fatal(err)
	}
	iss, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, TTL: ttl, Session: []byte("bench-01")})
	if err != nil {
		b.Fatal(err)
	}
	p := ctoken.CursorPayload{CursorScope: scope, Page: page, State: state}
	return impl{
		name:  "ctoken",
		issue: func() (string, error) { return iss.Issue(p) },
		verify: func(tok string) error {
			_, err := iss.Verify(tok, scope)
			return err
		},
	}
}

// cursorBody returns the CBOR body of ctoken's cursor: the bytes the
// floors protect.
func cursorBody(b testing.TB) []byte {
	im := ctokenImpl(b)
	tok, err := im.issue()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := b64.DecodeString(tok)
	if err != nil {
		b.Fatal(err)
	}
	return raw[:len(raw)-sha256.Size]
}

// floorHMAC is HMAC-SHA256 with one keyed state reused across calls, plus
// base64url, over ctoken's CBOR body; buffers are allocated once. Not safe
// for concurrent use — it is a floor, not an implementation.
func floorHMAC(b testing.TB) impl {
	body := cursorBody(b)
	h := hmac.New(sha256.New, key32)
	raw := make([]byte, 0, len(body)+sha256.Size)
	text := make([]byte, b64.EncodedLen(cap(raw)))
	dec := make([]byte, cap(raw))
	var sum [sha256.Size]byte
	return impl{
		name: "floor-hmac-sha256",
		issue: func() (string, error) {
			h.Reset()
			h.Write(body)
			raw = h.Sum(append(raw[:0], body...))
			b64.Encode(text, raw)
			return string(text), nil
		},
		verify: func(tok string) error {
			n, err := b64.Decode(dec, []byte(tok))
			if err != nil || n < sha256.Size {
				return errors.New("bad token")
			}
			h.Reset()
			h.Write(dec[:n-sha256.Size])
			if !hmac.Equal(h.Sum(sum[:0]), dec[n-sha256.Size:n]) {
				return errors.New("bad mac")
			}
			return nil
		},
	}
}

// floorGCM is AES-256-GCM with a fresh crypto/rand nonce, plus base64url,
// over ctoken's CBOR body; buffers are allocated once.
func floorGCM(b testing.TB) impl {
	body := cursorBody(b)
	block, err := aes.NewCipher(key32)
	if err != nil {
		b.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		b.Fatal(err)
	}
	sealed := make([]byte, 0, 12+len(body)+16)
	text := make([]byte, b64.EncodedLen(cap(sealed)))
	dec := make([]byte, cap(sealed))
	plain := make([]byte, 0, len(body))
	return impl{
		name: "floor-aes-256-gcm",
		issue: func() (string, error) {
			s := sealed[:12]
			rand.Read(s)
			s = gcm.Seal(s, s, body, nil)
			b64.Encode(text, s)
			return string(text), nil
		},
		verify: func(tok string) error {
			n, err := b64.Decode(dec, []byte(tok))
			if err != nil || n < 12+16 {
				return errors.New("bad token")
			}
			_, err = gcm.Open(plain[:0], dec[:12], dec[12:n], nil)
			return err
		},
	}
}

// securecookieImpl uses gorilla/securecookie with its defaults (gob
// serialisation, HMAC-SHA256, built-in timestamp checked against MaxAge),
// with an AES-256-CTR block key when blockKey is set.
func securecookieImpl(b testing.TB, name string, blockKey []byte) impl {
	sc := securecookie.New(key32, blockKey).MaxAge(int(ttl / time.Second))
	c := newClaims()
	return impl{
		name:  name,
		issue: func() (string, error) { return sc.Encode("cursor", &c) },
		verify: func(tok string) error {
			var got claims
			if err := sc.Decode("cursor", tok, &got); err != nil {
				return err
			}
			return got.check()
		},
	}
}

type jwtClaims struct {
	claims
	jwt.RegisteredClaims
}

// jwtImpl uses golang-jwt/jwt/v5 with HS256, iat and exp claims, and a
// parser restricted to HS256 that requires exp.
func jwtImpl() impl {
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithIssuedAt())
	keyFunc := func(*jwt.Token) (any, error) { return key32, nil }
	return impl{
		name: "golang-jwt-hs256",
		issue: func() (string, error) {
			now := time.Now()
			c := jwtClaims{claims: newClaims(), RegisteredClaims: jwt.RegisteredClaims{
				IssuedAt:  jwt.NewNumericDate(now),
				ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			}}
			return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(key32)
		},
		verify: func(tok string) error {
			var c jwtClaims
			if _, err := parser.ParseWithClaims(tok, &c, keyFunc); err != nil {
				return err
			}
			return c.check()
		},
	}
}

// pasetoImpl uses aidanwoods.dev/go-paseto v4.local (XChaCha20 +
// BLAKE2b) with iat and exp claims and the default parser (not expired).
func pasetoImpl(b testing.TB) impl {
	key, err := paseto.V4SymmetricKeyFromBytes(key32)
	if err != nil {
		b.Fatal(err)
	}
	parser := paseto.NewParser()
	return impl{
		name: "paseto-v4-local",
		issue: func() (string, error) {
			now := time.Now()
			t := paseto.NewToken()
			t.SetIssuedAt(now)
			t.SetExpiration(now.Add(ttl))
			t.SetString("tool", tool)
			t.SetString("caller", caller)
			if err := t.Set("args", args[:]); err != nil {
				return "", err
			}
			if err := t.Set("page", page); err != nil {
				return "", err
			}
			if err := t.Set("state", state); err != nil {
				return "", err
			}
			return t.V4Encrypt(key, nil), nil
		},
		verify: func(tok string) error {
			t, err := parser.ParseV4Local(key, tok, nil)
			if err != nil {
				return err
			}
			var c claims
			if c.Tool, err = t.GetString("tool"); err != nil {
				return err
			}
			if c.Caller, err = t.GetString("caller"); err != nil {
				return err
			}
			if err := t.Get("args", &c.Args); err != nil {
				return err
			}
			if err := t.Get("page", &c.Page); err != nil {
				return err
			}
			if err := t.Get("state", &c.State); err != nil {
				return err
			}
			return c.check()
		},
	}
}

// fernetImpl uses fernet-go (AES-128-CBC + HMAC-SHA256, built-in
// timestamp checked against a TTL) over the JSON of the claims.
func fernetImpl(b testing.TB) impl {
	var k fernet.Key
	copy(k[:], key32)
	keys := []*fernet.Key{&k}
	c := newClaims()
	return impl{
		name: "fernet",
		issue: func() (string, error) {
			msg, err := json.Marshal(&c)
			if err != nil {
				return "", err
			}
			tok, err := fernet.EncryptAndSign(msg, &k)
			return string(tok), err
		},
		verify: func(tok string) error {
			msg := fernet.VerifyAndDecrypt([]byte(tok), ttl, keys)
			if msg == nil {
				return errors.New("fernet: invalid or expired")
			}
			var got claims
			if err := json.Unmarshal(msg, &got); err != nil {
				return err
			}
			return got.check()
		},
	}
}

// tinkImpl uses tink-go's AEAD primitive with the AES256_GCM key template
// over the JSON of the claims with explicit iat and exp, base64url framed.
func tinkImpl(b testing.TB) impl {
	h, err := keyset.NewHandle(aead.AES256GCMKeyTemplate())
	if err != nil {
		b.Fatal(err)
	}
	var a tink.AEAD
	if a, err = aead.New(h); err != nil {
		b.Fatal(err)
	}
	return impl{
		name: "tink-aes-256-gcm",
		issue: func() (string, error) {
			now := time.Now()
			msg, err := json.Marshal(&timedClaims{claims: newClaims(), Iat: now.Unix(), Exp: now.Add(ttl).Unix()})
			if err != nil {
				return "", err
			}
			ct, err := a.Encrypt(msg, nil)
			if err != nil {
				return "", err
			}
			return b64.EncodeToString(ct), nil
		},
		verify: func(tok string) error {
			ct, err := b64.DecodeString(tok)
			if err != nil {
				return err
			}
			msg, err := a.Decrypt(ct, nil)
			if err != nil {
				return err
			}
			var got timedClaims
			if err := json.Unmarshal(msg, &got); err != nil {
				return err
			}
			if time.Now().Unix() > got.Exp {
				return errors.New("expired")
			}
			return got.check()
		},
	}
}
