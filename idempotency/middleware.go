package idempotency

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken/internal/confirm"
	"github.com/ctoken/ctoken/internal/httpx"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// Middleware makes the handlers it wraps idempotent for requests that
// carry a key: see the package documentation. It is safe for concurrent
// use. A zero Middleware (not from [New]) answers every request 500.
type Middleware struct {
	p *params
}

// New returns a [Middleware] for cfg, or an error matching [ErrConfig]
// (which is [ctoken.ErrConfig]) that names the invalid field and what to
// set; a config with several invalid fields (an all-zero one: no Store,
// Caller or Keys) is refused with one error naming each.
func New(cfg Config) (*Middleware, error) {
	p, err := newParams(cfg)
	if err != nil {
		return nil, err
	}
	return &Middleware{p: p}, nil
}

// Wrap returns a handler that runs next at most once per key, caller and
// route for requests whose method [Config.Methods] covers and that carry
// the key header, and answers their retries with the first response; see
// the package documentation for every answer it gives instead of running
// next. Other requests go to next untouched. Outside
// [Config.Transactional], an [http.TimeoutHandler] as next is refused:
// every covered request is answered 500 and logged at Error (put the
// TimeoutHandler outside Wrap; see the package documentation).
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	if m == nil || m.p == nil || next == nil {
		body := problemJSON(http.StatusInternalServerError, "The server is misconfigured.")
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeProblem(w, http.StatusInternalServerError, body, "")
		})
	}
	p := m.p
	if p.transactor == nil && httpx.IsTimeoutHandler(next) {
		return p.refuseTimeoutHandler(next)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.serve(w, r, next)
	})
}

// serve is the handler of Wrap.
func (p *params) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !p.covers(r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	values := r.Header[p.header]
	if len(values) == 0 {
		if !p.required {
			next.ServeHTTP(w, r)
			return
		}
		p.refuse(w, errKeyMissing, 0, "")
		return
	}
	caller, err := p.caller(r)
	if err != nil || caller == "" {
		w.Header().Set("WWW-Authenticate", p.challenge)
		p.refuse(w, errNoCaller, 0, "")
		return
	}
	if len(values) > 1 {
		p.refuse(w, errKeyRepeated, 0, "")
		return
	}
	key, err := ParseKey(values[0], p.maxKey)
	if err != nil {
		p.refuse(w, err, 0, "")
		return
	}
	body, err := p.readBody(w, r)
	if err != nil {
		p.refuse(w, err, 0, "")
		return
	}
	route := r.Pattern
	if p.route != nil {
		route = p.route(r)
	}
	a := &attempt{p: p, r: r, route: route, id: StoreID(caller, route, key)}
	fp := Fingerprint(r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header, body)
	a.start = time.Now()
	rec, ok := a.acquire(w, fp)
	if ok && a.answer(w, rec, fp, body, next) {
		p.busy(w, a, rec, fp, body, next) // wait.go
	}
}

// acquire asks the store for a's key, adding the call's latency to
// a.acquired; an acquired lease starts a's attempt (a.start). When the
// store fails, or the client left before it was asked or while it was,
// it answers the request (503) and reports false.
//
// A Recorder's acquire keeps the request's values but not its
// cancellation, within a quarter of the lease (replay.WithDeadlineOnly),
// as the webhook middleware's: a client that leaves meanwhile would only
// turn a lease the store took into an unknown outcome, and the store then
// runs the call on the caller's goroutine (a redisstore call under a
// cancellable context pays a goroutine of its own: issue 81).
func (a *attempt) acquire(w http.ResponseWriter, fp []byte) (replay.Record, bool) {
	p := a.p
	ctx := a.r.Context()
	if ctx.Err() != nil {
		p.refuse(w, errGoneAcquire, a.acquired, p.retryAfter) // nothing asked: nothing to release
		return replay.Record{}, false
	}
	start := time.Now()
	var rec replay.Record
	var err error
	if p.acquirer != nil {
		// The lease is the handler's transaction (work.go): one durable
		// commit for the request.
		var held replay.Work
		rec, held, err = p.acquirer.AcquireWork(ctx, a.id, p.lease, fp)
		if held != nil && (err != nil || rec.State != replay.LeaseAcquired) {
			a.rollback(held) // outside the contract: hold nothing
			held = nil
		}
		a.held = held
	} else {
		actx, cancel := replay.WithDeadlineOnly(ctx, start.Add(p.lease/4))
		rec, err = p.store.AcquireRecord(actx, a.id, p.lease, fp)
		cancel()
	}
	a.acquired += max(time.Since(start), 1) // a store was called: never 0
	switch {
	case err != nil && ctx.Err() != nil:
		// The client went away while the store was asked: its cancelled
		// context, not the store, ended the call.
		p.refuse(w, errGoneAcquire, a.acquired, p.retryAfter)
		return rec, false
	case err != nil:
		err = storeAcquireError(err)
		a.log(slog.LevelWarn, "idempotency: the store could not lease the key; answered 503", http.StatusServiceUnavailable, err)
		p.refuse(w, err, a.acquired, p.retryAfter)
		return rec, false
	}
	if rec.State == replay.LeaseAcquired {
		a.start = start // the lease, and the handler's deadline, start now
	}
	return rec, true
}

