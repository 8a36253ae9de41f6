package idempotency

import (
	"log/slog"
	"net/http"
	"net/textproto"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/internal/httpx"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// Defaults for the zero fields of a [Config].
const (
	// DefaultHeader is the request header that carries the key.
	DefaultHeader = "Idempotency-Key"
	// DefaultWindow is how long a completed key is remembered, as Stripe
	// does.
	DefaultWindow = 24 * time.Hour
	// DefaultLease is how long one attempt may hold a key.
	DefaultLease = time.Minute
	// DefaultMaxKeyBytes is the longest key, as Stripe's.
	DefaultMaxKeyBytes = 255
	// DefaultMaxRequestBytes is the largest request body read for the
	// fingerprint: 1 MiB.
	DefaultMaxRequestBytes = 1 << 20
	// DefaultMaxResponseBytes is the largest response body stored: 256 KiB.
	DefaultMaxResponseBytes = 256 << 10
	// DefaultChallenge is the WWW-Authenticate value of a 401 when
	// [Config.Challenge] is zero: the bearer-token scheme of RFC 6750.
	DefaultChallenge = "Bearer"
	// DefaultRetryAfter is the Retry-After of a 503 for a store failure.
	DefaultRetryAfter = 5 * time.Second
)

// Upper bounds of a [Config]: a larger value is refused by [New] with
// [ErrConfig], as a mistake (a unit slip) rather than a setting.
const (
	// MaxWindow is the largest [Config.Window]: 366 days.
	MaxWindow = 366 * 24 * time.Hour
	// MaxLease is the largest [Config.Lease]: a day.
	MaxLease = 24 * time.Hour
	// MinLease is the shortest [Config.Lease].
	MinLease = time.Millisecond
	// MaxKeyBytesLimit is the largest [Config.MaxKeyBytes].
	MaxKeyBytesLimit = 4096
	// MaxRequestBytesLimit is the largest [Config.MaxRequestBytes]: 1 GiB.
	MaxRequestBytesLimit = 1 << 30
	// MaxStoredResponseBytes is the largest [Config.MaxResponseBytes]: a
	// stored response (status, headers and body, sealed) must fit in
	// [replay.MaxResultBytes], and the stored headers may take up to
	// [MaxStoredHeaderBytes] of it; the rest of the margin holds the
	// encoding and the 45 bytes sealing adds.
	MaxStoredResponseBytes = replay.MaxResultBytes - 2*MaxStoredHeaderBytes
	// MaxStoredHeaderBytes is the most header bytes (names and values) a
	// stored response keeps; a response whose replayed headers exceed it
	// is treated as too large to store.
	MaxStoredHeaderBytes = 16 << 10
	// MaxRetryAfter is the largest [Config.RetryAfter]: an hour.
	MaxRetryAfter = time.Hour
	// MaxFenceRetryAfter is the longest Retry-After of a 503 for a store
	// refusal that says when it ends ([replay.RetryAt]: a fenced shard,
	// whose end may be a day away): 30 seconds, so that a client that
	// sleeps for the header (go-retryablehttp, the Stainless SDKs) is
	// back within a minute of an operator reopening the store. The body
	// and the log still give the instant the refusal ends.
	MaxFenceRetryAfter = httpx.MaxFenceRetryAfter
)

// ReplayedHeader is the response header a replayed response carries, with
// the value "true" (the name Stripe uses).
const ReplayedHeader = "Idempotent-Replayed"

// DefaultReplayHeaders returns the response headers stored and replayed
// when [Config.ReplayHeaders] is nil: Content-Type, Content-Encoding,
// Content-Language, Content-Location, Location, Link, ETag, Last-Modified
// and Cache-Control, those that describe the body or the created
// resource. Headers of a connection or a session (Set-Cookie) are never
// among them. The slice is the caller's.
func DefaultReplayHeaders() []string {
	return []string{
		"Content-Type", "Content-Encoding", "Content-Language", "Content-Location",
		"Location", "Link", "ETag", "Last-Modified", "Cache-Control",
	}
}

// ErrConfig is the error of [New] for an invalid [Config]: it is
// [ctoken.ErrConfig], so errors.Is(err, ctoken.ErrConfig) holds too.
var ErrConfig = ctoken.ErrConfig

// Config configures a [Middleware]. A zero duration or size means its
// documented default; a negative one, or one over its bound, is refused by
// [New]. Store and Caller are required.
type Config struct {
	// Store keeps keys, fingerprints and responses: a [replay.MemoryStore]
	// for one process, or a shared store (the redisstore and pgstore
	// modules) for a fleet. A store that implements [replay.Bounded] must
	// hold Window + Lease (a record is made up to a Lease after the key
	// was leased, and kept for Window from then).
	Store replay.Recorder
	// Caller returns the authenticated caller of a request; keys are
	// scoped to it, so two callers' keys never meet. An error, or an empty
	// caller, is answered 401 with a problem+json body and the handler is
	// not run. It is called only for covered requests that carry the key
	// header.
	Caller func(r *http.Request) (string, error)
	// Header is the request header that carries the key; zero means
	// [DefaultHeader].
	Header string
	// Required makes a covered request without the header a 400 with a
	// problem+json body naming the header. When false, such a request
	// passes to the handler untouched.
	Required bool
	// Methods are the request methods covered; zero means POST and PATCH.
	// Requests with other methods pass to the handler untouched.
	Methods []string
	// Route returns the route a request's key is scoped to, so that one
	// key sent to two endpoints names two operations; nil means
	// r.Pattern, the pattern of the Go 1.22 [http.ServeMux] that routed
	// the request (so wrap the handler registered on the mux, not the
	// mux), which is "" for a request no ServeMux routed.
	Route func(r *http.Request) string
	// Window is how long a completed key is remembered: its retries get
	// the stored response until then, and after it the key is new again.
	// Zero means [DefaultWindow]; it must be longer than Lease and at most
	// [MaxWindow].
	Window time.Duration
	// Lease is how long one attempt may hold a key: requests with the key
	// meanwhile get 409 (or wait, with Wait), and an attempt whose process
	// dies frees the key when the lease ends. It is the handler's timeout:
	// the handler's context ends at three quarters of it (and not when the
	// client goes away); the rest is for recording the response. Zero
	// means [DefaultLease]; at least [MinLease], at most [MaxLease].
	Lease time.Duration
	// MaxKeyBytes is the longest key, in bytes of the decoded string (a
	// bare key: as sent);
	// zero means [DefaultMaxKeyBytes]; at most [MaxKeyBytesLimit].
	MaxKeyBytes int
	// MaxRequestBytes caps the request body, which is read whole for the
	// fingerprint before anything is claimed; a larger body is answered
	// 413. Zero means [DefaultMaxRequestBytes]; at most
	// [MaxRequestBytesLimit].
	MaxRequestBytes int64
	// MaxResponseBytes caps the response body stored for replay; zero
	// means [DefaultMaxResponseBytes]; at most [MaxStoredResponseBytes].
	// A larger response is sent to the client as the handler writes it,
	// and the key is recorded as done without a replayable response: a
	// retry gets 500 (see the package documentation).
	MaxResponseBytes int
	// ReplayHeaders are the response headers stored and replayed; nil
	// means [DefaultReplayHeaders], a non-nil empty slice none. The first
	// response carries every header the handler set; a replay only these,
	// whatever its record holds (a record made under another
	// configuration replays only the headers named now).
	// Headers of a session or of authentication (Set-Cookie,
	// Clear-Site-Data, WWW-Authenticate, Proxy-Authenticate,
	// Authentication-Info, Proxy-Authentication-Info), the hop-by-hop
	// headers (RFC 9110 §7.6.1), Content-Length and [ReplayedHeader] are
	// refused.
	ReplayHeaders []string
	// RetryAfter is the Retry-After of the 503 answered when the store
	// fails and does not say when its refusal ends ([replay.RetryAt]);
	// zero means [DefaultRetryAfter]; at most [MaxRetryAfter]. A refusal
	// that says when it ends gets the seconds until then, at most
	// [MaxFenceRetryAfter], and a problem body stating the instant.
	RetryAfter time.Duration
	// Challenge is the WWW-Authenticate value of the 401 answered when
	// [Config.Caller] finds no caller (RFC 9110 §15.5.2 requires one);
	// zero means [DefaultChallenge]. It must be printable ASCII (and
	// spaces), else New refuses it.
	Challenge string
	// Observer, if set, is told of every request with a key as an
	// [observe.Event] of kind [observe.KindIdempotency] (the package
	// documentation lists the outcomes). Nil costs nothing.
	Observer observe.Observer
	// Logger receives a record for every failure on the server's side
	// (nil means slog.Default()): at Warn a store that could not lease a key or begin its
	// transaction (503), a handler that returned nothing after its
	// deadline (503) and a retry of a response too large to store; at
	// Error a store failure after the handler ran (a response the store
	// refused for its size or byte budget, a commit of
	// [Config.Transactional] that failed or found its lease lost and a
	// rollback that failed included), a stored response that cannot be
	// replayed, a response too large to store, and an
	// [http.TimeoutHandler] given to [Middleware.Wrap] (once at Wrap and
	// for every covered request). Records carry the method, the route,
	// the status, a fixed reason and the store's error: never a key, a
	// caller or a body.
	Logger *slog.Logger

	// Sealing of stored responses (issue 45).

	// Keys seal every stored response, and is required: the store holds
	// each response encrypted and authenticated (XAES-256-GCM under a
	// subkey of the primary key, bound to the record's store ID and
	// request fingerprint; see the package documentation), never in clear.
	// A record that does not open — edited in the store, moved to another
	// key or request, or sealed under a key no longer in the ring — is
	// answered 500 ([ErrRecord]) and never replayed. Rotate as for tokens:
	// a new primary first, the previous keys after it until
	// [Config.Window] has passed. Nil, or a ring not made by
	// [ctoken.NewKeyring] or [ctoken.ParseKeyring], is refused by [New].
	Keys *ctoken.Keyring

	// Fields added for issue 45 (real clients): keep new fields below.

	// Wait, if set, makes a request whose key another request is running
	// under a live lease wait for it, up to Wait, instead of getting 409
	// at once: it polls the store with backoff (10 ms doubling to 250 ms)
	// and answers the first request's recorded response as a replay, or,
	// if the first request released the key (a retry status, a panic
	// before any status),
	// takes the key and runs the handler itself, as the retry it is. A
	// request with a different body is 422 at once; a client that leaves
	// ends its wait. When Wait passes, the answer is the 409 of a busy
	// key. Zero means no waiting; it must be less than Lease and at most
	// [MaxWait]. A waiting request holds its connection: keep Wait under
	// the server's WriteTimeout.
	Wait time.Duration

	// The handler's run (issue 45).

	// Transactional runs each covered handler in a transaction of the
	// Store, a [replay.Transactor] (the pgstore and sqlitestore modules):
	// the handler's writes through the transaction (pgstore.TxFrom or
	// sqlitestore.TxFrom of r.Context()), the
	// fence check of its lease and the stored response commit together or
	// not at all. The response is held whole, whatever its size, and sent
	// only once the commit succeeded; a commit whose lease was lost, or
	// whose outcome is unknown, is answered 503 instead. New refuses it
	// with a Store that is not a [replay.Transactor]. With a Store that is
	// also a [replay.WorkAcquirer] (pgstore, sqlitestore), the lease is
	// taken inside that transaction ([replay.WorkAcquirer.AcquireWork]):
	// one durable commit per first request. See the package documentation.
	Transactional bool
}

// params is a validated Config.
type params struct {
	store       replay.Recorder
	bounded     bool // store is replay.Bounded
	caller      func(*http.Request) (string, error)
	header      string // canonical
	required    bool
	methods     []string
	route       func(*http.Request) string
	window      time.Duration
	lease       time.Duration
	maxKey      int
	maxRequest  int64
	maxResponse int
	replay      []string // canonical names, no duplicates
	retryAfter  string   // seconds
	challenge   string   // WWW-Authenticate of a 401
	obs         observe.Observer
	log         *slog.Logger
	problems    problems

	records sealer // seals and opens stored responses with Config.Keys

	// Issue 45 (real clients): wait mode and run-time estimates.
	wait time.Duration // Config.Wait; 0: a busy key is 409 at once
	runs runEstimates  // recorded run times per route, for Retry-After

	transactor replay.Transactor // Transactional: the Store; else nil
	// Transactional with a Store that takes the lease in the handler's
	// transaction (replay.WorkAcquirer): the Store; else nil.
	acquirer replay.WorkAcquirer
}

func configError(why string) error { return reason.New(ErrConfig, why) }

// refusedHeaders are response headers a stored response never carries.
var refusedHeaders = map[string]bool{
	"Set-Cookie": true, "Set-Cookie2": true, "Clear-Site-Data": true,
	"Www-Authenticate": true, "Proxy-Authenticate": true,
	"Authentication-Info": true, "Proxy-Authentication-Info": true,
	"Content-Length": true, "Connection": true, "Keep-Alive": true,
	"Transfer-Encoding": true, "Te": true, "Trailer": true, "Upgrade": true,
	"Proxy-Connection": true, ReplayedHeader: true,
}

func newParams(cfg Config) (*params, error) {
	p := &params{
		store: cfg.Store, caller: cfg.Caller, required: cfg.Required, route: cfg.Route,
		obs: cfg.Observer, log: cfg.Logger,
	}
	if p.log == nil {
		p.log = slog.Default() // failures are never dropped for want of a logger
	}
	// Every fault is collected, so that one error names them all.
	var faults []error
	fault := func(err error) { faults = append(faults, err) }
	if cfg.Store == nil {
		fault(configError("idempotency: Store is nil (set a durable store: redisstore, pgstore or sqlitestore; replay.NewMemoryStore forgets every key at a restart)"))
	}
	if cfg.Caller == nil {
		fault(configError("idempotency: Caller is nil (set a function returning the authenticated caller of a request)"))
	}
	var ok bool
	if p.records, ok = newSealer(cfg.Keys); !ok {
		fault(configError("idempotency: Keys is nil or an empty keyring (set Keys, e.g. from ctoken.KeyringFromEnv: stored responses are sealed with it)"))
	}
	p.header = DefaultHeader
	if cfg.Header != "" {
		if !isToken(cfg.Header) {
			fault(configError("idempotency: Header is not a valid header name"))
		}
		p.header = textproto.CanonicalMIMEHeaderKey(cfg.Header)
	}
	if p.header == ReplayedHeader {
		fault(configError("idempotency: Header is the replayed-response header"))
	}
	p.methods = []string{http.MethodPost, http.MethodPatch}
	if cfg.Methods != nil {
		if len(cfg.Methods) == 0 {
			fault(configError("idempotency: Methods is empty (nil means POST and PATCH)"))
		}
		p.methods = make([]string, 0, len(cfg.Methods))
		for _, m := range cfg.Methods {
			if !isToken(m) {
				fault(configError("idempotency: a method of Methods is not a valid method token"))
				break
			}
			p.methods = append(p.methods, m)
		}
	}
	// Checks relating two durations run only when both are valid, so that
	// one bad field is named once.
	var err error
	var leaseErr, windowErr error
	if p.lease, leaseErr = duration(cfg.Lease, DefaultLease, MinLease, MaxLease, "Lease"); leaseErr != nil {
		fault(leaseErr)
	}
	if p.window, windowErr = duration(cfg.Window, DefaultWindow, 1, MaxWindow, "Window"); windowErr != nil {
		fault(windowErr)
	}
	if leaseErr == nil && windowErr == nil && p.window <= p.lease {
		fault(configError("idempotency: Window is not longer than Lease"))
	}
	if b, ok := cfg.Store.(replay.Bounded); ok {
		p.bounded = true
		if leaseErr == nil && windowErr == nil && p.window+p.lease > b.Horizon() {
			fault(configError("idempotency: Window + Lease is longer than the store's Horizon"))
		}
	}
	retry, err := duration(cfg.RetryAfter, DefaultRetryAfter, 1, MaxRetryAfter, "RetryAfter")
	if err != nil {
		fault(err)
	}
	p.retryAfter = httpx.RetryAfterSeconds(retry)
	p.challenge = DefaultChallenge
	if cfg.Challenge != "" {
		for i := 0; i < len(cfg.Challenge); i++ {
			if c := cfg.Challenge[i]; c < 0x20 || c > 0x7e {
				fault(configError("idempotency: Challenge holds a byte that is not printable ASCII"))
				break
			}
		}
		p.challenge = cfg.Challenge
	}
	if cfg.MaxKeyBytes < 0 || cfg.MaxKeyBytes > MaxKeyBytesLimit {
		fault(configError("idempotency: MaxKeyBytes is negative or over MaxKeyBytesLimit"))
	}
	if cfg.MaxRequestBytes < 0 || cfg.MaxRequestBytes > MaxRequestBytesLimit {
		fault(configError("idempotency: MaxRequestBytes is negative or over MaxRequestBytesLimit"))
	}
	if cfg.MaxResponseBytes < 0 || cfg.MaxResponseBytes > MaxStoredResponseBytes {
		fault(configError("idempotency: MaxResponseBytes is negative or over MaxStoredResponseBytes"))
	}
	p.maxKey = orDefault(cfg.MaxKeyBytes, DefaultMaxKeyBytes)
	p.maxRequest = orDefault(cfg.MaxRequestBytes, DefaultMaxRequestBytes)
	p.maxResponse = orDefault(cfg.MaxResponseBytes, DefaultMaxResponseBytes)
	names := cfg.ReplayHeaders
	if names == nil {
		names = DefaultReplayHeaders()
	}
	seen := map[string]bool{}
	for _, n := range names {
		if !isToken(n) {
			fault(configError("idempotency: a name of ReplayHeaders is not a valid header name"))
			break
		}
		n = textproto.CanonicalMIMEHeaderKey(n)
		if refusedHeaders[n] {
			fault(configError("idempotency: ReplayHeaders names a session or authentication header (Set-Cookie, Clear-Site-Data, *-Authenticate, *Authentication-Info), a hop-by-hop header, Content-Length or Idempotent-Replayed"))
			break
		}
		if !seen[n] {
			seen[n] = true
			p.replay = append(p.replay, n)
		}
	}
	lease := p.lease
	if leaseErr != nil {
		lease = MaxLease // check Wait's own bounds; Lease is named already
	}
	if p.wait, err = waitOf(cfg.Wait, lease); err != nil {
		fault(err)
	}
	if cfg.Transactional {
		t, ok := cfg.Store.(replay.Transactor)
		if !ok {
			fault(configError("idempotency: Transactional is set but Store is not a replay.Transactor (the pgstore and sqlitestore modules are)"))
		}
		p.transactor = t
		p.acquirer, _ = t.(replay.WorkAcquirer)
	}
	if err := reason.Faults(faults...); err != nil {
		return nil, err
	}
	p.problems = newProblems(p)
	return p, nil
}

// duration resolves a duration field: zero is def; negative, under lo or
// over hi is an error naming the field.
func duration(d, def, lo, hi time.Duration, field string) (time.Duration, error) {
	if d == 0 {
		return def, nil
	}
	if d < lo || d > hi {
		return 0, configError("idempotency: " + field + " is negative or outside its bounds")
	}
	return d, nil
}

func orDefault[T int | int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// isToken reports whether s is an RFC 9110 token (a header name or a
// method).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// covers reports whether requests with method m are covered.
func (p *params) covers(m string) bool {
	for _, c := range p.methods {
		if c == m {
			return true
		}
	}
	return false
}
