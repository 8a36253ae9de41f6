package webhook

import (
	"crypto/ed25519"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken/internal/b64"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

// standardEd25519 is the asymmetric (v1a) variant of Standard Webhooks: the
// headers, ID rules, timestamp window and replay claims of [standard], with
// Ed25519 signatures.
type standardEd25519 struct {
	*standard
}

var schemeStandardEd25519 = &standardEd25519{&standard{
	name:      "standard-webhooks-ed25519",
	idHeader:  HeaderStandardID,
	tsHeader:  HeaderStandardTimestamp,
	sigHeader: HeaderStandardSignature,
}}

// Key prefixes of [StandardWebhooksEd25519].
const (
	// Ed25519PrivateKeyPrefix starts a Standard Webhooks Ed25519 private
	// key: "whsk_" and the standard base64 (padded) of the 32-byte seed.
	Ed25519PrivateKeyPrefix = "whsk_"
	// Ed25519PublicKeyPrefix starts a Standard Webhooks Ed25519 public key:
	// "whpk_" and the standard base64 (padded) of the 32-byte key.
	Ed25519PublicKeyPrefix = "whpk_"
)

// StandardWebhooksEd25519 returns the asymmetric variant of Standard
// Webhooks ("v1a"): the headers, delivery ID rules, timestamp window and
// replay protection of [StandardWebhooks], with the signature header
// holding "v1a,<base64 Ed25519 signature of id.timestamp.body>" entries.
// A [Verifier] takes public keys ([Ed25519PublicKeyPrefix], "whpk_...") and
// a [Signer] private keys ([Ed25519PrivateKeyPrefix], "whsk_..." holding the
// 32-byte seed) as its Secrets; the other kind, an unprefixed key or a
// whsec_ secret is refused with [ErrSecretInvalid], so a private key is
// never configured on the receiving side by mistake. A signer signs with
// every key, as during rotation.
//
// Entries of other versions (v1) are skipped. At most [MaxSignatures] v1a
// entries are verified, each under every key, since each costs a
// public-key verification; further entries are ignored. Refusing a
// well-formed but forged signature costs one allocation per verification
// (the failure error of crypto/ed25519); every other refusal costs none.
// Plain Ed25519 is approved in FIPS 140-3 mode (GODEBUG=fips140=only
// allows it), so the scheme works there too.
func StandardWebhooksEd25519() Scheme { return schemeStandardEd25519 }

// ed25519SigTextLen is the length of the standard base64 of a signature.
const ed25519SigTextLen = (ed25519.SignatureSize + 2) / 3 * 4

var (
	errEdKeyKind   = reason.New(ErrSecretInvalid, "an Ed25519 Verifier takes whpk_ public keys and a Signer whsk_ private keys")
	errEdKeyBase64 = reason.New(ErrSecretInvalid, "Ed25519 key not padded standard base64 of 32 bytes after its prefix")
	errEdKeyPoint  = reason.New(ErrSecretInvalid, "Ed25519 public key is not a point of the curve")
	errEdKeyEncode = reason.New(ErrSecretInvalid, "Ed25519 public key is not the canonical encoding of its point")
	errEdKeyOrder  = reason.New(ErrSecretInvalid, "Ed25519 public key is a point of small order, under which signatures can be forged")
)

func (s *standardEd25519) loadKeys(ks *keySet, secrets []string, signer bool) error {
	prefix := Ed25519PublicKeyPrefix
	if signer {
		prefix = Ed25519PrivateKeyPrefix
	}
	for i, secret := range secrets {
		raw, err := parseEd25519Key(secret, prefix)
		if err != nil {
			return fmt.Errorf("%w (secret %d of %d)", err, i+1, len(secrets))
		}
		if signer {
			ks.edPriv = append(ks.edPriv, ed25519.NewKeyFromSeed(raw))
		} else {
			if err := checkEd25519PublicKey(raw); err != nil {
				return fmt.Errorf("%w (secret %d of %d)", err, i+1, len(secrets))
			}
			ks.edPub = append(ks.edPub, ed25519.PublicKey(raw))
		}
	}
	return nil
}

// parseEd25519Key decodes prefix followed by the padded standard base64 of
// 32 bytes.
func parseEd25519Key(secret, prefix string) ([]byte, error) {
	if secret == "" {
		return nil, errSecretEmpty
	}
	text, ok := strings.CutPrefix(secret, prefix)
	if !ok {
		return nil, errEdKeyKind
	}
	raw, err := b64.Std.DecodeString(text)
	if err != nil || len(raw) != ed25519.SeedSize { // = PublicKeySize
		return nil, errEdKeyBase64
	}
	return raw, nil
}

// Curve constants of edwards25519: the field prime p = 2^255 - 19 and
// d = -121665/121666 mod p.
var (
	edP = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	edD = func() *big.Int {
		d := new(big.Int).ModInverse(big.NewInt(121666), edP)
		d.Mul(d, big.NewInt(-121665))
		return d.Mod(d, edP)
	}()
)

// checkEd25519PublicKey accepts the 32 bytes of a public key only when
// they are the canonical encoding (RFC 8032 §5.1.2: y below p, and no sign
// bit on x = 0) of a point of edwards25519 whose order is not small (8·A is
// not the identity). crypto/ed25519 refuses every signature under a key
// that is not a point, and accepts forged signatures on any message under
// a key of small order (the identity, the all-zero encoding of the point of
// order 4, ...), so such keys are refused when configured. Public keys are
// not secret: math/big's variable time is fine here.
func checkEd25519PublicKey(key []byte) error {
	le := make([]byte, len(key))
	for i, b := range key {
		le[len(key)-1-i] = b
	}
	sign := le[0] >> 7
	le[0] &= 0x7f
	y := new(big.Int).SetBytes(le)
	if y.Cmp(edP) >= 0 {
		return errEdKeyEncode
	}
	x2, ok := edX2(y)
	switch {
	case !ok:
		return errEdKeyPoint
	case x2.Sign() == 0 && sign == 1:
		return errEdKeyEncode
	}
	// 8·A by three doublings. For a = -1 the affine doubling of (x, y) is
	// x' = 2xy / (1 + d·x²y²), y' = (x² + y²) / (1 - d·x²y²), whose
	// denominators never vanish (d is not a square); x'² and y' depend on
	// x only through x², so the sign of x is not needed.
	one := big.NewInt(1)
	for range 3 {
		y2 := new(big.Int).Mul(y, y)
		dx2y2 := new(big.Int).Mul(x2, y2)
		dx2y2.Mul(dx2y2, edD).Mod(dx2y2, edP)
		den := new(big.Int).Add(one, dx2y2)
		den.Mul(den, den).ModInverse(den, edP) // 1 / (1 + d·x²y²)²
		nx2 := new(big.Int).Mul(x2, y2)
		nx2.Lsh(nx2, 2).Mul(nx2, den).Mod(nx2, edP)
		ny := new(big.Int).Add(x2, y2)
		inv := new(big.Int).Sub(one, dx2y2)
		inv.Mod(inv, edP).ModInverse(inv, edP) // 1 / (1 - d·x²y²)
		ny.Mul(ny, inv).Mod(ny, edP)
		x2, y = nx2, ny
	}
	if x2.Sign() == 0 && y.Cmp(one) == 0 {
		return errEdKeyOrder
	}
	return nil
}

// edX2 returns x² for the point of edwards25519 with coordinate y < p, as
// crypto/ed25519 decodes it (RFC 8032 §5.1.3: x² = (y² - 1) / (d·y² + 1)),
// and false when x² has no square root, so no such point exists.
func edX2(y *big.Int) (*big.Int, bool) {
	y2 := new(big.Int).Mul(y, y)
	u := new(big.Int).Sub(y2, big.NewInt(1))
	v := new(big.Int).Mul(edD, y2)
	v.Add(v, big.NewInt(1)).Mod(v, edP) // never zero: -1/d is not a square
	x2 := u.Mul(u, v.ModInverse(v, edP)).Mod(u, edP)
	if x2.Sign() == 0 {
		return x2, true
	}
	// Euler's criterion: x2 is a square iff x2^((p-1)/2) = 1.
	e := new(big.Int).Rsh(new(big.Int).Sub(edP, big.NewInt(1)), 1)
	return x2, new(big.Int).Exp(x2, e, edP).Cmp(big.NewInt(1)) == 0
}

// maxPooledMsg is the largest message buffer returned to the pool.
const maxPooledMsg = DefaultMaxBody + 1024

func (s *standardEd25519) verify(p *params, h http.Header, body []byte, id string) (verified, error) {
	ts, tsText, sigHeader, err := standardHeaders(p, h)
	if err != nil {
		return verified{}, err
	}
	var cands [MaxSignatures][ed25519.SignatureSize]byte
	n, ok := parseEd25519Signatures(sigHeader, &cands)
	if !ok {
		return verified{}, errSigMalformed
	}
	bp, _ := p.edMsgs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	msg := append((*bp)[:0], id...)
	msg = append(msg, '.')
	msg = append(msg, tsText...)
	msg = append(msg, '.')
	msg = append(msg, body...)
	matched := -1
	for i, k := range p.set.Load().edPub {
		for j := range cands[:n] {
			if ed25519.Verify(k, msg, cands[j][:]) && matched < 0 {
				matched = i
			}
		}
	}
	if cap(msg) <= maxPooledMsg {
		*bp = msg[:0]
		p.edMsgs.Put(bp)
	}
	if matched < 0 {
		return verified{}, errSigMismatch
	}
	key := observe.KeyAt(matched)
	t, err := checkWindow(p, ts)
	if err != nil {
		return verified{key: key}, err
	}
	return verified{key: key, ts: t}, nil
}

// parseEd25519Signatures parses a signature header of at most
// MaxSignatureHeaderBytes of space-separated "version,base64" entries,
// decoding the first MaxSignatures v1a entries that are the canonical
// padded standard base64 of 64 bytes into dst. Other entries are skipped.
// It fails when the header is over the cap or holds no usable v1a
// signature. It does not allocate.
func parseEd25519Signatures(s string, dst *[MaxSignatures][ed25519.SignatureSize]byte) (int, bool) {
	if len(s) > MaxSignatureHeaderBytes {
		return 0, false
	}
	n := 0
	for n < len(dst) {
		entry, rest, ok := nextField(s)
		if !ok {
			break
		}
		s = rest
		if len(entry) != len("v1a,")+ed25519SigTextLen || entry[:4] != "v1a," {
			continue
		}
		var text [ed25519SigTextLen]byte
		var raw [ed25519SigTextLen / 4 * 3]byte
		copy(text[:], entry[4:])
		if k, err := b64.Std.Decode(raw[:], text[:]); err != nil || k != ed25519.SignatureSize {
			continue
		}
		copy(dst[n][:], raw[:ed25519.SignatureSize])
		n++
	}
	return n, n > 0
}

func (s *standardEd25519) sign(p *params, h http.Header, id string, body []byte, now time.Time) error {
	ts := strconv.FormatInt(now.Unix(), 10)
	msg := make([]byte, 0, len(id)+len(ts)+2+len(body))
	msg = append(append(append(append(append(msg, id...), '.'), ts...), '.'), body...)
	var sigs strings.Builder
	for i, k := range p.set.Load().edPriv {
		if i > 0 {
			sigs.WriteByte(' ')
		}
		sigs.WriteString("v1a,")
		sigs.WriteString(b64.Std.EncodeToString(ed25519.Sign(k, msg)))
	}
	h[p.idHeader] = []string{id}
	h[p.tsHeader] = []string{ts}
	h[p.sigHeader] = []string{sigs.String()}
	return nil
}