// answer answers the request for the store's answer rec: it runs next
// under an acquired lease, replays a done key, refuses another request
// holding the key (422) or an answer outside the Recorder contract (503).
// It reports true, having answered nothing, when the same request holds
// the key: busy.
func (a *attempt) answer(w http.ResponseWriter, rec replay.Record, fp, body []byte, next http.Handler) (busy bool) {
	p := a.p
	switch rec.State {
	case replay.LeaseAcquired:
		if rec.Token != "" && (p.acquirer == nil || a.held != nil) {
			a.token = rec.Token
			a.fp = fp
			a.run(w, next, body)
			return false
		}
	case replay.LeaseBusy:
		if len(rec.Fingerprint) > 0 && !sameFingerprint(rec.Fingerprint, fp) {
			p.refuse(w, errMismatch, a.acquired, "")
			return false
		}
		return true
	case replay.LeaseDone:
		a.replay(w, rec, fp)
		return false
	}
	err := storeAcquireError(errStoreAnswer)
	a.log(slog.LevelError, "idempotency: the store answered outside the Recorder contract; answered 503", http.StatusServiceUnavailable, err)
	p.refuse(w, err, a.acquired, p.retryAfter)
	return false
}

// sameFingerprint compares two request fingerprints. They are not secret;
// the compare is constant-time all the same.
func sameFingerprint(stored, fp []byte) bool {
	return subtle.ConstantTimeCompare(stored, fp) == 1
}

// readBody reads the whole request body, at most maxRequest bytes.
func (p *params) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > p.maxRequest {
		return nil, errBodyTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.maxRequest))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errBodyTooLarge
		}
		return nil, errBodyUnreadable
	}
	return body, nil
}

// refuse answers a request the handler does not run for with the status
// and problem body of err, reports it, and logs it when it is the
// server's fault.
// A store's refusal (ErrStore) gets the Retry-After of storeRetryAfter
// instead of retry and, when it says when it ends, a body stating when.
func (p *params) refuse(w http.ResponseWriter, err error, store time.Duration, retry string) {
	p.report(err, store)
	body := p.problems.body(err)
	if errors.Is(err, ErrStore) {
		retry = storeRetryAfter(err, retry, time.Now())
		if end, ok := fenceEnd(err); ok {
			body = p.problems.fenced(end)
		}
	}
	writeProblem(w, StatusCode(err), body, retry)
}

// storeRetryAfter is the Retry-After of a 503 for the store's refusal
// err at now: none ("") when only an operator can lift it (it matches
// [replay.ErrConfig]), the seconds until it ends when the store says
// ([replay.RetryAt]: a fenced shard's end, rounded up, at least 1, at most
// [MaxFenceRetryAfter]), else def ([Config.RetryAfter]).
func storeRetryAfter(err error, def string, now time.Time) string {
	if errors.Is(err, replay.ErrConfig) {
		return ""
	}
	if at, ok := replay.RetryAt(err); ok {
		return httpx.FenceRetryAfter(at, now)
	}
	return def
}

// fenceEnd reports when the store's refusal err ends by itself, when the
// store says so and an operator is not needed (see storeRetryAfter).
func fenceEnd(err error) (time.Time, bool) {
	if errors.Is(err, replay.ErrConfig) {
		return time.Time{}, false
	}
	return replay.RetryAt(err)
}

