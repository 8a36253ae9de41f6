package protopage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/observe"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The AIP-158 names of the page fields, the defaults of [Config].
const (
	DefaultPageTokenField = "page_token"
	DefaultPageSizeField  = "page_size"
	// DefaultSkipField is AIP-158's optional skip field: results to skip,
	// relative to the page token, so a client may change it between pages.
	DefaultSkipField = "skip"
)

// Config configures a [Pager].
type Config struct {
	// Issuer signs and verifies the page tokens; required. Its TTL, Session
	// and keys are the tokens' (ctoken.CursorConfig): a fleet shares keys
	// and Session.
	Issuer *ctoken.CursorIssuer
	// Logger receives one record per refused page token (the method and
	// ctoken's log-safe reason, never the token or the caller) and per
	// server fault; required.
	Logger *slog.Logger
	// PageTokenField names the request's page token field, a singular
	// string; "" means [DefaultPageTokenField].
	PageTokenField string
	// PageSizeField names the request's page size field, a singular
	// integer, left out of the fingerprint so that a client may change it
	// between pages; "" means [DefaultPageSizeField].
	PageSizeField string
	// SkipField names AIP-158's optional skip field. A request that has a
	// singular integer field of this name leaves it out of the fingerprint,
	// as it does the page size, because AIP-158 defines skip relative to
	// the page token: a client may change it between pages. A request
	// without it, or whose field of this name is not a singular integer
	// (then not an AIP-158 skip), binds every field as before. "" means
	// [DefaultSkipField].
	SkipField string
}

// Pager binds page tokens to the request they were issued for: the RPC's
// full method name, the caller, and the fingerprint of every request field
// but the page token, the page size and AIP-158's skip. It is safe for concurrent use. The zero
// value refuses every call with [ErrServer].
type Pager struct {
	issuer      *ctoken.CursorIssuer
	log         *slog.Logger
	token, size protoreflect.Name
	skip        protoreflect.Name
	plans       *plans
}

// New returns a [Pager] for cfg. A nil Issuer or Logger, an invalid field
// name, or the same name for both fields is ctoken.ErrConfig.
func New(cfg Config) (*Pager, error) {
	if cfg.Issuer == nil {
		return nil, fmt.Errorf("%w: protopage.Config.Issuer is nil", ctoken.ErrConfig)
	}
	if cfg.Logger == nil {
		return nil, fmt.Errorf("%w: protopage.Config.Logger is nil", ctoken.ErrConfig)
	}
	p := &Pager{issuer: cfg.Issuer, log: cfg.Logger, token: DefaultPageTokenField, size: DefaultPageSizeField, skip: DefaultSkipField, plans: new(plans)}
	if cfg.PageTokenField != "" {
		p.token = protoreflect.Name(cfg.PageTokenField)
	}
	if cfg.PageSizeField != "" {
		p.size = protoreflect.Name(cfg.PageSizeField)
	}
	if cfg.SkipField != "" {
		p.skip = protoreflect.Name(cfg.SkipField)
	}
	if !p.token.IsValid() || !p.size.IsValid() || !p.skip.IsValid() {
		return nil, fmt.Errorf("%w: protopage.Config.PageTokenField, PageSizeField and SkipField must be protobuf field names", ctoken.ErrConfig)
	}
	if p.token == p.size || p.skip == p.token || p.skip == p.size {
		return nil, fmt.Errorf("%w: protopage.Config.PageTokenField, PageSizeField and SkipField name the same field", ctoken.ErrConfig)
	}
	return p, nil
}

// CallerFunc returns the authenticated caller of the request whose context
// is ctx: a user or client ID that the page tokens are bound to. An error
// or an empty caller refuses the request with [ErrNoCaller]; a public API
// returns a fixed caller such as "anonymous" explicitly.
type CallerFunc func(ctx context.Context) (string, error)

// Call is what a transport knows of a request and [Pager.Start] needs: the
// RPC's full method name ("/package.Service/Method", as gRPC and Connect
// name it) and how to find the caller. The interceptors of grpcpage and
// connectpage put it in the context; another transport uses [WithCall].
type Call struct {
	Method string
	Caller CallerFunc
}

