package ctoken

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WebhookScheme selects how webhook deliveries are signed.
type WebhookScheme uint8

const (
	// WebhookHMACSHA256 is the scheme of Cursor's agent webhooks and of
	// GitHub: a header "sha256=<hex>" holding HMAC-SHA256(secret, raw body),
	// and a delivery ID in a second header. Cursor uses X-Webhook-Signature
	// and X-Webhook-ID (the defaults); GitHub uses X-Hub-Signature-256 and
	// X-GitHub-Delivery. Neither the ID nor any time is signed, so replay
	// protection rests on the replay store alone (see WebhookConfig.DedupWindow).
	WebhookHMACSHA256 WebhookScheme = iota
	// WebhookStandard is the Standard Webhooks scheme
	// (https://www.standardwebhooks.com): headers webhook-id,
	// webhook-timestamp (unix seconds) and webhook-signature, a
	// space-separated list of "v1,<base64 HMAC-SHA256(secret, id.timestamp.body)>".
	// Secrets are "whsec_<base64>". The ID and time are signed, and a
	// delivery outside the tolerance window is refused.
	WebhookStandard
)

// Webhook defaults.
const (
	// DefaultWebhookMaxBody is the body size cap when WebhookConfig.MaxBody is zero.
	DefaultWebhookMaxBody = 1 << 20
	// DefaultWebhookTolerance is the Standard Webhooks timestamp tolerance,
	// both into the past and into the future.
	DefaultWebhookTolerance = 5 * time.Minute
	// DefaultWebhookDedupWindow is how long a delivery is remembered as seen
	// (at least; see WebhookConfig.DedupWindow).
	DefaultWebhookDedupWindow = 24 * time.Hour

	// maxWebhookIDBytes caps a delivery ID (it becomes a replay store key).
	maxWebhookIDBytes = 256
	// maxSignatureHeaderBytes caps a signature header before it is parsed.
	maxSignatureHeaderBytes = 4096
	// maxWebhookSignatures caps the signatures tried from one header.
	maxWebhookSignatures = 16
	// minStandardSecretBytes is the Standard Webhooks minimum secret size.
	minStandardSecretBytes = 24
)

// Webhook errors (errors.Is). WebhookVerifier.Middleware maps them to HTTP
// statuses as documented there.
var (
	// ErrWebhookSignature reports a missing, unparsable or non-matching
	// signature: the delivery is not authentic.
	ErrWebhookSignature = errors.New("ctoken: webhook signature invalid")
	// ErrWebhookTimestamp reports an authentic Standard Webhooks delivery
	// whose timestamp is outside the tolerance (an old delivery replayed, or
	// a badly skewed clock).
	ErrWebhookTimestamp = errors.New("ctoken: webhook timestamp outside tolerance")
	// ErrWebhookMalformed reports a delivery missing its ID or timestamp, or
	// carrying one that cannot be parsed, or a body that cannot be read.
	ErrWebhookMalformed = errors.New("ctoken: malformed webhook request")
	// ErrWebhookTooLarge reports a body over the configured cap.
	ErrWebhookTooLarge = errors.New("ctoken: webhook body too large")
)