// attempt is one request with a key, from AcquireRecord on.
type attempt struct {
	p        *params
	r        *http.Request
	route    string
	id       string
	token    string
	fp       []byte
	start    time.Time
	held     replay.Work   // the Work holding the lease, from AcquireWork; else nil
	acquired time.Duration // the store's latency for AcquireRecord
	work     time.Duration // the store's latency for BeginWork and Commit or Rollback
}

// replay answers a request whose key is done.
func (a *attempt) replay(w http.ResponseWriter, rec replay.Record, fp []byte) {
	p := a.p
	if len(rec.Result) == 0 || len(rec.Fingerprint) == 0 {
		a.log(slog.LevelError, "idempotency: key is done without a stored response (its store ID was claimed or leased by something else)", http.StatusInternalServerError, errNoRecord)
		p.refuse(w, errNoRecord, a.acquired, "")
		return
	}
	if !sameFingerprint(rec.Fingerprint, fp) {
		p.refuse(w, errMismatch, a.acquired, "")
		return
	}
	resp, fault := p.records.open(a.id, fp, rec.Result)
	if fault != openOK {
		a.log(slog.LevelError, fault.message(), http.StatusInternalServerError, errRecordCorrupt)
		p.refuse(w, errRecordCorrupt, a.acquired, "")
		return
	}
	if resp.TooLarge {
		a.log(slog.LevelWarn, "idempotency: retry of a request whose response was too large to store", http.StatusInternalServerError, errResponseTooBig)
		p.refuse(w, errResponseTooBig, a.acquired, "")
		return
	}
	// Only the headers ReplayHeaders names now, never a refused one,
	// whatever the (authentic) record holds: a record made under another
	// configuration does not widen what is replayed.
	h := w.Header()
	for _, kv := range resp.Header {
		if name, ok := p.replayable(kv[0]); ok {
			h.Del(name) // the recorded values replace what an outer handler set
		}
	}
	addReplayed(h, resp.Header, p.replayable)
	h.Set(ReplayedHeader, "true")
	p.report(errReplayed, a.acquired)
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}

// handlerContext returns the handler's context: the request's values,
// but neither its cancellation nor its deadline (a client that goes away,
// or a server's per-request timeout, does not stop a handler that may
// already have taken effect), and the middleware's own deadline, three
// quarters of the lease after the key was leased: the lease's fence. It
// is not a replay.WithDeadlineOnly context: the middleware cancels it when
// the handler returns, and store calls that code the handler started may
// still be running then; they must see that cancellation at once.
func (a *attempt) handlerContext() (context.Context, context.CancelFunc) {
	return context.WithDeadlineCause(context.WithoutCancel(a.r.Context()), a.start.Add(a.p.lease/4*3), errHandlerDeadline)
}

// errHandlerDeadline is the cause of a handler's context that the
// middleware's own deadline ended.
var errHandlerDeadline = errors.New("idempotency: the handler's deadline (three quarters of Lease) passed")

// pastDeadline reports whether the middleware's own deadline has ended
// ctx, a handler's context.
func pastDeadline(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errHandlerDeadline)
}

// handlerRequest is the request the handler gets: a's request with ctx,
// and the body read for the fingerprint.
func (a *attempt) handlerRequest(ctx context.Context, body []byte) *http.Request {
	r2 := a.r.WithContext(ctx)
	r2.Body = &bodyReader{Reader: bytes.NewReader(body)}
	r2.ContentLength = int64(len(body))
	return r2
}

// replayable returns the canonical form of a recorded header name and
// whether a replay may write it: named by ReplayHeaders and not refused.
func (p *params) replayable(name string) (string, bool) {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return name, !refusedHeaders[name] && slices.Contains(p.replay, name)
}

// addReplayed adds to h the values of lines whose names replayable
// accepts, under the name it returns, in order, as h.Add would, with
// every value in one array: a name's lines follow each other in a record
// (see [storedHeader]), so each name's values are one run of it, and the
// allocations do not grow with the number of lines. A name whose lines
// are not one run gets the rest of its values appended.
func addReplayed(h http.Header, lines [][2]string, replayable func(string) (string, bool)) {
	values := make([]string, 0, len(lines))
	prev, run := "", 0
	for _, kv := range lines {
		name, ok := replayable(kv[0])
		if !ok {
			continue
		}
		values = append(values, kv[1])
		if name == prev && len(h[name]) == len(values)-1-run {
			h[name] = values[run:len(values):len(values)]
			continue
		}
		if len(h[name]) > 0 {
			h[name] = append(h[name], kv[1])
			continue
		}
		prev, run = name, len(values)-1
		h[name] = values[run:len(values):len(values)]
	}
}

