package webhook

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ctoken/ctoken/internal/httpx"
	"github.com/ctoken/ctoken/internal/mac"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// Defaults for the zero fields of a [Config].
const (
	// DefaultMaxBody is the body size cap when [Config.MaxBody] is zero.
	DefaultMaxBody = 1 << 20
	// DefaultTolerance is the timestamp tolerance of schemes that sign a
	// time, both into the past and into the future, when [Config.Tolerance]
	// is zero.
	DefaultTolerance = 5 * time.Minute
	// DefaultDedupWindow is how long a delivery is remembered as seen (at
	// least; see [Config.DedupWindow]) when [Config.DedupWindow] is zero.
	DefaultDedupWindow = 24 * time.Hour
)

// Upper bounds of the durations of a [Config]: a longer one is refused by
// the constructor with [ErrConfig], as a mistake (a unit slip, or
// math.MaxInt64 meant as "forever") rather than a setting.
const (
	// MaxTolerance is the largest [Config.Tolerance]: a day.
	MaxTolerance = 24 * time.Hour
	// MaxDedupWindow is the largest [Config.DedupWindow]: 366 days.
	MaxDedupWindow = 366 * 24 * time.Hour
	// MaxLease is the largest [Config.Lease]: a day.
	MaxLease = 24 * time.Hour
	// MaxNamespaceBytes is the longest [Config.Namespace].
	MaxNamespaceBytes = 128
	// MaxRetryAfter is the largest [Config.RetryAfter]: an hour.
	MaxRetryAfter = time.Hour
	// MaxFenceRetryAfter is the longest Retry-After of a 503 for a replay
	// store refusal that says when it ends ([replay.RetryAt]: a fenced
	// shard, whose end may be a day away): 30 seconds, so that a sender
	// that sleeps for the header is back within a minute of an operator
	// reopening the store. The body still gives the instant the refusal
	// ends, and [Config.OnReject] gets the error, which carries it.
	MaxFenceRetryAfter = httpx.MaxFenceRetryAfter
)

// DefaultRetryAfter is the Retry-After of a 503 for a replay store failure
// when [Config.RetryAfter] is zero: long enough for a store failover or a
// restart to finish, short next to every sender's own retry schedule.
const DefaultRetryAfter = 10 * time.Second

