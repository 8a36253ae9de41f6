package exchange

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

// OAuth 2.0 Token Exchange (RFC 8693) identifiers used by [Handler].
const (
	// GrantTypeTokenExchange is the grant_type of an RFC 8693 token
	// exchange request.
	GrantTypeTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	// TokenTypeOneTime is the subject_token_type naming a one-time token
	// of this package ("ot1.", minted by [ctoken.OneTimeIssuer.Mint]). It is this
	// package's own URN, not one registered with IANA.
	TokenTypeOneTime = "urn:ctoken:params:oauth:token-type:one-time"
	// TokenTypeAccessToken is RFC 8693's token type for an access token
	// (opaque or not); the issued_token_type of an [Handler] whose
	// [Config.IssuedTokenType] is empty.
	TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
	// TokenTypeJWT is RFC 8693's token type for a JWT, for an
	// [Config.IssuedTokenType] whose credentials are JWTs.
	TokenTypeJWT = "urn:ietf:params:oauth:token-type:jwt"

	// MaxBodyBytes caps an exchange request's body. A request whose
	// Content-Length is over the cap is refused before its body is read,
	// and a body that grows past it while being read is refused before it
	// is parsed: 413 with the error invalid_request.
	MaxBodyBytes = 4096
)

// Errors an [Config.Authorize] callback returns (wrapped or not) to
// choose the refusal the client sees. Any other error refuses the exchange
// as invalid_grant. In every case the token is not consumed.
var (
	// ErrTarget refuses an audience or resource the server will not
	// issue a credential for: 400 invalid_target (RFC 8693 §2.2.2).
	ErrTarget = errors.New("ctoken: exchange target refused")
	// ErrScope refuses a requested scope: 400 invalid_scope (RFC
	// 6749 §5.2).
	ErrScope = errors.New("ctoken: exchange scope refused")
	// ErrUnavailable reports that the callback could not decide
	// (its database is down, say): 503 temporarily_unavailable, so the
	// client retries with the same, still unused, token.
	ErrUnavailable = errors.New("ctoken: exchange temporarily unavailable")
)

// Request is what an [Handler] hands its callbacks: the
// authenticated content of the presented one-time token and the request's
// optional RFC 8693 parameters. It never holds the token itself.
type Request struct {
	// Token is the verified content of the subject token: purpose (always
	// the handler issuer's), claims, issue and expiry times.
	Token ctoken.OneTimeToken
	// Audience and Resource are the request's audience and resource
	// parameters (RFC 8693 §2.1), each possibly repeated, in request order;
	// nil when absent. The handler does not interpret them: a callback
	// that does not issue for a named target refuses it with
	// [ErrTarget].
	Audience, Resource []string
	// Scope is the request's scope parameter split on spaces; nil when
	// absent. The handler does not interpret it: a callback refuses what
	// it does not grant with [ErrScope], and sets
	// [Credential.Scope] when it grants less than was asked.
	Scope []string
	// RequestedTokenType is the request's requested_token_type: empty, or
	// equal to the handler's issued token type (any other value is refused
	// before the callbacks run).
	RequestedTokenType string
}

// Credential is what [Config.Issue] returns: the bearer the client
// receives in exchange for its one-time token. The application chooses
// what it is (a JWT, an opaque random string stored server-side, ...).
type Credential struct {
	// AccessToken is the bearer credential; it must not be empty.
	AccessToken string
	// ExpiresIn is the credential's lifetime, sent as expires_in in whole
	// seconds (rounded down); it must be at least one second. A credential
	// that never expires is refused.
	ExpiresIn time.Duration
	// Scope is the granted scope, sent when not empty. RFC 6749 §5.1
	// requires it when it differs from the requested scope.
	Scope string
}