type callKey struct{}

// WithCall returns a copy of ctx carrying c, for [Pager.Start].
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallFrom returns the [Call] that [WithCall] put in ctx.
func CallFrom(ctx context.Context) (Call, bool) {
	c, ok := ctx.Value(callKey{}).(Call)
	return c, ok
}

// Page is one page of a listing: the position a verified page token
// carries, and the scope [Page.Next] binds the next token to.
type Page struct {
	p       *Pager
	scope   ctoken.CursorScope
	method  string
	index   uint32
	state   []byte
	resumed bool
}

var (
	errNoCall      = fault("no protopage.Call in the context (install the grpcpage or connectpage interceptor, or use protopage.WithCall)")
	errNoMethod    = fault("the protopage.Call has no Method")
	errNilCaller   = fault("the protopage.Call has no Caller")
	errCallerEmpty = fault("the CallerFunc returned an empty caller")
	errNilRequest  = fault("the request message is nil")
	errTokenField  = fault("the request has no singular string page token field")
	errSizeField   = fault("the request has no singular integer page size field")
	errLastPage    = fault("the page index is at its maximum")
	errStateProto  = fault("the token's keyset state does not unmarshal into the given message")
)

// Start begins serving one page of a List request: it reads req's page
// token and, when there is one, verifies it against the [Call] in ctx and
// the fingerprint of req, so that only a token issued by [Page.Next] for
// the same method, caller and request fields (page size and skip excepted)
// is accepted. An empty page token is the first page.
//
// A refused token is [ErrTokenInvalid], [ErrTokenExpired] or
// [ErrRequestChanged]; a request without a caller is [ErrNoCaller]; a
// missing [Call] or a request without the page fields is [ErrServer].
// Every refusal is logged with its reason; the error's text is fit for
// the client.
func (p *Pager) Start(ctx context.Context, req proto.Message) (*Page, error) {
	if p == nil || p.issuer == nil {
		return nil, &refusal{ErrServer, ctoken.ErrNoKey}
	}
	c, ok := CallFrom(ctx)
	switch {
	case !ok:
		return nil, p.refuse(ctx, "", ErrServer, errNoCall)
	case c.Method == "":
		return nil, p.refuse(ctx, "", ErrServer, errNoMethod)
	case c.Caller == nil:
		return nil, p.refuse(ctx, c.Method, ErrServer, errNilCaller)
	case req == nil:
		return nil, p.refuse(ctx, c.Method, ErrServer, errNilRequest)
	}
	m := req.ProtoReflect()
	if !m.IsValid() {
		return nil, p.refuse(ctx, c.Method, ErrServer, errNilRequest)
	}
	tokenFD, sizeFD, err := p.pageFields(m.Descriptor())
	if err != nil {
		return nil, p.refuse(ctx, c.Method, ErrServer, err)
	}
	caller, err := c.Caller(ctx)
	if err != nil {
		return nil, p.refuse(ctx, c.Method, ErrNoCaller, err)
	}
	if caller == "" {
		return nil, p.refuse(ctx, c.Method, ErrNoCaller, errCallerEmpty)
	}
	fp, err := p.plans.fingerprint(m, tokenFD.Number(), sizeFD.Number(), p.skipField(m.Descriptor()))
	if err != nil {
		return nil, p.refuse(ctx, c.Method, ErrServer, err)
	}
	pg := &Page{p: p, method: c.Method, scope: ctoken.CursorScope{ToolID: c.Method, CallerID: caller, Args: fp}}
	token := m.Get(tokenFD).String()
	if token == "" {
		return pg, nil
	}
	payload, err := p.issuer.Verify(token, pg.scope)
	if err != nil {
		kind := ErrTokenInvalid
		switch {
		case errors.Is(err, ctoken.ErrCursorExpired):
			kind = ErrTokenExpired
		case ctoken.Reason(err) == observe.ReasonWrongArguments, ctoken.Reason(err) == observe.ReasonCursorWrongScope:
			// A version 2 token binds method, caller and fields inside
			// its MAC, so another caller or method, and a forgery whose
			// body still decodes, look the same as changed fields; the
			// advice (same fields, or start over) holds for each.
			kind = ErrRequestChanged
		case !errors.Is(err, ctoken.ErrCursorInvalid):
			kind = ErrServer // ctoken.ErrNoKey: an issuer not made by its constructor
		}
		return nil, p.refuse(ctx, c.Method, kind, err)
	}
	pg.index, pg.state, pg.resumed = payload.Page, payload.State, true
	return pg, nil
}