// WebhookConfig configures a WebhookVerifier or a WebhookSigner. The zero
// value of every field except Secrets is a safe default.
type WebhookConfig struct {
	// Scheme is the signature scheme; the zero value is WebhookHMACSHA256.
	Scheme WebhookScheme
	// Secrets are the shared secrets, at least one. Any of them verifies a
	// delivery, so a secret can be rotated by adding the new one first and
	// removing the old one later.
	//
	// WebhookHMACSHA256: the secret as configured at the sender, used as raw
	// bytes; a signer signs with the first.
	//
	// WebhookStandard: "whsec_" followed by standard base64 (the prefix is
	// optional) of at least 24 bytes; a signer signs with every secret, as
	// Standard Webhooks senders do during rotation.
	Secrets []string
	// SignatureHeader and IDHeader name the headers of the WebhookHMACSHA256
	// scheme; empty means X-Webhook-Signature and X-Webhook-ID. The Standard
	// Webhooks headers are fixed.
	SignatureHeader, IDHeader string
	// Tolerance is how far a Standard Webhooks timestamp may lie in the past
	// or in the future; zero or negative means DefaultWebhookTolerance.
	Tolerance time.Duration
	// MaxBody caps the body in bytes, checked while reading; zero or
	// negative means DefaultWebhookMaxBody.
	MaxBody int64
	// Replay de-duplicates deliveries. Nil means a private
	// MemoryReplayStore with DefaultReplayStoreMax entries, which protects a
	// single process only; a fleet shares one store. Size a bounded store
	// for the deliveries of one DedupWindow (a WebhookHMACSHA256 delivery
	// takes two entries, a Standard Webhooks one takes one): when it is
	// full, deliveries are refused with 503 until entries expire.
	Replay ReplayStore
	// DedupWindow is how long a delivery is remembered as seen, so that a
	// sender's retry of a delivery already processed is acknowledged rather
	// than processed again; zero or negative means
	// DefaultWebhookDedupWindow. For WebhookHMACSHA256, which signs no time,
	// it is also the whole replay protection. A Standard Webhooks delivery
	// is in any case remembered until its timestamp has left the tolerance
	// window, after which the timestamp check refuses a replay by itself.
	DedupWindow time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnReject, if set, is called by the middleware with every refused
	// request and its error, for logging (Reason(err) gives a log-safe
	// description). It is not called for duplicates.
	OnReject func(r *http.Request, err error)
}

// webhookParams is a validated WebhookConfig.
type webhookParams struct {
	scheme              WebhookScheme
	secrets             [][]byte
	sigHeader, idHeader string
	tolerance           time.Duration
	maxBody             int64
	replay              ReplayStore
	dedupWindow         time.Duration
	now                 func() time.Time
	onReject            func(*http.Request, error)
}