// run runs next under the lease a holds and settles the key: the
// response recorded, or the key released.
func (a *attempt) run(w http.ResponseWriter, next http.Handler, body []byte) {
	p := a.p
	ctx, cancel := a.handlerContext()
	defer cancel()
	if p.transactor != nil {
		a.runWork(ctx, w, next, body)
		return
	}
	r2 := a.handlerRequest(ctx, body)
	b := &bufferWriter{a: a, w: w, ctx: ctx}
	defer func() {
		// A handler that panics (http.ErrAbortHandler too), or ends its
		// goroutine with runtime.Goexit, did not return: its key is
		// settled here, and the panic goes on, as net/http expects.
		pv := recover()
		if !b.settled {
			b.settled = true
			a.abort(w, b)
		}
		if pv != nil {
			panic(pv)
		}
	}()
	next.ServeHTTP(b, r2)
	if b.settled {
		return // over the cap: recorded as too large and streamed
	}
	b.settled = true
	if b.through {
		// A retry status over the cap, streamed: released only now that
		// the handler has returned, so no retry runs beside it.
		a.release(errReleasedRetry)
		return
	}
	if b.status == 0 || b.stopped && b.status >= 500 {
		// The client leaving does not count: the handler's context does
		// not end with the client's request, so a handler that wrote
		// nothing decided so, unless its own deadline passed; and a
		// server error it began after that deadline is the deadline's,
		// the middleware's own end, never recorded as the operation's
		// failure (as mcptoken records no tool's error that is its
		// context's end).
		if pastDeadline(ctx) {
			// The handler gave up at its deadline (three quarters of the
			// lease): not an empty 200, nor its 5xx, to store.
			a.log(slog.LevelWarn, "idempotency: the handler returned without a response, or with a 5xx begun after its deadline; key released, answered 503", http.StatusServiceUnavailable, errReleasedLate)
			a.release(errReleasedLate)
			// Headers that describe the handler's body do not describe
			// the problem; the rest (an outer middleware's) stay.
			h := w.Header()
			for _, k := range p.replay {
				h.Del(k)
			}
			h.Del("Content-Encoding")
			writeProblem(w, http.StatusServiceUnavailable, p.problems.body(errReleasedLate), p.retryAfter)
			return
		}
	}
	if b.status == 0 {
		b.status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	if notProcessed(b.status) {
		a.release(errReleasedRetry)
		b.send()
		return
	}
	enc, err := p.records.sealBuffered(a.id, a.fp, b.status, storedHeader(w.Header(), p.replay), &b.buf)
	if err != nil {
		enc = a.tooLarge(b.status)
	}
	a.confirm(b.status, enc)
	b.send()
}

// abort settles the key of a handler that panicked, or called
// runtime.Goexit, before it returned; nothing of its response was sent.
// Before it wrote a status, or after it wrote one that asks for a retry
// (notProcessed), the key is released: nothing began. After it wrote a
// status the table records, it may have acted, so the key is never
// released: a complete response (its Content-Length all written, or a
// status without a body) is recorded as it is; any other is cut off, and
// the key is recorded with the 503 problem of [ProblemOutcomeUnknown] that
// says so, replayed to every retry.
func (a *attempt) abort(w http.ResponseWriter, b *bufferWriter) {
	p := a.p
	if b.status == 0 || notProcessed(b.status) {
		a.release(errReleasedPanic)
		return
	}
	if complete(b.status, w.Header(), b.buf.Len()) {
		enc, err := p.records.sealBuffered(a.id, a.fp, b.status, storedHeader(w.Header(), p.replay), &b.buf)
		if err != nil {
			enc = a.tooLarge(b.status)
		}
		a.confirm(b.status, enc)
		return
	}
	a.log(slog.LevelError, "idempotency: the handler aborted after it began its response, before the response was complete; key recorded as outcome unknown: every retry gets 503 outcome unknown, never a second run", b.status, nil)
	enc, err := p.records.seal(a.id, a.fp, Response{Status: http.StatusServiceUnavailable, Header: problemHeader, Body: p.problems.cut})
	if err != nil {
		panic("idempotency: cannot encode the outcome-unknown record") // a fixed record, far under every cap
	}
	a.confirm(http.StatusServiceUnavailable, enc)
}

// complete reports whether a response of status, header h and body bytes
// long is all there is: its Content-Length, written in full, or a status
// that has no body.
func complete(status int, h http.Header, body int) bool {
	if status == http.StatusNoContent || status == http.StatusNotModified {
		return true
	}
	cl := h.Get("Content-Length")
	return cl != "" && cl == strconv.Itoa(body)
}

// problemHeader is the stored header of a recorded problem.
var problemHeader = [][2]string{{"Content-Type", "application/problem+json"}, {"Cache-Control", "no-store"}}

// tooLarge returns the stored form of a response over the caps, and logs
// that its retries will get 500.
func (a *attempt) tooLarge(status int) []byte {
	a.log(slog.LevelError, "idempotency: response over MaxResponseBytes (or its headers over MaxStoredHeaderBytes): recorded as done without a replayable response; retries get 500", status, errResponseTooBig)
	return a.tooLargeMarker(status)
}

// tooLargeMarker is the stored form of a response that was not stored:
// a few bytes, sealed like every record, that replay as 500 [ErrRecord].
func (a *attempt) tooLargeMarker(status int) []byte {
	enc, err := a.p.records.seal(a.id, a.fp, Response{Status: status, TooLarge: true})
	if err != nil {
		panic(fmt.Sprintf("idempotency: cannot encode a too-large marker for status %d", status)) // status is 200..599 here
	}
	return enc
}

// confirm records result as the key's response, retrying a failing store
// with backoff until the lease expires (or, when that is already near, for
// a quarter of the lease), however the client's request ends. A failure
// is logged and observed; the handler's response is sent all the same.
//
// A store that refuses result for its size or its byte budget
// ([replay.ErrTooLarge], [replay.ErrFull]) never leaves the key to run
// again: the key is recorded as done with the few-byte marker of a
// response that was not stored (or, if the store refuses that too, with
// no record at all, [replay.Leaser.ConfirmLease]), so its retries get 500
// [ErrRecord] and the handler never runs twice.
func (a *attempt) confirm(status int, result []byte) {
	p := a.p
	start := time.Now()
	err := a.confirmRetrying(func(ctx context.Context, until time.Time) error {
		return p.store.ConfirmRecord(ctx, a.id, a.token, until, a.fp, result)
	})
	notStored := refusedForSize(err)
	if notStored {
		marker := a.tooLargeMarker(status)
		ferr := a.confirmRetrying(func(ctx context.Context, until time.Time) error {
			return p.store.ConfirmRecord(ctx, a.id, a.token, until, a.fp, marker)
		})
		if refusedForSize(ferr) {
			ferr = a.confirmRetrying(func(ctx context.Context, until time.Time) error {
				return p.store.ConfirmLease(ctx, a.id, a.token, until)
			})
		}
		if ferr != nil {
			notStored = false
			err = ferr
		}
	}
	took := a.acquired + max(time.Since(start), 1)
	if err == nil {
		p.observeRun(a.route, time.Since(a.start)) // estimate.go: the Retry-After of a 409
	}
	switch {
	case notStored:
		a.log(slog.LevelError, "idempotency: the store refused the response (too large for it, or its byte budget full): the response was sent and the key recorded as done without it; retries get 500", status, err)
	case err != nil:
		a.log(slog.LevelError, "idempotency: the response was not recorded; the key runs again once its lease ends", 0, err)
	}
	if p.obs != nil {
		if err == nil {
			p.obs.Observe(observe.Event{Kind: observe.KindIdempotency, Outcome: observe.OutcomeProcessed, StoreLatency: took})
		} else {
			p.report(err, took)
		}
	}
}

// refusedForSize reports whether a confirm failed because the store
// refused the record for its size or its byte budget, before writing
// anything.
func refusedForSize(err error) bool {
	return err != nil && !errors.Is(err, replay.ErrLeaseLost) &&
		(errors.Is(err, replay.ErrTooLarge) || errors.Is(err, replay.ErrFull))
}

// confirmRetrying calls try (a confirm of the lease, done until the
// given time) until it succeeds, fails for good, or the lease is over.
func (a *attempt) confirmRetrying(try func(ctx context.Context, until time.Time) error) error {
	until := time.Now().Add(a.p.window)
	ctx, cancel := replay.WithDeadlineOnly(a.r.Context(), a.confirmDeadline())
	defer cancel()
	err := confirm.Retry(ctx, func(ctx context.Context) error { return try(ctx, until) },
		replay.ErrLeaseLost, replay.ErrExpired, replay.ErrConfig, replay.ErrTooLarge, replay.ErrFull)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, replay.ErrLeaseLost):
		return leaseLostError(err)
	}
	return storeConfirmError(err)
}

