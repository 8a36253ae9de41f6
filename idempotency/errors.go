package idempotency

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ctoken/ctoken/internal/httpx"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/replay"
)

// The refusals of a [Middleware], for errors.Is. Each request the
// middleware refuses is answered with [StatusCode] of its error and an RFC
// 9457 problem+json body whose detail is fixed per error (never the key,
// the caller or the body), but for a store refusal that says when it ends
// ([replay.RetryAt]), whose detail states that instant.
var (
	// ErrKey: the key header is missing on a route that requires it,
	// repeated, neither one structured-field string nor one bare key
	// ([ParseKey]), empty or too long. 400.
	ErrKey = errors.New("idempotency: invalid or missing key")
	// ErrNoCaller: [Config.Caller] returned an error or an empty caller.
	// 401.
	ErrNoCaller = errors.New("idempotency: no authenticated caller")
	// ErrBodyTooLarge: the request body is over [Config.MaxRequestBytes].
	// 413.
	ErrBodyTooLarge = errors.New("idempotency: request body too large")
	// ErrBodyUnreadable: the request body could not be read. 400.
	ErrBodyUnreadable = errors.New("idempotency: request body unreadable")
	// ErrInProgress: another request with the same key is running under a
	// live lease. 409, with a Retry-After of the seconds it is likely to
	// run yet (see the package documentation).
	ErrInProgress = errors.New("idempotency: request with this key in progress")
	// ErrMismatch: the key was used with a different request (method,
	// path, query or body). 422.
	ErrMismatch = errors.New("idempotency: key reused with a different request")
	// ErrStore: the replay store failed. Before the handler ran, the
	// request is answered 503 with a Retry-After of the seconds until the
	// store's refusal ends when the store says ([replay.RetryAt]: a fenced
	// shard; at most [MaxFenceRetryAfter], the problem detail stating the
	// end), of [Config.RetryAfter] otherwise, and without Retry-After
	// (the problem detail says the service needs its operator) when the
	// refusal matches [replay.ErrConfig]; after it, the handler's response
	// is sent and the failure is only logged and observed.
	ErrStore = errors.New("idempotency: replay store failed")
	// ErrRecord: the key is done but its response cannot be replayed: the
	// store holds no response for it (the ID was claimed by something
	// else), the stored response does not decode, or the first response
	// was too large to store. 500: the request ran once and is not run
	// again.
	ErrRecord = errors.New("idempotency: stored response cannot be replayed")
	// ErrOutcomeUnknown: with [Config.Transactional], the handler ran and
	// the commit of its transaction failed in a way that leaves its fate
	// unknown (the store's connection broke during COMMIT): its writes may
	// or may not have been kept. The handler's response is not sent. 503
	// with a problem of its own type ([ProblemOutcomeUnknown], not the
	// store outage's about:blank) and a Retry-After after which the
	// retry with the same key learns the outcome: the committed response,
	// replayed, or, if nothing was kept, the handler run.
	ErrOutcomeUnknown = errors.New("idempotency: outcome of the handler's transaction unknown")
)

// ProblemOutcomeUnknown is the RFC 9457 problem type of a 503 whose
// request may have taken effect. With a Retry-After (an [ErrOutcomeUnknown]
// commit), a client retries it with the same key, never a new one, after
// that delay. Without one, replayed (the handler aborted after it began
// its response, and the key was recorded with this answer), every retry
// with the key gets it until the key expires: the client checks whether
// the request took effect before it sends it again under a new key.
const ProblemOutcomeUnknown = "https://github.com/ctoken/ctoken/blob/main/docs/idempotency.md#an-unknown-outcome"

// errReleased marks a key freed after the handler ran.
var errReleased = errors.New("idempotency: key released")