// Config configures an [Handler]. Issuer, Authorize and
// Issue are required.
type Config struct {
	// Issuer verifies and redeems the presented one-time tokens; only
	// tokens of its purpose are accepted. Its replay store decides single
	// use: a fleet of handlers shares one (redisstore).
	Issuer *ctoken.OneTimeIssuer
	// Authorize decides, before the token is consumed, whether the exchange
	// may happen (is the run still active? is this agent allowed? is the
	// audience one this server issues for?). A nil error accepts. An error
	// refuses and leaves the token unused: invalid_target for
	// [ErrTarget], invalid_scope for [ErrScope], 503 for
	// [ErrUnavailable] or a context error, invalid_grant for any
	// other. The error is logged, never sent to the client.
	Authorize func(ctx context.Context, req Request) error
	// Issue mints the credential, after the token has been redeemed: it
	// runs at most once per token, fleet-wide when the replay store is
	// shared. An error (or an invalid [Credential]) is 500 server_error
	// and the token stays consumed: a one-time token is never accepted
	// twice, even after a failure.
	Issue func(ctx context.Context, req Request) (Credential, error)
	// IssuedTokenType is the issued_token_type of every response, an
	// absolute URI; empty means [TokenTypeAccessToken]. A request whose
	// requested_token_type names another type is refused.
	IssuedTokenType string
	// Logger receives one record per refused or failed exchange (level
	// Warn, or Error for a failure of the server) and one per credential
	// issued (Info), with fixed messages and reasons; never the token or
	// the credential. Nil means no logging.
	Logger *slog.Logger
	// Observer, if set, is told of the outcome of every exchange request
	// ([observe.KindExchange]): [observe.OutcomeIssued] when a credential is issued;
	// [observe.OutcomeRefused] with the token's [observe.RefusalReason], or
	// [observe.ReasonExchangeRequest] for a malformed request,
	// [observe.ReasonAuthorizeRefused] when Authorize refuses and
	// [observe.ReasonIssueFailed] when Issue fails; [observe.OutcomeDuplicate] for a token
	// already redeemed; [observe.OutcomeStoreFailure] when the replay store cannot
	// answer. Redeem's store latency is reported. The Issuer's own
	// [ctoken.OneTimeConfig.Observer], if any, sees the Verify and Redeem calls
	// too. See [observe.Observer]; nil costs nothing.
	Observer observe.Observer
}