// Config configures a [Verifier] or a [Signer]. Zero durations and sizes
// mean the documented default; negative ones are refused by the
// constructor, as is any option that has no effect under Scheme or on a
// Signer. A Config prints its secrets redacted (see [Config.Format]).
type Config struct {
	// Scheme is the signature scheme, one of the values listed under
	// [Scheme]. It is required.
	Scheme Scheme
	// Secrets are the shared secrets, at least one, in the form the scheme
	// documents (for [StandardWebhooksEd25519], public keys for a Verifier
	// and private keys for a Signer). Any of them verifies a delivery, so a
	// secret can be rotated by adding the new one first and removing the
	// old one later. A secret with white space before or after it (a
	// trailing newline read from a file) is refused with
	// [ErrSecretInvalid] under every scheme, rather than trimmed or taken
	// as part of the secret.
	Secrets []string
	// SignatureHeader and IDHeader rename the headers of [HMACSHA256];
	// empty means [HeaderWebhookSignature] and [HeaderWebhookID]. Other
	// schemes fix their headers and refuse these options.
	SignatureHeader, IDHeader string
	// Tolerance is how far a signed timestamp may lie in the past or in the
	// future; zero means [DefaultTolerance], and at most [MaxTolerance].
	// Schemes that sign no time refuse it. Verifier only.
	Tolerance time.Duration
	// MaxBody caps the body in bytes, checked while reading; zero means
	// [DefaultMaxBody]. Verifier only.
	MaxBody int64
	// Replay records deliveries so each is processed once. It must
	// implement [replay.Leaser] ([replay.MemoryStore] and the redisstore
	// module do); [NewVerifier] refuses a store that does not. Nil means a
	// private [replay.MemoryStore] of [DefaultReplayMax] entries, which
	// protects a single process only; a fleet shares one store. Each
	// delivery takes one entry, held for the DedupWindow; a bounded store
	// that is full refuses new deliveries with 503 until entries expire,
	// and never forgets a live one. Verifier only.
	Replay replay.Store
	// Namespace names the endpoint in the Replay store, so that endpoints
	// sharing one store never take each other's deliveries for duplicates
	// (a sender reuses its delivery and event IDs across the endpoints it
	// delivers to). It is required when Replay is set: every instance of
	// one endpoint sets the same Namespace, different endpoints different
	// ones. It is not a secret and does not change when secrets rotate. 1
	// to [MaxNamespaceBytes] bytes of printable ASCII, with no space
	// before or after. With a nil Replay it may be empty. Verifier only.
	Namespace string
	// DedupWindow is how long a processed delivery is remembered, so that a
	// sender's retry of it is acknowledged rather than processed again;
	// zero means [DefaultDedupWindow], and at most [MaxDedupWindow]. For
	// schemes that sign no time it is
	// also the whole replay protection. A delivery with a signed timestamp
	// is in any case remembered until [replay.SkewMargin] after its
	// timestamp has left the tolerance window, after which the timestamp
	// check refuses a replay by itself. Verifier only.
	DedupWindow time.Duration
	// Dedup chooses which deliveries count as one under a scheme whose
	// delivery ID is not signed; zero means the scheme's safe default (see
	// [Dedup]). A scheme that signs the ID refuses any policy but
	// [DedupDefault] and [DedupID]. Verifier only.
	Dedup Dedup
	// Lease is how long a delivery stays "in progress" in the store while
	// the handler runs; zero means [DefaultLease]. Copies arriving meanwhile
	// are refused with 503 and a Retry-After header. The handler's context
	// ends after three quarters of it, and the rest is for recording the
	// outcome. If the process dies mid-handler, or the store's answer is
	// lost, the delivery can be processed again once the lease ends, so a
	// handler must finish (or give up) within its context's deadline. At
	// least a millisecond and at most [MaxLease]. Verifier only.
	Lease time.Duration
	// RetryAfter is the Retry-After header, in whole seconds (rounded up),
	// of the 503 [Verifier.Middleware] sends when the replay store fails
	// ([ErrReplayStore]) without saying when its refusal ends; zero means
	// [DefaultRetryAfter]; negative or over [MaxRetryAfter] is
	// [ErrConfig]. A store refusal that says when it ends
	// ([replay.RetryAt]: a fenced shard) gets the seconds until then
	// instead, at most [MaxFenceRetryAfter], and a body stating the
	// instant, and a 503 for a copy of a delivery in progress
	// ([ErrInProgress]) the seconds its lease may still run. The one 503
	// without Retry-After is a store refusal only an operator can lift
	// (one matching [replay.ErrConfig]): its body says the receiver needs
	// its operator, and it is never a 4xx, so the sender keeps the
	// delivery. Verifier only.
	RetryAfter time.Duration
	// Transactional makes [Verifier.Middleware] run each delivery's handler
	// inside a transaction of the Replay store ([Lease.Begin]), which must
	// implement [replay.Transactor] (pgstore and sqlitestore do; [NewVerifier] refuses
	// any other store, the default one included, with [ErrConfig]). The
	// handler makes its writes in the transaction it finds in its
	// request's context (pgstore.TxFrom or sqlitestore.TxFrom of
	// r.Context()), and they commit in
	// the same transaction that records the delivery as processed: exactly
	// once per delivery, even when the handler outlives its lease or the
	// process dies before the commit. The handler's response is held until
	// then and sent only once the commit succeeded; see [Verifier.Middleware].
	// With a Replay store that is also a [replay.WorkAcquirer] (pgstore,
	// sqlitestore), the delivery's lease is taken inside that transaction
	// ([replay.WorkAcquirer.AcquireWork]): [Verifier.Acquire] opens the
	// work, and a first delivery costs one durable commit (the work's,
	// with the delivery's record) instead of two; see [Lease]. Verifier
	// only.
	Transactional bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnReject, if set, is called by the middleware with every refused
	// request and its error, for logging ([Reason] gives a log-safe
	// description), including copies refused because the delivery is in
	// progress ([ErrInProgress]). It is not called for duplicates. Verifier
	// only.
	OnReject func(r *http.Request, err error)
	// OnDuplicate, if set, is called by the middleware with every delivery
	// it acknowledges (200) without running the handler because the
	// delivery was already processed: with OnReject, every request that
	// does not reach the handler is seen by a hook. Verifier only.
	OnDuplicate func(r *http.Request, d Delivery)
	// OnLeaseError, if set, is called by the middleware when, after the
	// handler ran, the store could not record the outcome (err matches
	// [ErrReplayStore]; see [Lease.Confirm] and [Lease.Release]). The
	// handler's response is sent unchanged, except under Transactional,
	// where a confirmation that failed discards it for a 503. Verifier
	// only.
	OnLeaseError func(r *http.Request, d Delivery, err error)
	// Observer, if set, is told of every outcome as an [observe.Event] of
	// kind [observe.KindWebhook] (see [Verifier.Verify], [Verifier.Acquire],
	// [Lease.Begin], [Lease.Confirm], [Lease.Release] and [Signer.Sign] for
	// which): the
	// same observer type the root package's configs take, so one metrics or
	// log adapter serves both. It is called synchronously, once per
	// operation, and must not block. Nil costs nothing.
	Observer observe.Observer
}