// release frees the key after an attempt that must be retried (why says
// which), waiting at most a quarter of the lease for the store, however
// the client's request ends. A failure is logged and observed: the key
// then frees itself when the lease ends.
func (a *attempt) release(why error) {
	p := a.p
	took, err := a.releaseLease()
	if err != nil {
		p.report(err, took)
		return
	}
	p.report(why, took)
}

// releaseLease frees the key, waiting at most a quarter of the lease for
// the store, however the client's request ends, and returns the time
// spent in the store so far. A failure is logged and returned (not
// observed): the key then frees itself when the lease ends.
func (a *attempt) releaseLease() (time.Duration, error) {
	p := a.p
	ctx, cancel := replay.WithDeadlineOnly(a.r.Context(), time.Now().Add(p.lease/4))
	defer cancel()
	start := time.Now()
	var err error
	if a.held != nil {
		// The lease is the Work's transaction: its end (a no-op when it
		// has ended already) frees the key.
		err = a.held.Rollback(ctx)
	} else {
		err = p.store.ReleaseLease(ctx, a.id, a.token)
	}
	took := a.acquired + a.work + max(time.Since(start), 1)
	if err != nil {
		err = storeReleaseError(err)
		a.log(slog.LevelError, "idempotency: the key could not be released; a retry gets 409 until its lease ends", 0, err)
	}
	return took, err
}