// Handler is an http.Handler that exchanges a one-time token for a
// credential, speaking OAuth 2.0 Token Exchange (RFC 8693) as a token
// endpoint for public clients (it does no client authentication: the
// one-time token is the only credential presented).
//
// Request: POST, Content-Type application/x-www-form-urlencoded (charset,
// if given, UTF-8), a body of at most [MaxBodyBytes] with
//
//	grant_type=urn:ietf:params:oauth:grant-type:token-exchange
//	subject_token=<the ot1. token>
//	subject_token_type=urn:ctoken:params:oauth:token-type:one-time
//
// and optionally audience and resource (repeatable), scope and
// requested_token_type. Parameters are read from the body only; an empty
// value counts as absent (RFC 6749 §3.1); unrecognized parameters are
// ignored (RFC 6749 §3.2); a parameter other than audience and resource
// given twice is invalid_request; actor_token (delegation) is not
// supported and is invalid_request.
//
// Order, and what it guarantees:
//
//  1. The request is checked and the token verified ([ctoken.OneTimeIssuer.Verify]:
//     MAC, purpose, expiry). The replay store is not consulted.
//  2. [Config.Authorize] decides on the verified claims. A refusal
//     leaves the token unused: the same token can be exchanged later.
//  3. The token is redeemed ([ctoken.OneTimeIssuer.Redeem]): of any number of
//     concurrent exchanges of one token, on one instance or across a fleet
//     sharing a replay store, at most one gets past this step. A replay
//     store that cannot answer is 503: fail closed, the token unused.
//  4. [Config.Issue] mints the credential, which is returned. It is
//     never called for a token that was not redeemed by this request, so
//     no credential is minted for a replayed token.
//
// Success is 200 with the RFC 6749 §5.1 JSON body
//
//	{"access_token":"...","issued_token_type":"...","token_type":"Bearer","expires_in":900}
//
// (plus "scope" when the credential names one). Refusals are RFC 6749 §5.2
// JSON bodies {"error":"...","error_description":"..."} with a fixed
// description: 405 (with Allow: POST) for a method other than POST, 413
// for a body over the cap, 400 invalid_request for a malformed request,
// 400 unsupported_grant_type for another grant_type, 400 invalid_grant
// for a token that is invalid, of another purpose, expired or already
// used, or that Authorize refused, 400 invalid_target or invalid_scope
// when Authorize says so, 503 temporarily_unavailable when the replay
// store or Authorize cannot decide, 500 server_error when Issue fails.
// Every response carries Cache-Control: no-store and Pragma: no-cache.
//
// A refused token uses invalid_grant, where RFC 8693 §2.2.2 asks for
// invalid_request, so that a client can tell a token it must not retry
// from a request it built wrongly; RFC 6749 §5.2 defines invalid_grant as
// a grant that is "invalid, expired, revoked".
//
// No response, log record or error text contains the presented token, and
// the callbacks never see it. An Handler is safe for concurrent
// use; it prints as a description, never a key.
type Handler struct {
	issuer    *ctoken.OneTimeIssuer
	authorize func(context.Context, Request) error
	issue     func(context.Context, Request) (Credential, error)
	typ       string
	log       *slog.Logger
	obs       observe.Observer
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a handler for cfg. A nil Issuer, or one not
// made by [ctoken.NewOneTimeIssuer], is [ctoken.ErrNoKey]; a nil Authorize or Issue, or an
// IssuedTokenType that is not an absolute URI, is [ctoken.ErrConfig]. A
// config with several faults is refused with one error naming each, with
// its fix, which errors.Is matches against each fault's sentinel.
func NewHandler(cfg Config) (*Handler, error) {
	var faults []error
	if cfg.Issuer == nil || cfg.Issuer.Purpose() == "" {
		faults = append(faults, reason.New(ctoken.ErrNoKey, "exchange.Config.Issuer is nil or not made by ctoken.NewOneTimeIssuer (set the issuer that mints the one-time tokens this endpoint exchanges)"))
	}
	if cfg.Authorize == nil {
		faults = append(faults, reason.New(ctoken.ErrConfig, "exchange.Config.Authorize is nil (the server decides before a token is consumed: set a function that accepts or refuses each exchange)"))
	}
	if cfg.Issue == nil {
		faults = append(faults, reason.New(ctoken.ErrConfig, "exchange.Config.Issue is nil (set a function that mints the credential for a redeemed token)"))
	}
	typ := cfg.IssuedTokenType
	if typ == "" {
		typ = TokenTypeAccessToken
	} else if u, err := url.Parse(typ); err != nil || !u.IsAbs() || strings.ContainsAny(typ, " \t\r\n") {
		faults = append(faults, reason.New(ctoken.ErrConfig, "exchange.Config.IssuedTokenType is not an absolute URI (leave it empty for TokenTypeAccessToken, or set one such as TokenTypeJWT)"))
	}
	if err := reason.Faults(faults...); err != nil {
		return nil, err
	}
	return &Handler{issuer: cfg.Issuer, authorize: cfg.Authorize, issue: cfg.Issue, typ: typ, log: cfg.Logger, obs: cfg.Observer}, nil
}

// exchangeRefusal is one refusal: status, RFC 6749 error code and a fixed
// description for the client.
type exchangeRefusal struct {
	status      int
	code        string
	description string
}

// RFC 6749 §5.2 and RFC 8693 §2.2.2 error codes.
const (
	oauthInvalidRequest       = "invalid_request"
	oauthInvalidGrant         = "invalid_grant"
	oauthUnsupportedGrantType = "unsupported_grant_type"
	oauthInvalidTarget        = "invalid_target"
	oauthInvalidScope         = "invalid_scope"
	oauthServerError          = "server_error"
	oauthUnavailable          = "temporarily_unavailable"
)

func badRequest(description string) exchangeRefusal {
	return exchangeRefusal{http.StatusBadRequest, oauthInvalidRequest, description}
}

func badGrant(description string) exchangeRefusal {
	return exchangeRefusal{http.StatusBadRequest, oauthInvalidGrant, description}
}

// exchangeSingleParams are the parameters that may appear at most once.
var exchangeSingleParams = []string{
	"grant_type", "subject_token", "subject_token_type", "requested_token_type",
	"scope", "actor_token", "actor_token_type",
}

// ServeHTTP handles one token exchange request; see [Handler].
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h == nil || h.issuer == nil {
		h.refuse(w, r, exchangeRefusal{http.StatusInternalServerError, oauthServerError, "the exchange endpoint is not configured"}, "handler not made by NewHandler", nil)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.observe(observe.ReasonExchangeRequest, 0)
		h.refuse(w, r, exchangeRefusal{http.StatusMethodNotAllowed, oauthInvalidRequest, "the token endpoint accepts POST only"}, "method not POST", nil)
		return
	}
	form, ref, reason := readExchangeForm(w, r)
	if reason != "" {
		h.observe(observe.ReasonExchangeRequest, 0)
		h.refuse(w, r, ref, reason, nil)
		return
	}
	req, ref, reason := h.parse(form)
	if reason != "" {
		h.observe(observe.ReasonExchangeRequest, 0)
		h.refuse(w, r, ref, reason, nil)
		return
	}
	subject := form.Get("subject_token")

	tok, err := h.issuer.Verify(subject)
	if err != nil {
		h.observe(ctoken.Reason(err), 0)
		h.refuse(w, r, tokenRefusal(err), "subject_token refused", err)
		return
	}
	req.Token = tok
	req.Token.Claims = maps.Clone(tok.Claims) // Authorize cannot change what is redeemed
	ctx := r.Context()
	if err := h.authorize(ctx, req); err != nil {
		var ref exchangeRefusal
		switch {
		case errors.Is(err, ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			ref = exchangeRefusal{http.StatusServiceUnavailable, oauthUnavailable, "the server cannot decide now; retry with the same token"}
		case errors.Is(err, ErrTarget):
			ref = exchangeRefusal{http.StatusBadRequest, oauthInvalidTarget, "the server does not issue for the requested audience or resource"}
		case errors.Is(err, ErrScope):
			ref = exchangeRefusal{http.StatusBadRequest, oauthInvalidScope, "the requested scope is not granted"}
		default:
			ref = badGrant("the server refused the exchange")
		}
		h.observe(observe.ReasonAuthorizeRefused, 0)
		h.refuse(w, r, ref, "Authorize refused", err)
		return
	}
	var start time.Time
	if h.obs != nil {
		start = time.Now()
	}
	claims, err := h.issuer.Redeem(ctx, subject, tok.Claims)
	var took time.Duration
	if h.obs != nil {
		took = max(time.Since(start), 1)
	}
	if err != nil {
		h.observe(ctoken.Reason(err), took)
		h.refuse(w, r, tokenRefusal(err), "redeem refused", err)
		return
	}
	req.Token.Claims = claims
	cred, err := h.issue(ctx, req)
	if err == nil {
		switch {
		case cred.AccessToken == "":
			err = errors.New("exchange: Config.Issue returned an empty AccessToken")
		case cred.ExpiresIn < time.Second:
			err = errors.New("exchange: Config.Issue returned an ExpiresIn under one second")
		}
	}
	if err != nil {
		h.observe(observe.ReasonIssueFailed, took)
		h.refuse(w, r, exchangeRefusal{http.StatusInternalServerError, oauthServerError, "the credential could not be issued; the token is spent"}, "Issue failed", err)
		return
	}
	body, err := json.Marshal(exchangeSuccess{
		AccessToken:     cred.AccessToken,
		IssuedTokenType: h.typ,
		TokenType:       "Bearer",
		ExpiresIn:       int64(cred.ExpiresIn / time.Second),
		Scope:           cred.Scope,
	})
	if err != nil { // only strings and an integer: cannot happen
		h.observe(observe.ReasonIssueFailed, took)
		h.refuse(w, r, exchangeRefusal{http.StatusInternalServerError, oauthServerError, "the credential could not be encoded"}, "encoding failed", err)
		return
	}
	if h.obs != nil {
		h.obs.Observe(observe.Event{Kind: observe.KindExchange, Outcome: observe.OutcomeIssued, StoreLatency: took})
	}
	if h.log != nil {
		h.log.LogAttrs(ctx, slog.LevelInfo, "ctoken exchange: credential issued",
			slog.String("purpose", tok.Purpose), slog.Int64("expires_in", int64(cred.ExpiresIn/time.Second)))
	}
	writeExchangeJSON(w, http.StatusOK, body)
}

// observe reports a refused exchange to the observer, if any. A replay
// store's failure (no reason of this package) is observe.OutcomeStoreFailure.
func (h *Handler) observe(why observe.RefusalReason, store time.Duration) {
	if h.obs == nil {
		return
	}
	e := observe.Event{Kind: observe.KindExchange, Reason: why, Outcome: outcomeOf(why), StoreLatency: store}
	h.obs.Observe(e)
}

// exchangeSuccess is the RFC 6749 §5.1 / RFC 8693 §2.2.1 response.
type exchangeSuccess struct {
	AccessToken     string `json:"access_token"`
	IssuedTokenType string `json:"issued_token_type"`
	TokenType       string `json:"token_type"`
	ExpiresIn       int64  `json:"expires_in"`
	Scope           string `json:"scope,omitempty"`
}

// exchangeFailure is the RFC 6749 §5.2 response.
type exchangeFailure struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

// tokenRefusal maps a Verify or Redeem error: a refused token is
// invalid_grant; anything else (the replay store) is 503.
func tokenRefusal(err error) exchangeRefusal {
	switch {
	case errors.Is(err, ctoken.ErrOneTimeExpired):
		return badGrant("subject_token has expired")
	case errors.Is(err, ctoken.ErrOneTimeRedeemed):
		return badGrant("subject_token was already used")
	case errors.Is(err, ctoken.ErrOneTimeInvalid), errors.Is(err, ctoken.ErrOneTimeClaims):
		return badGrant("subject_token is invalid")
	case errors.Is(err, ctoken.ErrNoKey):
		return exchangeRefusal{http.StatusInternalServerError, oauthServerError, "the exchange endpoint is not configured"}
	}
	return exchangeRefusal{http.StatusServiceUnavailable, oauthUnavailable, "the server cannot decide now; retry with the same token"}
}

// readExchangeForm checks the content type, reads the body under the cap
// and parses it. On refusal it returns a non-empty log reason.
func readExchangeForm(w http.ResponseWriter, r *http.Request) (url.Values, exchangeRefusal, string) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return nil, badRequest("Content-Type must be application/x-www-form-urlencoded"), "wrong content type"
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return nil, badRequest("the only Content-Type parameter accepted is charset=UTF-8"), "wrong content type parameter"
		}
	}
	tooLarge := exchangeRefusal{http.StatusRequestEntityTooLarge, oauthInvalidRequest, "request body over " + strconv.Itoa(MaxBodyBytes) + " bytes"}
	if r.ContentLength > MaxBodyBytes {
		return nil, tooLarge, "body over cap (Content-Length)"
	}
	src := r.Body
	if src == nil { // a server never sends one, but a handler called directly may
		src = http.NoBody
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, src, MaxBodyBytes))
	if err != nil {
		var over *http.MaxBytesError
		if errors.As(err, &over) {
			return nil, tooLarge, "body over cap"
		}
		return nil, badRequest("the request body could not be read"), "body read failed"
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, badRequest("the request body is not a valid form"), "malformed form"
	}
	if r.URL.Query().Has("subject_token") {
		return nil, badRequest("subject_token must be sent in the body, not the URL"), "subject_token in URL"
	}
	return form, exchangeRefusal{}, ""
}