// params is a validated Config. Header names are canonical keys.
type params struct {
	scheme                        Scheme
	set                           atomic.Pointer[keySet] // the secrets in effect, swapped whole by SetSecrets
	signer                        bool                   // the params of a Signer
	edMsgs                        sync.Pool              // StandardWebhooksEd25519 verifier: *[]byte buffers for id.timestamp.body
	idHeader, tsHeader, sigHeader string
	idAlt, sigAlt                 string // other names of the ID and signature headers ([Shopify]); "" for none
	retryAfter                    string // Retry-After of a 503 for a store failure, in seconds
	tolerance                     time.Duration
	maxBody                       int64
	store                         replay.Store
	namespace                     [sha256.Size]byte   // SHA-256 of Config.Namespace
	leaser                        replay.Leaser       // store, as a Leaser
	transactor                    replay.Transactor   // store, as a Transactor; nil if it is not one
	acquirer                      replay.WorkAcquirer // under Transactional, store as a WorkAcquirer; else nil
	transactional                 bool                // Config.Transactional
	dedup                         time.Duration
	dedupBy                       Dedup // resolved: never DedupDefault
	lease                         time.Duration
	now                           func() time.Time
	onReject                      func(*http.Request, error)
	onDuplicate                   func(*http.Request, Delivery)
	onLeaseError                  func(*http.Request, Delivery, error)
	obs                           observe.Observer
}