// Rejections, allocated once; their reasons are observe.RefusalReason
// texts.
var (
	errKeyMissing     = reason.New(ErrKey, "idempotency key header missing")
	errKeyRepeated    = reason.New(ErrKey, "idempotency key header repeated")
	errKeyMalformed   = reason.New(ErrKey, "idempotency key not a structured-field string")
	errKeyLength      = reason.New(ErrKey, "idempotency key empty or over MaxKeyBytes")
	errNoCaller       = reason.New(ErrNoCaller, "no authenticated caller")
	errBodyTooLarge   = reason.New(ErrBodyTooLarge, "request body over MaxRequestBytes")
	errBodyUnreadable = reason.New(ErrBodyUnreadable, "request body unreadable")
	errInProgress     = reason.New(ErrInProgress, "request with this key in progress under a live lease")
	errMismatch       = reason.New(ErrMismatch, "key reused with a different request")
	errReplayed       = reason.New(errReplay, "stored response replayed")
	errNoRecord       = reason.New(ErrRecord, "key done without a stored response")
	errRecordCorrupt  = reason.New(ErrRecord, "stored response does not decode")
	errResponseTooBig = reason.New(ErrRecord, "first response was over MaxResponseBytes and not stored")
	errReleasedRetry  = reason.New(errReleased, "handler asked for a retry (5xx, 408, 423, 425 or 429)")
	errReleasedPanic  = reason.New(errReleased, "handler panicked")
	errReleasedLate   = reason.New(errReleased, "handler returned without a response after its deadline")
	errStoreAnswer    = errors.New("replay store answered outside the Recorder contract")
	errGoneAcquire    = reason.New(errGone, "client gone before the key was leased")
)

// errTimeoutHandler refuses the requests of a handler Wrap will not run:
// an [http.TimeoutHandler] outside [Config.Transactional] (issue 45).
var errTimeoutHandler = reason.New(errMisconfigured, "handler is an http.TimeoutHandler inside the middleware")

// errMisconfigured marks a request refused for the server's configuration.
var errMisconfigured = errors.New("idempotency: misconfigured")

// storeBeginError and storeRollbackError are the failures of a transaction
// of [Config.Transactional] that the store could not begin or roll back.
func storeBeginError(cause error) error {
	return reason.Wrap(ErrStore, "replay store could not begin the handler's transaction", cause)
}

func storeRollbackError(cause error) error {
	return reason.Wrap(ErrStore, "replay store could not roll back the handler's transaction", cause)
}

// errGone marks a request whose client went away before the key was
// leased: neither a refusal of the request nor a store failure.
var errGone = errors.New("idempotency: client gone")

// errReplay marks a replayed response: not a refusal.
var errReplay = errors.New("idempotency: response replayed")

func storeAcquireError(cause error) error {
	return reason.Wrap(ErrStore, "replay store could not lease the key", cause)
}

func storeConfirmError(cause error) error {
	return reason.Wrap(ErrStore, "replay store could not record the response", cause)
}

func storeReleaseError(cause error) error {
	return reason.Wrap(ErrStore, "replay store could not release the key", cause)
}

func outcomeUnknownError(cause error) error {
	return reason.Wrap(ErrOutcomeUnknown, "commit of the handler's transaction has an unknown outcome", cause)
}

func leaseLostError(cause error) error {
	return reason.Wrap(ErrStore, "lease lost: another attempt took the key after the lease expired", cause)
}

