package webhook

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken/internal/b64"
	"github.com/ctoken/ctoken/internal/mac"
	"github.com/ctoken/ctoken/observe"
)

// standard is the Standard Webhooks scheme, parameterised by its header
// names so that senders using the same algorithm under other names slot in
// as further values.
type standard struct {
	name                          string
	idHeader, tsHeader, sigHeader string
}

var schemeStandard = &standard{
	name:      "standard-webhooks",
	idHeader:  HeaderStandardID,
	tsHeader:  HeaderStandardTimestamp,
	sigHeader: HeaderStandardSignature,
}

// StandardWebhooks returns the Standard Webhooks scheme
// (https://www.standardwebhooks.com): headers [HeaderStandardID],
// [HeaderStandardTimestamp] (unix seconds) and [HeaderStandardSignature], a
// space-separated list of "v1,<base64 HMAC-SHA256(secret, id.timestamp.body)>".
// Secrets are "whsec_" followed by standard base64 of at least 24 bytes
// (padded or not; the prefix is optional). The ID and time are signed; a
// delivery whose timestamp lies more than [Config.Tolerance] before or
// after the clock, compared in whole seconds as the reference libraries do,
// is refused, and an ID may not contain '.'. Every v1 entry of the header
// is compared (other versions, such as v1a, are skipped); their number is
// bounded by [MaxSignatureHeaderBytes] only. A signer signs with every
// secret, as Standard Webhooks senders do during rotation. The header names
// are fixed: [Config.SignatureHeader] and [Config.IDHeader] are refused.
func StandardWebhooks() Scheme { return schemeStandard }

// minStandardSecretBytes is the Standard Webhooks minimum secret size.
const minStandardSecretBytes = 24

func (s *standard) String() string { return s.name }

func (s *standard) parseSecret(secret string) ([]byte, error) {
	text := strings.TrimPrefix(secret, "whsec_")
	if text == "" {
		return nil, errSecretEmpty
	}
	enc := b64.Std
	if len(text)%4 != 0 {
		enc = b64.RawStd
	}
	k, err := enc.DecodeString(text)
	if err != nil {
		return nil, errSecretBase64
	}
	if len(k) < minStandardSecretBytes {
		return nil, errSecretShort
	}
	return k, nil
}

func (s *standard) loadKeys(ks *keySet, secrets []string, _ bool) error {
	return loadHMACKeys(ks, secrets, s.parseSecret)
}

func (s *standard) configure(cfg *Config, p *params) error {
	if cfg.SignatureHeader != "" || cfg.IDHeader != "" {
		return errHeadersUnused
	}
	p.idHeader, p.tsHeader, p.sigHeader = s.idHeader, s.tsHeader, s.sigHeader
	return configureTolerance(cfg, p)
}

func (s *standard) forbidsDot() bool { return true }

// standardHeaders reads the timestamp (as signed text and as a number) and
// the signature header that Standard Webhooks and its Ed25519 variant share,
// refusing a missing, repeated or malformed one with its preallocated error.
func standardHeaders(p *params, h http.Header) (ts int64, tsText, sig string, err error) {
	tsText, ok := single(h, p.tsHeader)
	if !ok {
		return 0, "", "", errTSHeader
	}
	if ts, ok = parseUnixSeconds(tsText); !ok {
		return 0, "", "", errTSMalformed
	}
	if sig, ok = single(h, p.sigHeader); !ok {
		return 0, "", "", errSigHeader
	}
	return ts, tsText, sig, nil
}