// parse checks the parameters and fills an Request (without the
// token's content).
func (h *Handler) parse(form url.Values) (Request, exchangeRefusal, string) {
	var req Request
	for _, name := range exchangeSingleParams {
		if len(form[name]) > 1 {
			return req, badRequest("parameter " + name + " is repeated"), "repeated parameter"
		}
	}
	switch gt := form.Get("grant_type"); gt {
	case "":
		return req, badRequest("grant_type is missing"), "grant_type missing"
	case GrantTypeTokenExchange:
	default:
		return req, exchangeRefusal{http.StatusBadRequest, oauthUnsupportedGrantType, "grant_type must be " + GrantTypeTokenExchange}, "unsupported grant_type"
	}
	switch {
	case form.Get("subject_token") == "":
		return req, badRequest("subject_token is missing"), "subject_token missing"
	case form.Get("subject_token_type") == "":
		return req, badRequest("subject_token_type is missing"), "subject_token_type missing"
	case form.Get("subject_token_type") != TokenTypeOneTime:
		return req, badRequest("subject_token_type must be " + TokenTypeOneTime), "unsupported subject_token_type"
	case form.Get("actor_token") != "" || form.Get("actor_token_type") != "":
		return req, badRequest("actor_token (delegation) is not supported"), "actor_token given"
	}
	if rt := form.Get("requested_token_type"); rt != "" {
		if rt != h.typ {
			return req, badRequest("requested_token_type must be " + h.typ + " or absent"), "unsupported requested_token_type"
		}
		req.RequestedTokenType = rt
	}
	req.Audience = nonEmpty(form["audience"])
	req.Resource = nonEmpty(form["resource"])
	if s := form.Get("scope"); s != "" {
		req.Scope = strings.Fields(s)
	}
	return req, exchangeRefusal{}, ""
}