// StatusCode returns the HTTP status a [Middleware] answers a refusal
// with: 400 for [ErrKey] and [ErrBodyUnreadable], 401 for [ErrNoCaller],
// 409 for [ErrInProgress], 413 for [ErrBodyTooLarge], 422 for
// [ErrMismatch], 503 for [ErrStore], and 500 for [ErrRecord] and anything
// else (nil included: it is not a refusal).
func StatusCode(err error) int {
	switch {
	case errors.Is(err, ErrKey), errors.Is(err, ErrBodyUnreadable):
		return http.StatusBadRequest
	case errors.Is(err, ErrNoCaller):
		return http.StatusUnauthorized
	case errors.Is(err, ErrInProgress):
		return http.StatusConflict
	case errors.Is(err, ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrMismatch):
		return http.StatusUnprocessableEntity
	case errors.Is(err, ErrStore), errors.Is(err, errGone), errors.Is(err, ErrOutcomeUnknown):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// problems are the problem+json bodies of a Middleware, built once.
type problems struct {
	keyMissing, keyInvalid, noCaller, bodyTooLarge, bodyUnreadable,
	inProgress, mismatch, store, record, tooLarge, late, internal []byte
	operator  []byte // a store refusal only an operator can lift
	unsettled []byte // Transactional: the lease was lost before the commit
	unknown   []byte // Transactional: the commit's outcome is unknown
	cut       []byte // the handler aborted its response: recorded, replayed
	header    string // the key's header name, for bodies built per refusal
}

func newProblems(p *params) problems {
	h := p.header
	return problems{
		keyMissing:     problemJSON(400, "This request requires the "+h+" header: send a unique value, and the same value when you retry the request."),
		keyInvalid:     problemJSON(400, "The "+h+" header must be one key of 1 to "+strconv.Itoa(p.maxKey)+" characters: a structured-field string (RFC 8941, printable ASCII in double quotes), or bare visible ASCII without '\"', '\\', ',' or ';'."),
		noCaller:       problemJSON(401, "The request has no authenticated caller."),
		bodyTooLarge:   problemJSON(413, "The request body is over "+strconv.FormatInt(p.maxRequest, 10)+" bytes."),
		bodyUnreadable: problemJSON(400, "The request body could not be read."),
		inProgress:     problemJSON(409, "A request with this "+h+" is still being processed: retry after the Retry-After delay."),
		mismatch:       problemJSON(422, "This "+h+" was already used with a different request (method, path, query, body or its content coding): the first request under it may have been processed; send that request again unchanged to get its response. A new key is for a new request only."),
		store:          problemJSON(503, "The request could not be checked for a repeat: retry with the same "+h+" after the Retry-After delay."),
		operator:       problemJSON(503, "The service cannot check requests for repeats until its operator repairs its replay store: the request was not processed; keep it, and retry with the same "+h+" once the service is back."),
		record:         problemJSON(500, "The request with this "+h+" was processed, but its response cannot be replayed."),
		tooLarge:       problemJSON(500, "The request with this "+h+" was processed, but its response was too large to store and cannot be replayed."),
		late:           problemJSON(503, "The request did not complete in time: retry with the same "+h+" after the Retry-After delay."),
		internal:       problemJSON(500, "The server is misconfigured."),
		unsettled:      problemJSON(503, "The outcome of this request could not be confirmed: retry with the same "+h+" after the Retry-After delay to get it."),
		unknown:        problem(ProblemOutcomeUnknown, "Outcome Unknown", 503, "The request was processed, but whether its effects were kept is unknown: the server lost its store while committing them. Do not send it again under a new "+h+"; retry it with the same "+h+" after the Retry-After delay: the retry gets the response if they were kept, and is processed if they were not."),
		cut:            problem(ProblemOutcomeUnknown, "Outcome Unknown", 503, "The request was processed, but its response was cut off before it was complete, so whether it took effect is unknown. It is not processed again under this "+h+": every retry with it gets this answer until the key expires. Check whether the request took effect before you send it again under a new "+h+"."),
		header:         h,
	}
}

// fenced is the problem body of a store refusal that ends by itself at
// end (a fenced shard): it states the instant, which the Retry-After
// (at most [MaxFenceRetryAfter]) does not.
func (ps *problems) fenced(end time.Time) []byte {
	return problemJSON(503, "The service cannot check requests for repeats until "+httpx.FenceEnd(end)+" at the latest (its replay store is fenced after losing data; it may serve sooner): the request was not processed; retry with the same "+ps.header+" after the Retry-After delay.")
}

// problemJSON is an RFC 9457 problem document of type about:blank.
func problemJSON(status int, detail string) []byte {
	return problem("about:blank", http.StatusText(status), status, detail)
}

// problem is an RFC 9457 problem document.
func problem(typ, title string, status int, detail string) []byte {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{typ, title, status, detail})
	return append(b, '\n')
}

// body returns the problem body of a refusal err.
func (ps *problems) body(err error) []byte {
	switch {
	case err == errKeyMissing:
		return ps.keyMissing
	case errors.Is(err, ErrKey):
		return ps.keyInvalid
	case errors.Is(err, ErrNoCaller):
		return ps.noCaller
	case errors.Is(err, ErrBodyTooLarge):
		return ps.bodyTooLarge
	case errors.Is(err, ErrBodyUnreadable):
		return ps.bodyUnreadable
	case errors.Is(err, ErrInProgress):
		return ps.inProgress
	case errors.Is(err, ErrMismatch):
		return ps.mismatch
	case errors.Is(err, ErrOutcomeUnknown):
		return ps.unknown
	case errors.Is(err, ErrStore) && errors.Is(err, replay.ErrConfig):
		return ps.operator
	case errors.Is(err, ErrStore), errors.Is(err, errGone):
		return ps.store
	case err == errResponseTooBig:
		return ps.tooLarge
	case err == errReleasedLate:
		return ps.late
	case errors.Is(err, ErrRecord):
		return ps.record
	}
	return ps.internal
}

// writeProblem answers a refusal: its status, a problem+json body, and
// Retry-After (seconds) when retry is not empty.
func writeProblem(w http.ResponseWriter, status int, body []byte, retry string) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if retry != "" {
		h.Set("Retry-After", retry)
	}
	w.WriteHeader(status)
	w.Write(body)
}