func newWebhookParams(cfg WebhookConfig) (webhookParams, error) {
	p := webhookParams{
		scheme:      cfg.Scheme,
		sigHeader:   cfg.SignatureHeader,
		idHeader:    cfg.IDHeader,
		tolerance:   cfg.Tolerance,
		maxBody:     cfg.MaxBody,
		replay:      cfg.Replay,
		dedupWindow: cfg.DedupWindow,
		now:         cfg.Now,
		onReject:    cfg.OnReject,
	}
	if p.scheme != WebhookHMACSHA256 && p.scheme != WebhookStandard {
		return p, fmt.Errorf("ctoken: unknown webhook scheme %d", p.scheme)
	}
	if len(cfg.Secrets) == 0 {
		return p, fmt.Errorf("%w: no webhook secret", ErrNoKey)
	}
	for i, s := range cfg.Secrets {
		k, err := parseWebhookSecret(p.scheme, s)
		if err != nil {
			return p, fmt.Errorf("%w (webhook secret %d of %d)", err, i+1, len(cfg.Secrets))
		}
		p.secrets = append(p.secrets, k)
	}
	if p.sigHeader == "" {
		p.sigHeader = "X-Webhook-Signature"
	}
	if p.idHeader == "" {
		p.idHeader = "X-Webhook-ID"
	}
	if p.scheme == WebhookStandard {
		p.sigHeader, p.idHeader = "webhook-signature", "webhook-id"
	}
	if p.tolerance <= 0 {
		p.tolerance = DefaultWebhookTolerance
	}
	if p.maxBody <= 0 {
		p.maxBody = DefaultWebhookMaxBody
	}
	if p.replay == nil {
		p.replay = &MemoryReplayStore{Now: cfg.Now}
	}
	if p.dedupWindow <= 0 {
		p.dedupWindow = DefaultWebhookDedupWindow
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p, nil
}

func parseWebhookSecret(scheme WebhookScheme, s string) ([]byte, error) {
	if scheme == WebhookHMACSHA256 {
		if s == "" {
			return nil, ErrKeyInvalid
		}
		return []byte(s), nil
	}
	b64 := strings.TrimPrefix(strings.TrimSpace(s), "whsec_")
	k, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil {
		k, err = base64.RawStdEncoding.Strict().DecodeString(b64)
	}
	if err != nil {
		return nil, ErrKeyInvalid
	}
	if len(k) < minStandardSecretBytes {
		return nil, fmt.Errorf("%w: shorter than %d bytes", ErrKeyInvalid, minStandardSecretBytes)
	}
	return k, nil
}

// SignWebhookSHA256 returns the WebhookHMACSHA256 signature header value
// for body: "sha256=" followed by the lowercase hex HMAC-SHA256 of body
// under secret.
func SignWebhookSHA256(secret, body []byte) string {
	return "sha256=" + hex.EncodeToString(sha256MAC(secret, body))
}

// sha256MAC is HMAC-SHA256(secret, body), the WebhookHMACSHA256 signature.
func sha256MAC(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
}

// SignStandardWebhook returns one Standard Webhooks signature, "v1," followed
// by the standard base64 HMAC-SHA256 under secret (the decoded whsec_ bytes)
// of id + "." + timestamp + "." + body, timestamp in unix seconds.
func SignStandardWebhook(secret []byte, id string, timestamp int64, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(standardMAC(secret, id, strconv.FormatInt(timestamp, 10), body))
}

func standardMAC(secret []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// WebhookSigner signs outgoing deliveries so that a WebhookVerifier with the
// same scheme, secrets and header names accepts them. It is safe for
// concurrent use.
type WebhookSigner struct {
	p webhookParams
}

// NewWebhookSigner validates cfg and returns a signer. Only Scheme, Secrets,
// the header names and Now are used.
func NewWebhookSigner(cfg WebhookConfig) (*WebhookSigner, error) {
	p, err := newWebhookParams(cfg)
	if err != nil {
		return nil, err
	}
	return &WebhookSigner{p: p}, nil
}

// Sign sets on h the headers that authenticate body as delivery id: the ID
// header and signature for WebhookHMACSHA256 (signed with the first secret),
// or webhook-id, webhook-timestamp (the signer's clock) and
// webhook-signature (one v1 signature per secret) for WebhookStandard. The
// id must be non-empty, at most 256 bytes, and for WebhookStandard free of
// '.', else ErrWebhookMalformed. A signer not made by NewWebhookSigner
// returns ErrNoKey.
func (s *WebhookSigner) Sign(h http.Header, id string, body []byte) error {
	if len(s.p.secrets) == 0 || s.p.now == nil {
		return fmt.Errorf("%w: WebhookSigner not made by NewWebhookSigner", ErrNoKey)
	}
	if err := checkWebhookID(s.p.scheme, id); err != nil {
		return err
	}
	if s.p.scheme == WebhookHMACSHA256 {
		h.Set(s.p.idHeader, id)
		h.Set(s.p.sigHeader, SignWebhookSHA256(s.p.secrets[0], body))
		return nil
	}
	ts := s.p.now().Unix()
	sigs := make([]string, len(s.p.secrets))
	for i, k := range s.p.secrets {
		sigs[i] = SignStandardWebhook(k, id, ts, body)
	}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", strings.Join(sigs, " "))
	return nil
}

// WebhookDelivery describes an authentic delivery.
type WebhookDelivery struct {
	// ID is the delivery ID from the request.
	ID string
	// Timestamp is the signed send time (WebhookStandard only; zero for
	// WebhookHMACSHA256, which signs no time).
	Timestamp time.Time

	mac []byte // the matching signature, a replay key for WebhookHMACSHA256
}

// WebhookVerifier checks signed webhook deliveries and de-duplicates them.
// It is safe for concurrent use.
type WebhookVerifier struct {
	p webhookParams
}

// NewWebhookVerifier validates cfg and returns a verifier. It fails with
// ErrNoKey when there is no secret and ErrKeyInvalid for a malformed one.
func NewWebhookVerifier(cfg WebhookConfig) (*WebhookVerifier, error) {
	p, err := newWebhookParams(cfg)
	if err != nil {
		return nil, err
	}
	return &WebhookVerifier{p: p}, nil
}

// Verify checks that body with headers h is an authentic delivery. It does
// not consult the replay store (see Claim); it is pure and cheap.
//
// Order: body cap (ErrWebhookTooLarge); ID and, for WebhookStandard,
// timestamp present and well formed (ErrWebhookMalformed); signature header
// present, at most 4 KiB, and a signature matching under some secret,
// compared in constant time (ErrWebhookSignature); for WebhookStandard the
// timestamp within the tolerance either way (ErrWebhookTimestamp). The
// timestamp window is checked after the signature, so ErrWebhookTimestamp
// always means an authentic but stale or future delivery.
func (v *WebhookVerifier) Verify(h http.Header, body []byte) (WebhookDelivery, error) {
	var d WebhookDelivery
	if int64(len(body)) > v.p.maxBody {
		return d, reject(ErrWebhookTooLarge, "body over cap")
	}
	id, err := singleHeader(h, v.p.idHeader)
	if err != nil {
		return d, reject(ErrWebhookMalformed, "delivery id header missing or repeated")
	}
	if err := checkWebhookID(v.p.scheme, id); err != nil {
		return d, err
	}
	d.ID = id
	if v.p.scheme == WebhookHMACSHA256 {
		d, err = v.verifySHA256(h, body, d)
	} else {
		d, err = v.verifyStandard(h, body, d)
	}
	if err != nil {
		return WebhookDelivery{}, err // fail closed: nothing of a refused delivery
	}
	return d, nil
}

func (v *WebhookVerifier) verifySHA256(h http.Header, body []byte, d WebhookDelivery) (WebhookDelivery, error) {
	sig, err := singleHeader(h, v.p.sigHeader)
	if err != nil {
		return d, reject(ErrWebhookSignature, "signature header missing or repeated")
	}
	got, ok := parseSHA256Signature(sig)
	if !ok {
		return d, reject(ErrWebhookSignature, "signature header malformed")
	}
	for _, k := range v.p.secrets {
		if hmac.Equal(sha256MAC(k, body), got) {
			d.mac = got
			return d, nil
		}
	}
	return d, reject(ErrWebhookSignature, "signature mismatch")
}

// parseSHA256Signature parses "sha256=<64 hex digits>" (hex in either case).
func parseSHA256Signature(s string) ([]byte, bool) {
	const prefix = "sha256="
	if len(s) != len(prefix)+2*sha256.Size || !strings.HasPrefix(s, prefix) {
		return nil, false
	}
	b, err := hex.DecodeString(s[len(prefix):])
	if err != nil {
		return nil, false
	}
	return b, true
}

func (v *WebhookVerifier) verifyStandard(h http.Header, body []byte, d WebhookDelivery) (WebhookDelivery, error) {
	tsText, err := singleHeader(h, "webhook-timestamp")
	if err != nil {
		return d, reject(ErrWebhookMalformed, "timestamp header missing or repeated")
	}
	ts, ok := parseUnixSeconds(tsText)
	if !ok {
		return d, reject(ErrWebhookMalformed, "timestamp malformed")
	}
	sigHeader, err := singleHeader(h, "webhook-signature")
	if err != nil {
		return d, reject(ErrWebhookSignature, "signature header missing or repeated")
	}
	sigs, ok := parseStandardSignatures(sigHeader)
	if !ok {
		return d, reject(ErrWebhookSignature, "signature header malformed")
	}
	matched := false
	for _, k := range v.p.secrets {
		want := standardMAC(k, d.ID, tsText, body)
		for _, got := range sigs {
			// No early exit: every candidate is compared.
			if hmac.Equal(want, got) {
				matched = true
			}
		}
	}
	if !matched {
		return d, reject(ErrWebhookSignature, "signature mismatch")
	}
	d.Timestamp = time.Unix(ts, 0)
	now := v.p.now()
	if now.Sub(d.Timestamp) > v.p.tolerance {
		return d, reject(ErrWebhookTimestamp, "timestamp too old")
	}
	if d.Timestamp.Sub(now) > v.p.tolerance {
		return d, reject(ErrWebhookTimestamp, "timestamp in the future")
	}
	return d, nil
}

// parseUnixSeconds parses 1 to 12 ASCII digits (no sign, no spaces), which
// covers every time until the year 33658.
func parseUnixSeconds(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 12 {
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

// parseStandardSignatures parses a webhook-signature header: at most 4 KiB
// and at most 16 space-separated "version,base64" entries. It returns the
// decoded v1 signatures. Entries of other versions (such as v1a, asymmetric)
// and v1 entries that are not standard base64 of 32 bytes are skipped, as the
// reference implementations do (they never match anyway). It fails when a cap
// is exceeded or no usable v1 signature remains.
func parseStandardSignatures(s string) ([][]byte, bool) {
	if len(s) > maxSignatureHeaderBytes {
		return nil, false
	}
	fields := strings.Fields(s)
	if len(fields) > maxWebhookSignatures {
		return nil, false
	}
	var out [][]byte
	for _, f := range fields {
		version, sig, ok := strings.Cut(f, ",")
		if !ok || version != "v1" || len(sig) != base64.StdEncoding.EncodedLen(sha256.Size) {
			continue
		}
		b, err := base64.StdEncoding.Strict().DecodeString(sig)
		if err != nil || len(b) != sha256.Size {
			continue
		}
		out = append(out, b)
	}
	return out, len(out) > 0
}

// singleHeader returns the one non-empty value of header name, or an error
// when it is absent, empty or repeated (a repeated header is ambiguous).
func singleHeader(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	if len(vs) != 1 || vs[0] == "" {
		return "", ErrWebhookMalformed
	}
	return vs[0], nil
}

// checkWebhookID accepts 1 to 256 bytes of printable ASCII other than space;
// for WebhookStandard also no '.', which would make id.timestamp.body ambiguous.
func checkWebhookID(scheme WebhookScheme, id string) error {
	if len(id) == 0 || len(id) > maxWebhookIDBytes {
		return reject(ErrWebhookMalformed, "delivery id empty or too long")
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c <= ' ' || c > '~' || (c == '.' && scheme == WebhookStandard) {
			return reject(ErrWebhookMalformed, "delivery id has a forbidden character")
		}
	}
	return nil
}

// replayKeys returns the replay store keys of an authentic delivery and how
// long to keep them.
func (v *WebhookVerifier) replayKeys(d WebhookDelivery) ([]string, time.Time) {
	until := v.p.now().Add(v.p.dedupWindow)
	if v.p.scheme == WebhookStandard {
		// The ID is signed. Keep it at least one second past the last
		// instant the timestamp check still accepts the delivery, so a
		// replay is refused by one check or the other.
		if edge := d.Timestamp.Add(v.p.tolerance + time.Second); edge.After(until) {
			until = edge
		}
		return []string{"webhook:std:" + d.ID}, until
	}
	// The ID header is not signed: deduplicating by it alone would let anyone
	// holding a captured delivery replay it under fresh IDs (and fill the
	// store). So the verified signature — fixed by the body — is claimed
	// first, then the ID.
	return []string{"webhook:mac:" + hex.EncodeToString(d.mac), "webhook:id:" + d.ID}, until
}

// Claim records an authentic delivery d (from Verify) in the replay store
// and reports whether it is the first time d was seen. For
// WebhookHMACSHA256 a delivery counts as seen when either its signature
// (that is, the same body) or its ID was seen within DedupWindow; for
// WebhookStandard when its signed ID was seen within DedupWindow (or,
// if later, before its timestamp left the tolerance window), so a retry
// with a fresh timestamp is also a duplicate. An error from the store
// (for example ErrReplayStoreFull, or ctx's error) is returned wrapped, with
// first false: the caller must refuse the delivery and let the sender retry.
// A delivery that did not come from Verify (an invalid ID or, for
// WebhookHMACSHA256, no verified signature) is refused with
// ErrWebhookMalformed. When a WebhookHMACSHA256 delivery's signature was claimed but its ID could
// not be, the signature claim is released again (if the store implements
// ReplayReleaser), so that the retry is not mistaken for a duplicate.
func (v *WebhookVerifier) Claim(ctx context.Context, d WebhookDelivery) (first bool, err error) {
	if err := checkWebhookID(v.p.scheme, d.ID); err != nil {
		return false, err
	}
	if v.p.scheme == WebhookHMACSHA256 && len(d.mac) != sha256.Size {
		// Not from Verify: there is no verified signature to claim.
		return false, reject(ErrWebhookMalformed, "delivery not verified")
	}
	keys, until := v.replayKeys(d)
	for i, k := range keys {
		first, err := v.p.replay.Claim(ctx, k, until)
		if err != nil {
			v.releaseKeys(context.WithoutCancel(ctx), keys[:i])
			return false, fmt.Errorf("ctoken: webhook replay store: %w", err)
		}
		if !first {
			return false, nil
		}
	}
	return true, nil
}

// release undoes Claim when the store supports it; errors are ignored (the
// delivery then stays claimed, which is the safe side).
func (v *WebhookVerifier) release(ctx context.Context, d WebhookDelivery) {
	keys, _ := v.replayKeys(d)
	v.releaseKeys(ctx, keys)
}

// releaseKeys releases keys when the store supports it, ignoring errors.
func (v *WebhookVerifier) releaseKeys(ctx context.Context, keys []string) {
	if r, ok := v.p.replay.(ReplayReleaser); ok {
		for _, k := range keys {
			_ = r.Release(ctx, k)
		}
	}
}

type webhookDeliveryKey struct{}

// WebhookDeliveryFrom returns the delivery that the middleware verified for
// the request whose context is ctx.
func WebhookDeliveryFrom(ctx context.Context) (WebhookDelivery, bool) {
	d, ok := ctx.Value(webhookDeliveryKey{}).(WebhookDelivery)
	return d, ok
}

// Middleware returns a handler that admits only authentic, first-seen
// deliveries to next:
//
//   - body over MaxBody: 413 Request Entity Too Large (the body is read
//     through http.MaxBytesReader, so no more than the cap is buffered);
//   - body unreadable, or ErrWebhookMalformed: 400 Bad Request;
//   - ErrWebhookSignature or ErrWebhookTimestamp: 401 Unauthorized;
//   - replay store error (full, unreachable): 503 Service Unavailable, so
//     the sender retries later — the delivery is neither dropped nor
//     processed twice;
//   - a duplicate: 200 OK with an empty body, and next is not called;
//   - otherwise next is called with the body readable again from r.Body
//     and the delivery available through WebhookDeliveryFrom.
//
// If next responds with a 5xx status or panics, the claim is released when
// the store implements ReplayReleaser, so the sender's retry is processed
// rather than acknowledged as a duplicate.
func (v *WebhookVerifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(code int, err error) {
			if v.p.onReject != nil {
				v.p.onReject(r, err)
			}
			http.Error(w, http.StatusText(code), code)
		}
		if r.ContentLength > v.p.maxBody {
			refuse(http.StatusRequestEntityTooLarge, reject(ErrWebhookTooLarge, "body over cap"))
			return
		}
		rb := r.Body
		if rb == nil {
			rb = http.NoBody
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, rb, v.p.maxBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				refuse(http.StatusRequestEntityTooLarge, reject(ErrWebhookTooLarge, "body over cap"))
			} else {
				refuse(http.StatusBadRequest, reject(ErrWebhookMalformed, "body unreadable"))
			}
			return
		}
		d, err := v.Verify(r.Header, body)
		if err != nil {
			code := http.StatusUnauthorized
			switch {
			case errors.Is(err, ErrWebhookTooLarge):
				code = http.StatusRequestEntityTooLarge
			case errors.Is(err, ErrWebhookMalformed):
				code = http.StatusBadRequest
			}
			refuse(code, err)
			return
		}
		first, err := v.Claim(r.Context(), d)
		if err != nil {
			refuse(http.StatusServiceUnavailable, err)
			return
		}
		if !first {
			w.WriteHeader(http.StatusOK)
			return
		}
		r2 := r.WithContext(context.WithValue(r.Context(), webhookDeliveryKey{}, d))
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.ContentLength = int64(len(body))
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				v.release(context.WithoutCancel(r.Context()), d)
				panic(p)
			}
			if sw.status >= 500 {
				v.release(context.WithoutCancel(r.Context()), d)
			}
		}()
		next.ServeHTTP(sw, r2)
	})
}

// statusWriter records the status a handler sends.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes through to the underlying writer when it can flush.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