// StateBudget returns how many bytes of keyset state [Page.Next] accepts
// in every page token of p, whatever the method, the caller and the
// request's fields: page tokens bind those inside their MAC and do not
// carry them (ctoken's cursor format version 2), so none of them takes any
// of it. It
// is ctoken.MaxOpaqueStateBytes for every issuer ctoken.NewCursorIssuer
// makes, signed or sealed (TestPageTokenBudgetIsTheStateCapForAnyCaller);
// a server can compare its largest keyset state with it at startup. A nil
// or zero Pager returns 0.
func (p *Pager) StateBudget() int {
	if p == nil || p.issuer == nil {
		return 0
	}
	return p.issuer.StateBudget()
}

// Fingerprint returns the fingerprint req's page tokens are bound to: the
// SHA-256 of the encoding of every populated field of req but the page
// token, the page size and, when req has one, AIP-158's skip field (the
// package documentation defines it). A request
// without the page fields, or nested deeper than [MaxDepth], is [ErrServer].
// A Pager is not told its request types, so [New] cannot check their page
// fields: a server that calls Fingerprint on the zero value of each
// request type at startup finds a misnamed or mistyped page field before
// its first request does (Start refuses such a request with [ErrServer],
// which transports answer with Internal).
func (p *Pager) Fingerprint(req proto.Message) (ctoken.Fingerprint, error) {
	if p == nil || p.plans == nil {
		return ctoken.Fingerprint{}, &refusal{ErrServer, ctoken.ErrNoKey}
	}
	if req == nil || !req.ProtoReflect().IsValid() {
		return ctoken.Fingerprint{}, &refusal{ErrServer, errNilRequest}
	}
	m := req.ProtoReflect()
	tokenFD, sizeFD, err := p.pageFields(m.Descriptor())
	if err != nil {
		return ctoken.Fingerprint{}, &refusal{ErrServer, err}
	}
	fp, err := p.plans.fingerprint(m, tokenFD.Number(), sizeFD.Number(), p.skipField(m.Descriptor()))
	if err != nil {
		return ctoken.Fingerprint{}, &refusal{ErrServer, err}
	}
	return fp, nil
}

// pageFields finds the page token and page size fields of md.
func (p *Pager) pageFields(md protoreflect.MessageDescriptor) (token, size protoreflect.FieldDescriptor, err error) {
	fs := md.Fields()
	token, size = fs.ByName(p.token), fs.ByName(p.size)
	if token == nil || token.Cardinality() == protoreflect.Repeated || token.Kind() != protoreflect.StringKind {
		return nil, nil, errTokenField
	}
	if size == nil || size.Cardinality() == protoreflect.Repeated || !isInteger(size.Kind()) {
		return nil, nil, errSizeField
	}
	return token, size, nil
}

// skipField returns the number of md's AIP-158 skip field, or 0 when md
// has no singular integer field of that name.
func (p *Pager) skipField(md protoreflect.MessageDescriptor) protoreflect.FieldNumber {
	if fd := md.Fields().ByName(p.skip); fd != nil && fd.Cardinality() != protoreflect.Repeated && isInteger(fd.Kind()) {
		return fd.Number()
	}
	return 0
}

func isInteger(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return true
	}
	return false
}