func (s *standard) verify(p *params, h http.Header, body []byte, id string) (verified, error) {
	ts, tsText, sigHeader, err := standardHeaders(p, h)
	if err != nil {
		return verified{}, err
	}
	var cands [maxV1Entries][mac.Size]byte
	n, ok := parseStandardSignatures(sigHeader, &cands)
	if !ok {
		return verified{}, errSigMalformed
	}
	key := verifyOne(p.set.Load().keys, cands[:n], func(st *mac.State) {
		st.WriteString(id)
		st.WriteByte('.')
		st.WriteString(tsText)
		st.WriteByte('.')
		st.Write(body)
	})
	if key == observe.KeyNone {
		return verified{}, errSigMismatch
	}
	// The window is checked after the signature, so ErrTimestamp always
	// means an authentic but stale or future delivery.
	t, err := checkWindow(p, ts)
	if err != nil {
		return verified{key: key}, err
	}
	return verified{key: key, ts: t}, nil
}

// parseUnixSeconds parses 1 to 12 ASCII digits (no sign, no spaces, no
// leading zero), which covers every time until the year 33658. A leading
// zero is refused because the timestamp text is signed as sent while the
// reference libraries sign the number: "01614265330" has one spelling
// there and would have two here.
func parseUnixSeconds(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 12 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// sigTextLen is the length of the standard base64 of a 32-byte tag.
const sigTextLen = 44

// maxV1Entries is the most "v1,<tag>" entries a signature header of
// MaxSignatureHeaderBytes can hold (each is followed by a separator but the
// last), so an array of it holds every v1 signature of any header that
// passes the cap.
const maxV1Entries = (MaxSignatureHeaderBytes + 1) / (len("v1,") + sigTextLen + 1)

// parseStandardSignatures parses a signature header of at most
// MaxSignatureHeaderBytes of space-separated "version,base64" entries into
// dst, returning how many v1 signatures it decoded. Entries of other
// versions (such as v1a) and v1 entries that are not the canonical
// standard base64 of 32 bytes are skipped, as the reference implementations
// do (they never match anyway). There is no cap on the number of entries
// beyond the header's size: each costs one compare per secret. It fails
// when the header is over the cap or holds no usable v1 signature. It does
// not allocate.
func parseStandardSignatures(s string, dst *[maxV1Entries][mac.Size]byte) (int, bool) {
	if len(s) > MaxSignatureHeaderBytes {
		return 0, false
	}
	n := 0
	for {
		entry, rest, ok := nextField(s)
		if !ok {
			break
		}
		s = rest
		if len(entry) != len("v1,")+sigTextLen || entry[:3] != "v1," || n == len(dst) {
			continue
		}
		var text [sigTextLen]byte
		var raw [sigTextLen / 4 * 3]byte
		copy(text[:], entry[3:])
		if k, err := b64.Std.Decode(raw[:], text[:]); err != nil || k != mac.Size {
			continue
		}
		copy(dst[n][:], raw[:mac.Size])
		n++
	}
	return n, n > 0
}

// nextField returns the first run of non-space characters of s and what
// follows it, as strings.Fields would split s, without allocating; ok is
// false when s holds only white space.
func nextField(s string) (field, rest string, ok bool) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	s = s[i:]
	if s == "" {
		return "", "", false
	}
	j := 0
	for j < len(s) && !isSpace(s[j]) {
		j++
	}
	return s[:j], s[j:], true
}

// isSpace reports the ASCII white space strings.Fields splits on.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func (s *standard) sign(p *params, h http.Header, id string, body []byte, now time.Time) error {
	ts := strconv.FormatInt(now.Unix(), 10)
	var sigs strings.Builder
	for i, k := range p.set.Load().keys {
		if i > 0 {
			sigs.WriteByte(' ')
		}
		st := k.Begin()
		st.WriteString(id)
		st.WriteByte('.')
		st.WriteString(ts)
		st.WriteByte('.')
		st.Write(body)
		sigs.WriteString("v1,")
		sigs.WriteString(b64.Std.EncodeToString(st.Tag()[:]))
		k.End(st)
	}
	h[p.idHeader] = []string{id}
	h[p.tsHeader] = []string{ts}
	h[p.sigHeader] = []string{sigs.String()}
	return nil
}