// newParams validates cfg for a verifier or, when signer, for a signer.
func newParams(cfg Config, signer bool) (*params, error) {
	// Every fault of the fields checked before the scheme configures is
	// collected, so that one error names them all (an all-zero Config: no
	// scheme and no secret).
	var faults []error
	switch {
	case cfg.Scheme == nil:
		faults = append(faults, errNoScheme)
	case !ownScheme(cfg.Scheme): // a type embedding Scheme: its methods are not ours
		faults = append(faults, errForeignScheme)
	}
	if signer && (cfg.Tolerance != 0 || cfg.MaxBody != 0 || cfg.Replay != nil || cfg.Namespace != "" || cfg.DedupWindow != 0 || cfg.OnReject != nil) {
		faults = append(faults, errSignerOption)
	}
	if signer && (cfg.Dedup != DedupDefault || cfg.Lease != 0 || cfg.RetryAfter != 0 || cfg.OnDuplicate != nil || cfg.OnLeaseError != nil) {
		faults = append(faults, errSignerLeaseOpts)
	}
	if signer && cfg.Transactional {
		faults = append(faults, errSignerTx)
	}
	switch {
	case cfg.Lease < 0:
		faults = append(faults, errNegLease)
	case cfg.Lease > 0 && cfg.Lease < time.Millisecond:
		faults = append(faults, errShortLease)
	case cfg.Lease > MaxLease:
		faults = append(faults, errLongLease)
	}
	switch {
	case cfg.Tolerance < 0:
		faults = append(faults, errNegTolerance)
	case cfg.Tolerance > MaxTolerance:
		faults = append(faults, errLongTolerance)
	}
	if cfg.MaxBody < 0 {
		faults = append(faults, errNegMaxBody)
	}
	switch {
	case cfg.DedupWindow < 0:
		faults = append(faults, errNegDedup)
	case cfg.DedupWindow > MaxDedupWindow:
		faults = append(faults, errLongDedup)
	}
	switch {
	case cfg.RetryAfter < 0:
		faults = append(faults, errNegRetryAfter)
	case cfg.RetryAfter > MaxRetryAfter:
		faults = append(faults, errLongRetryAfter)
	}
	if err := checkNamespace(cfg.Namespace, cfg.Replay != nil && !signer); err != nil {
		faults = append(faults, err)
	}
	var ks *keySet
	var err error
	if cfg.Scheme != nil && ownScheme(cfg.Scheme) {
		ks, err = loadSecrets(cfg.Scheme, cfg.Secrets, signer)
	} else if len(cfg.Secrets) == 0 {
		err = errNoSecrets
	}
	if err != nil {
		faults = append(faults, err)
	}
	if err := reason.Faults(faults...); err != nil {
		return nil, err
	}
	p := &params{
		scheme:       cfg.Scheme,
		maxBody:      cfg.MaxBody,
		store:        cfg.Replay,
		namespace:    sha256.Sum256([]byte(cfg.Namespace)),
		dedup:        cfg.DedupWindow,
		lease:        cfg.Lease,
		now:          cfg.Now,
		onReject:     cfg.OnReject,
		onDuplicate:  cfg.OnDuplicate,
		onLeaseError: cfg.OnLeaseError,
		obs:          cfg.Observer,
		signer:       signer,
	}
	p.set.Store(ks)
	if err := cfg.Scheme.configure(&cfg, p); err != nil {
		return nil, err
	}
	p.idHeader = http.CanonicalHeaderKey(p.idHeader)
	p.sigHeader = http.CanonicalHeaderKey(p.sigHeader)
	if p.tsHeader != "" {
		p.tsHeader = http.CanonicalHeaderKey(p.tsHeader)
	}
	if p.maxBody == 0 {
		p.maxBody = DefaultMaxBody
	}
	if p.dedup == 0 {
		p.dedup = DefaultDedupWindow
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.lease == 0 {
		p.lease = DefaultLease
	}
	p.retryAfter = httpx.RetryAfterSeconds(cmp.Or(cfg.RetryAfter, DefaultRetryAfter))
	if signer {
		return p, nil
	}
	if p.dedupBy, err = resolveDedup(cfg.Scheme, cfg.Dedup); err != nil {
		return nil, err
	}
	if p.store == nil {
		p.store = &replay.MemoryStore{Max: DefaultReplayMax, Now: cfg.Now}
	}
	leaser, ok := p.store.(replay.Leaser)
	if !ok {
		return nil, errStoreNoLease
	}
	p.leaser = leaser
	p.transactor, _ = p.store.(replay.Transactor)
	if cfg.Transactional && p.transactor == nil {
		return nil, errNotTransactor
	}
	p.transactional = cfg.Transactional
	if p.transactional {
		p.acquirer, _ = p.store.(replay.WorkAcquirer)
	}
	if b, ok := p.store.(replay.Bounded); ok && !p.fitsHorizon(b.Horizon()) {
		return nil, errStoreHorizon
	}
	return p, nil
}

// newKey parses one secret with parse into a pooled HMAC key.
func newKey(parse func(string) ([]byte, error), secret string) (*mac.Key, error) {
	raw, err := parse(secret)
	if err != nil {
		return nil, err
	}
	defer clear(raw)
	k, err := mac.New(raw)
	if err != nil { // the only failure: a short key in FIPS 140-3 mode
		return nil, errSecretFIPS
	}
	return k, nil
}

// surroundedBySpace reports whether s starts or ends with white space (as
// strings.TrimSpace sees it). It reads only the first and last rune.
func surroundedBySpace(s string) bool {
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && (unicode.IsSpace(first) || unicode.IsSpace(last))
}

// checkNamespace validates a [Config.Namespace]; required says a shared
// Replay store is configured.
func checkNamespace(ns string, required bool) error {
	switch {
	case ns == "" && required:
		return errNoNamespace
	case ns == "":
		return nil
	case len(ns) > MaxNamespaceBytes:
		return errLongNamespace
	case ns[0] == ' ' || ns[len(ns)-1] == ' ':
		return errNamespaceText
	}
	for i := 0; i < len(ns); i++ {
		if ns[i] < 0x20 || ns[i] > 0x7e {
			return errNamespaceText
		}
	}
	return nil
}

// validHeaderName reports whether s is a non-empty HTTP token (RFC 9110).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// redacted describes cfg without its secrets.
func (cfg Config) redacted() string {
	return "webhook.Config{Scheme: " + schemeName(cfg.Scheme) +
		", Secrets: " + redactedSecrets(len(cfg.Secrets)) +
		", Namespace: " + strconv.Quote(cfg.Namespace) +
		", SignatureHeader: " + strconv.Quote(cfg.SignatureHeader) +
		", IDHeader: " + strconv.Quote(cfg.IDHeader) +
		", Tolerance: " + cfg.Tolerance.String() +
		", MaxBody: " + strconv.FormatInt(cfg.MaxBody, 10) +
		", DedupWindow: " + cfg.DedupWindow.String() +
		", Dedup: " + cfg.Dedup.String() +
		", Lease: " + cfg.Lease.String() + "}"
}

func redactedSecrets(n int) string { return "[" + strconv.Itoa(n) + " redacted]" }

// String returns a description of cfg with its secrets redacted.
func (cfg Config) String() string { return cfg.redacted() }

// Format prints cfg with its secrets redacted under every verb (%v, %+v,
// %#v, %s, %q, ...), by value and by pointer.
func (cfg Config) Format(f fmt.State, verb rune) { formatRedacted(f, verb, cfg.redacted()) }

// LogValue gives log/slog a description of cfg with its secrets redacted.
func (cfg Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("scheme", schemeName(cfg.Scheme)),
		slog.Int("secrets", len(cfg.Secrets)),
	)
}