// refuse logs a refusal of kind with cause's reason and returns it.
func (p *Pager) refuse(ctx context.Context, method string, kind, cause error) error {
	level := logLevel(kind)
	if p.log.Enabled(ctx, level) {
		why := ctoken.Reason(cause).String()
		if why == "" && errors.Is(cause, ctoken.ErrNoKey) {
			// A missing key is no refusal reason; its text names the
			// config field at fault, never key material.
			why = cause.Error()
		} else if why == "" {
			var f fault
			if errors.As(cause, &f) {
				why = string(f)
			} else if kind == ErrNoCaller {
				// The CallerFunc's own error is the application's: its
				// text may name the caller or a credential.
				why = "the CallerFunc returned an error"
			}
		}
		p.log.LogAttrs(ctx, level, "protopage: "+kind.Error(),
			slog.String("method", method), slog.String("reason", why))
	}
	return &refusal{kind, cause}
}

// errNoPage refuses the methods of a Page not returned by Start.
var errNoPage = &refusal{ErrServer, ctoken.ErrNoKey}

// First reports whether the page is the first of a listing: the request
// had no page token, and there is no keyset state.
func (pg *Page) First() bool { return !pg.resumed }

// Index is the number of pages served before this one in the listing: 0
// for the first page, then one more on each page [Page.Next] leads to.
func (pg *Page) Index() uint32 { return pg.index }

// State returns the keyset state the page token carries (what
// [Page.Next] was given: typically the sort key of the previous page's
// last item), or nil on the first page. The slice is the page's own: do
// not modify it.
func (pg *Page) State() []byte { return pg.state }

// StateMessage unmarshals the keyset state into m (which it resets first),
// for state issued with [Page.NextMessage]. On the first page it leaves m
// reset and returns nil. A Page not returned by [Pager.Start] (nil, or the
// zero value) is [ErrServer], as it is for [Page.Next] and
// [Page.NextMessage]. State that does not unmarshal into m is
// [ErrTokenExpired] (a token from before a change of m's type: start over).
func (pg *Page) StateMessage(m proto.Message) error {
	if pg == nil || pg.p == nil {
		return errNoPage
	}
	proto.Reset(m)
	if !pg.resumed {
		return nil
	}
	if err := (proto.UnmarshalOptions{}).Unmarshal(pg.state, m); err != nil {
		return pg.p.refuse(context.Background(), pg.method, ErrTokenExpired, errStateProto)
	}
	return nil
}

// Next issues the page token of the page after this one, bound like this
// page's (method, caller, request fingerprint) and carrying state, at most
// ctoken.MaxOpaqueStateBytes: the keyset state the next page resumes from.
// Put it in the response's next_page_token; on the last page, leave that
// empty instead. A state over [Pager.StateBudget] is refused here with
// [ErrKeyTooLarge], also matching ctoken.ErrOpaqueStateTooLarge: the
// listing cannot continue from this item, and the same request would be
// refused the same way, so the client is told to ask for another
// page_size; a handler whose sort key holds text bounds it
// (docs/pagination.md). The caller's identity never costs a byte of the
// budget (the MAC covers it).
func (pg *Page) Next(state []byte) (string, error) {
	if pg == nil || pg.p == nil {
		return "", errNoPage
	}
	if pg.index == math.MaxUint32 {
		return "", pg.p.refuse(context.Background(), pg.method, ErrServer, errLastPage)
	}
	token, err := pg.p.issuer.Issue(ctoken.CursorPayload{CursorScope: pg.scope, Page: pg.index + 1, State: state})
	if err != nil {
		kind := ErrServer
		if errors.Is(err, ctoken.ErrOpaqueStateTooLarge) {
			kind = ErrKeyTooLarge
		}
		return "", pg.p.refuse(context.Background(), pg.method, kind, err)
	}
	return token, nil
}

// NextMessage is [Page.Next] with the keyset state m, marshalled
// deterministically; [Page.StateMessage] reads it back.
func (pg *Page) NextMessage(m proto.Message) (string, error) {
	if pg == nil || pg.p == nil {
		return "", errNoPage
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", pg.p.refuse(context.Background(), pg.method, ErrServer, fault("the keyset state message does not marshal"))
	}
	return pg.Next(b)
}