// nonEmpty drops empty values (RFC 6749 §3.1: a parameter without a value
// is omitted); nil when none remain.
func nonEmpty(vs []string) []string {
	var out []string
	for _, v := range vs {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// refuse logs the refusal (reason and the error's fixed ctoken.Reason, or the
// callback's error) and writes the RFC 6749 §5.2 body.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, ref exchangeRefusal, reason string, err error) {
	if h != nil && h.log != nil {
		level := slog.LevelWarn
		if ref.status >= 500 {
			level = slog.LevelError
		}
		attrs := []slog.Attr{slog.Int("status", ref.status), slog.String("error", ref.code), slog.String("reason", reason)}
		if err != nil {
			if why := ctoken.Reason(err); why != observe.ReasonNone {
				attrs = append(attrs, slog.String("check", why.String()))
			}
			if !isOneTimeRefusal(err) {
				// The callbacks' and the replay store's errors: they never
				// saw the token.
				attrs = append(attrs, slog.String("err", err.Error()))
			}
		}
		h.log.LogAttrs(r.Context(), level, "ctoken exchange: refused", attrs...)
	}
	body, _ := json.Marshal(exchangeFailure{Error: ref.code, Description: ref.description})
	writeExchangeJSON(w, ref.status, body)
}

// isOneTimeRefusal reports a refusal of the token by the issuer, whose
// ctoken.Reason says everything the log needs.
func isOneTimeRefusal(err error) bool {
	return errors.Is(err, ctoken.ErrOneTimeInvalid) || errors.Is(err, ctoken.ErrOneTimeExpired) ||
		errors.Is(err, ctoken.ErrOneTimeRedeemed) || errors.Is(err, ctoken.ErrOneTimeClaims)
}

func writeExchangeJSON(w http.ResponseWriter, status int, body []byte) {
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Pragma", "no-cache")
	w.WriteHeader(status)
	w.Write(body)
}

func (h Handler) describe() string {
	if h.issuer == nil {
		return "exchange.Handler(not configured)"
	}
	return fmt.Sprintf("exchange.Handler(issuer %v, issued token type %q)", h.issuer, h.typ)
}

// Format prints a description of the handler (its issuer's purpose, key
// count and TTL, the issued token type) under every verb: never a key.
func (h Handler) Format(f fmt.State, verb rune) { formatRedacted(f, verb, h.describe()) }

// LogValue is the handler's log/slog form: its description, never a key.
func (h Handler) LogValue() slog.Value { return slog.StringValue(h.describe()) }

// MarshalJSON encodes the handler as its description: never a key.
func (h Handler) MarshalJSON() ([]byte, error) { return marshalRedacted(h.describe()) }

// formatRedacted writes desc for verb: quoted for %q, as is otherwise.
func formatRedacted(f fmt.State, verb rune, desc string) {
	if verb == 'q' {
		desc = strconv.Quote(desc)
	}
	io.WriteString(f, desc)
}

// marshalRedacted is desc as a JSON string.
func marshalRedacted(desc string) ([]byte, error) { return json.Marshal(desc) }

// outcomeOf is the outcome of a refused exchange with reason why: a replay
// store's failure is a store failure, a token already redeemed a duplicate.
func outcomeOf(why observe.RefusalReason) observe.Outcome {
	switch why {
	case observe.ReasonAlreadyUsed, observe.ReasonAlreadyRedeemed:
		return observe.OutcomeDuplicate
	case observe.ReasonStoreFailed:
		return observe.OutcomeStoreFailure
	}
	return observe.OutcomeRefused
}