// log writes one record to the configured logger: never the key, the
// caller or a body.
func (a *attempt) log(level slog.Level, msg string, status int, err error) {
	l := a.p.log
	if l == nil || !l.Enabled(context.Background(), level) {
		return
	}
	attrs := []slog.Attr{slog.String("method", a.r.Method), slog.String("route", a.route)}
	if status != 0 {
		attrs = append(attrs, slog.Int("status", status))
	}
	if r := reason.Of(err); r != "" {
		attrs = append(attrs, slog.String("reason", r))
	}
	if end, ok := fenceEnd(err); ok {
		attrs = append(attrs, slog.String("store_refuses_until", httpx.FenceEnd(end)))
	}
	if cause := errors.Unwrap(err); cause != nil {
		attrs = append(attrs, slog.String("error", cause.Error()))
	}
	l.LogAttrs(context.Background(), level, msg, attrs...)
}

// bodyReader gives the handler the body read for the fingerprint.
type bodyReader struct{ *bytes.Reader }

// Close does nothing: the body is in memory.
func (bodyReader) Close() error { return nil }

// bufferWriter holds the handler's response until the key is settled,
// so that the response is recorded before the client sees it. A response
// over the cap is streamed: recorded as too large at once, or, for a retry
// status, released once the handler returns.
type bufferWriter struct {
	a       *attempt
	w       http.ResponseWriter
	ctx     context.Context // the handler's
	status  int
	stopped bool        // the status was set after the middleware's deadline ended ctx
	late    http.Header // what Header returns once the status is set
	buf     respBuffer
	through bool // over the cap: written straight to w
	settled bool // the key is recorded or released
	hold    bool // Transactional: the whole response is held until the commit, whatever its size
}

// Header returns the header map of the response; as with net/http, changes
// after WriteHeader or Write are not sent, except trailers (declared in a
// Trailer header before WriteHeader, or with [http.TrailerPrefix]), which
// are sent after the body. Trailers are not stored or replayed.
func (b *bufferWriter) Header() http.Header {
	if b.through {
		return b.w.Header() // streaming: only trailers still count
	}
	if b.status != 0 {
		if b.late == nil {
			b.late = b.w.Header().Clone()
		}
		return b.late
	}
	return b.w.Header()
}