// MarshalJSON encodes a description of cfg with its secrets redacted.
func (cfg Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Scheme                    string
		Secrets                   string
		Namespace                 string
		SignatureHeader, IDHeader string
		Tolerance, DedupWindow    time.Duration
		MaxBody                   int64
		Dedup                     string
		Lease                     time.Duration
	}{schemeName(cfg.Scheme), redactedSecrets(len(cfg.Secrets)), cfg.Namespace, cfg.SignatureHeader, cfg.IDHeader,
		cfg.Tolerance, cfg.DedupWindow, cfg.MaxBody, cfg.Dedup.String(), cfg.Lease})
}

// schemeName names s without calling methods of a type that is not the
// package's own.
func schemeName(s Scheme) string {
	switch {
	case s == nil:
		return "<nil>"
	case ownScheme(s):
		return s.String()
	}
	return "<not a webhook scheme>"
}

// formatRedacted prints text for any verb: quoted under %q, as is otherwise.
func formatRedacted(f fmt.State, verb rune, text string) {
	if verb == 'q' {
		text = strconv.Quote(text)
	}
	f.Write([]byte(text))
}

// describe is the redacted description of a verifier's or signer's params.
func (p *params) describe(kind string) string {
	if p == nil {
		return "webhook." + kind + "{zero}"
	}
	return "webhook." + kind + "{Scheme: " + p.scheme.String() + ", Secrets: " + redactedSecrets(p.secretCount()) + "}"
}

func (p *params) logValue() slog.Value {
	if p == nil {
		return slog.GroupValue(slog.Bool("zero", true))
	}
	return slog.GroupValue(slog.String("scheme", p.scheme.String()), slog.Int("secrets", p.secretCount()))
}

// secretCount is the number of configured secrets or keys.
func (p *params) secretCount() int {
	ks := p.set.Load()
	return len(ks.keys) + len(ks.edPub) + len(ks.edPriv)
}

// fitsHorizon reports whether every entry the verifier hands a bounded
// store stays within its horizon: a done record is held until the later
// of now + DedupWindow and the delivery's timestamp (at most Tolerance
// ahead) + Tolerance + replay.SkewMargin, plus replay.SkewMargin for an
// instance whose clock runs ahead of the store's; a lease for Lease. A
// store that refused the confirmation would leave each delivery to be
// processed again after its lease.
func (p *params) fitsHorizon(h time.Duration) bool {
	hold := max(p.dedup, 2*p.tolerance+replay.SkewMargin) + replay.SkewMargin
	return hold <= h && p.lease <= h
}