// WriteHeader sets the status: the first final one counts; informational
// ones (1xx) are dropped, since nothing is sent before the key is settled.
// A code net/http refuses panics, as net/http does.
func (b *bufferWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if b.status != 0 || code < 200 {
		return
	}
	b.status = code
	b.stopped = b.ctx != nil && pastDeadline(b.ctx)
}

// Write buffers p, or streams it once the response is over the cap. As
// net/http, it refuses a body for 204 and 304 with
// [http.ErrBodyNotAllowed].
func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.WriteHeader(http.StatusOK)
	}
	if b.status == http.StatusNoContent || b.status == http.StatusNotModified {
		return 0, http.ErrBodyNotAllowed
	}
	if b.through {
		return b.w.Write(p)
	}
	if !b.hold && b.buf.Len()+len(p) > b.a.p.maxResponse {
		b.overflow()
		return b.w.Write(p)
	}
	return b.buf.Write(p)
}

// Flush sends nothing while the response is buffered; once it streams,
// it flushes the underlying writer.
func (b *bufferWriter) Flush() {
	if b.through {
		http.NewResponseController(b.w).Flush()
	}
}

// notProcessed reports whether a handler's status says it did not process
// the request, so that a retry must run it: 408 Request Timeout, 423
// Locked, 425 Too Early, 429 Too Many Requests, 503 Service Unavailable,
// and a code past 599, which no record holds. Every other status, 500
// and the other 5xx included, is recorded: a
// handler that began may have acted before it failed, and Stripe records
// such a request's response too. (In Transactional mode every 5xx rolls
// the handler's writes back, so its key is released.)
func notProcessed(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusLocked, http.StatusTooEarly, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	}
	return code > 599
}

// overflow starts streaming a response over the cap. A retry status
// leaves the key leased until the handler returns (run releases it then:
// never while the handler still runs); any other status is recorded as too
// large at once.
func (b *bufferWriter) overflow() {
	if !notProcessed(b.status) {
		b.settled = true
		b.a.confirm(b.status, b.a.tooLarge(b.status))
	}
	b.send()
	b.through = true
}

// Unwrap gives [http.ResponseController] the connection controls of the
// underlying writer: read and write deadlines and full duplex. Flush stays
// the bufferWriter's, and Hijack is not offered: a hijacked connection
// would bypass the recorded response.
func (b *bufferWriter) Unwrap() http.ResponseWriter { return controls{b} }

// controls is what [bufferWriter.Unwrap] returns: the bufferWriter, plus
// the deadline controls of the writer under it.
type controls struct{ b *bufferWriter }

func (c controls) Header() http.Header         { return c.b.Header() }
func (c controls) Write(p []byte) (int, error) { return c.b.Write(p) }
func (c controls) WriteHeader(code int)        { c.b.WriteHeader(code) }

// SetReadDeadline sets the read deadline of the underlying connection.
func (c controls) SetReadDeadline(t time.Time) error {
	return http.NewResponseController(c.b.w).SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline of the underlying connection.
func (c controls) SetWriteDeadline(t time.Time) error {
	return http.NewResponseController(c.b.w).SetWriteDeadline(t)
}

// EnableFullDuplex lets the handler read the request body while writing
// its response.
func (c controls) EnableFullDuplex() error {
	return http.NewResponseController(c.b.w).EnableFullDuplex()
}

// copyTrailers sets in dst the trailers the handler set in src after
// WriteHeader: the keys with [http.TrailerPrefix] and those dst's Trailer
// header declares.
func copyTrailers(dst, src http.Header) {
	if src == nil {
		return
	}
	for k, v := range src {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			dst[k] = v
		}
	}
	for _, decl := range dst.Values("Trailer") {
		for _, name := range strings.Split(decl, ",") {
			if name = http.CanonicalHeaderKey(strings.TrimSpace(name)); name != "" {
				if v, ok := src[name]; ok {
					dst[name] = v
				}
			}
		}
	}
}

// send writes the status and the buffered body to the client, then the
// trailers the handler set.
func (b *bufferWriter) send() {
	b.w.WriteHeader(b.status)
	if b.buf.Len() > 0 {
		b.w.Write(b.buf.Bytes())
	}
	copyTrailers(b.w.Header(), b.late)
}
