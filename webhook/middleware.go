package webhook

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/ctoken/ctoken/internal/httpx"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// StatusCode is the HTTP status [Verifier.Middleware] answers a refused
// request with: 413 for [ErrTooLarge]; 400 for [ErrMalformed]; 401 for
// [ErrSignature] and [ErrTimestamp]; 503 for [ErrReplayStore] and
// [ErrInProgress], so the sender retries later; and 500 for everything
// else, including [ErrNoSecret] and [ErrConfig] (a misconfigured receiver is
// the receiver's fault, not the sender's). It returns 200 for nil and for
// [ErrDuplicate], a delivery acknowledged as already processed.
func StatusCode(err error) int {
	switch {
	case err == nil, errors.Is(err, ErrDuplicate):
		return http.StatusOK
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrMalformed):
		return http.StatusBadRequest
	case errors.Is(err, ErrSignature), errors.Is(err, ErrTimestamp):
		return http.StatusUnauthorized
	case errors.Is(err, ErrReplayStore), errors.Is(err, ErrInProgress):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Middleware returns a handler that runs next once for each authentic
// delivery, however many copies of it arrive, on this instance or (with a
// shared store) any other: a delivery is acknowledged with 2xx only by a
// handler that processed it, or as a duplicate of one that did.
//
// For each request, in order:
//   - a body over MaxBody is refused with 413 without buffering more than
//     the cap (the body is read through http.MaxBytesReader);
//   - an unreadable body, or any error of [Verifier.Verify], maps through
//     [StatusCode] and OnReject sees it;
//   - the delivery's lease is acquired ([Verifier.Acquire]), under a
//     context that keeps the request's values but not its cancellation
//     and ends after a quarter of [Config.Lease] ([replay.WithDeadlineOnly]):
//     a sender that disconnects then does not turn a lease the store took
//     into an unknown outcome. A delivery
//     already processed gets 200 OK with an empty body and OnDuplicate sees
//     it; a copy of a delivery in progress (its lease is live) gets 503 with
//     a Retry-After header of the seconds the lease may still run, and
//     OnReject sees [ErrInProgress]; a store failure gets 503 with a
//     Retry-After of the seconds until the store's refusal ends when the
//     store says ([replay.RetryAt]: a fenced shard; at most
//     [MaxFenceRetryAfter], the body giving the end), else of
//     [Config.RetryAfter], and without Retry-After for a refusal only an
//     operator can lift ([replay.ErrConfig]; the body says so), and
//     OnReject sees it. In none of these is next called.
//   - otherwise next is called with the body readable again from r.Body,
//     the delivery available through [DeliveryFrom], and a context that
//     keeps the request's values and ends at [Lease.Deadline] — not when
//     the sender disconnects, so that a sender's timeout never turns a
//     processed delivery into a released one.
//
// The status next sends is the first it writes with WriteHeader, Write or
// Flush (a later stray WriteHeader changes nothing). If it asks the sender
// to retry — 5xx, 408 Request Timeout, 423 Locked, 425 Too Early or 429
// Too Many Requests — or next panics (or ends its goroutine with
// runtime.Goexit), the lease is released ([Lease.Release]) so the
// sender's retry is processed; any other status
// (2xx, and also the other 4xx, 409 Conflict included: the handler has
// decided) confirms the delivery as processed ([Lease.Confirm]) before the
// response is finished, unless next flushed it earlier. When the store cannot record
// the outcome, OnLeaseError sees it and the handler's response is sent
// unchanged: an unconfirmed delivery can be processed again only by a copy
// arriving after its lease has expired. A zero Verifier answers every
// request 500.
//
// Under [Config.Transactional] next runs inside a transaction of the
// replay store ([Lease.Begin]): its context carries the transaction
// (pgstore.TxFrom(r.Context())), and what next writes to the response is
// held in memory until the delivery's outcome is recorded. A status that
// asks for a retry, or a panic, rolls the transaction back and releases
// the lease, and the response is then sent as next wrote it. Any other
// status commits next's writes in the transaction that confirms the
// delivery ([Lease.Confirm]), and the response is sent only after the
// commit succeeded. When it did not, next's response is discarded and
// the sender gets 503 with a Retry-After as for a store failure of
// Acquire, so it retries, and OnLeaseError sees the error: for a lease that ran out
// before the commit, whether or not another attempt took the delivery
// ([replay.ErrLeaseLost]), nothing of next's writes was kept; for one
// the store rolled back for a reason it knows ([replay.ErrRolledBack]: a
// statement of next's work had failed), nothing was kept and the lease is
// released at once; for any other failure the commit's outcome is unknown
// and the lease is not released, so the retry finds the delivery
// processed or, once the lease ends, processes it. A failure to open the transaction is refused like a
// store failure of Acquire (503, OnReject sees it), without calling next.
// The writer next gets does not implement [http.Flusher] (nor the
// methods of [http.ResponseController]), since nothing can be sent before
// the commit; informational (1xx) statuses are dropped.
//
// next must not be an [http.TimeoutHandler] unless [Config.Transactional]
// is set: it answers 503 while the handler it wraps goes on running, the
// 503 releases the delivery, and the sender's retry would run the handler
// beside itself. Such a Middleware refuses every request with 500
// (OnReject sees an error matching [ErrConfig]) and calls nothing. Put the
// timeout outside the Middleware, or rely on the lease's deadline, which
// ends the handler's context. Under Transactional the composition is safe:
// the 503 rolls the work back, and the late handler's statements are
// refused.
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	timeoutInside := httpx.IsTimeoutHandler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(err error) {
			if v != nil && v.p != nil && v.p.onReject != nil {
				v.p.onReject(r, err)
			}
			code := StatusCode(err)
			if code == http.StatusServiceUnavailable && errors.Is(err, ErrReplayStore) && errors.Is(err, replay.ErrConfig) {
				w.Header().Del("Retry-After")
				http.Error(w, operatorText, code)
				return
			}
			if code == http.StatusServiceUnavailable && v != nil && v.p != nil && len(w.Header()["Retry-After"]) == 0 {
				w.Header().Set("Retry-After", storeRetryAfter(err, v.p.retryAfter, time.Now()))
			}
			http.Error(w, unavailableText(err, code), code)
		}
		if v == nil || v.p == nil {
			refuse(errZeroVerifier)
			return
		}
		p := v.p
		if timeoutInside && !p.transactional {
			refuse(errTimeoutHandler)
			return
		}
		// Body refusals come before Verify, which reports the others.
		refuseBody := func(err error) {
			if p.obs != nil {
				p.report(observe.OutcomeRefused, observe.KeyNone, err, 0)
			}
			refuse(err)
		}
		if r.ContentLength > p.maxBody {
			refuseBody(errBodyTooLarge)
			return
		}
		rb := r.Body
		if rb == nil {
			rb = http.NoBody
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, rb, p.maxBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				refuseBody(errBodyTooLarge)
			} else {
				refuseBody(errBodyUnreadable)
			}
			return
		}
		d, err := v.Verify(r.Header, body)
		if err != nil {
			refuse(err)
			return
		}
		// The lease is taken under the request's values but not its
		// cancellation, within a quarter of the lease: a sender that
		// gives up meanwhile would only turn a taken lease into an
		// unknown outcome, and the store then runs the call on the
		// caller's goroutine (see replay.WithDeadlineOnly).
		actx, acancel := replay.WithDeadlineOnly(r.Context(), time.Now().Add(p.lease/4))
		lease, wait, err := v.acquire(actx, d)
		acancel()
		switch {
		case errors.Is(err, ErrDuplicate):
			if p.onDuplicate != nil {
				p.onDuplicate(r, d)
			}
			w.WriteHeader(http.StatusOK)
			return
		case errors.Is(err, ErrInProgress):
			w.Header().Set("Retry-After", httpx.RetryAfterSeconds(wait))
			refuse(err)
			return
		case err != nil:
			refuse(err)
			return
		}
		// The handler's context keeps the request's values but not its
		// cancellation: a sender that gives up while the handler works
		// must not make a context-bound step after the effect fail, and
		// with it the delivery be released and run again. It ends at the
		// lease's deadline, the fence of the delivery's lease.
		ctx, cancel := context.WithDeadline(context.WithValue(context.WithoutCancel(r.Context()), deliveryKey{}, d), lease.Deadline())
		defer cancel()
		if p.transactional {
			v.serveInWork(ctx, w, r, body, lease, next, refuse)
			return
		}
		r2 := r.WithContext(ctx)
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.ContentLength = int64(len(body))
		sw := &statusWriter{ResponseWriter: w}
		// The outcome is recorded even when the client has gone: the
		// sender's retry depends on it.
		finish := context.WithoutCancel(r.Context())
		report := func(err error) {
			if err != nil && p.onLeaseError != nil {
				p.onLeaseError(r, d, err)
			}
		}
		returned := false
		defer func() {
			// A handler that panics, or ends its goroutine with
			// runtime.Goexit, did not finish: release, never confirm.
			pv := recover()
			switch {
			case !returned:
				report(lease.Release(finish))
			case httpx.RetryStatus(sw.status):
				report(lease.Release(finish))
			default:
				report(lease.Confirm(finish))
			}
			if pv != nil {
				panic(pv)
			}
		}()
		next.ServeHTTP(sw, r2)
		returned = true
	})
}

// serveInWork is the Middleware's path under [Config.Transactional], from
// an acquired lease on: next runs in the lease's work, with ctx (the
// delivery, the lease's deadline) under the transaction.
func (v *Verifier) serveInWork(ctx context.Context, w http.ResponseWriter, r *http.Request, body []byte, lease *Lease, next http.Handler, refuse func(error)) {
	p := v.p
	d := lease.Delivery()
	// The outcome is recorded even when the client has gone: the sender's
	// retry depends on it.
	finish := context.WithoutCancel(r.Context())
	report := func(err error) {
		if err != nil && p.onLeaseError != nil {
			p.onLeaseError(r, d, err)
		}
	}
	ctx, err := lease.Begin(ctx)
	if err != nil {
		report(lease.Release(finish))
		refuse(err)
		return
	}
	r2 := r.WithContext(ctx)
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	bw := &heldResponse{header: w.Header().Clone()}
	if bw.header == nil {
		bw.header = http.Header{}
	}
	func() {
		returned := false
		defer func() {
			// A handler that panics, or ends its goroutine with
			// runtime.Goexit, did not finish: roll back and release.
			pv := recover()
			if !returned {
				report(lease.Release(finish))
			}
			if pv != nil {
				panic(pv)
			}
		}()
		next.ServeHTTP(bw, r2)
		returned = true
	}()
	if httpx.RetryStatus(bw.code()) {
		report(lease.Release(finish))
		bw.send(w)
		return
	}
	if err := lease.Confirm(finish); err != nil {
		report(err)
		code := http.StatusServiceUnavailable
		if errors.Is(err, replay.ErrConfig) {
			w.Header().Del("Retry-After")
			http.Error(w, operatorText, code)
			return
		}
		w.Header().Set("Retry-After", storeRetryAfter(err, p.retryAfter, time.Now()))
		http.Error(w, unavailableText(err, code), code)
		return
	}
	bw.send(w)
}

// operatorText is the body of the 503 for a replay store refusal only an
// operator can lift (it matches [replay.ErrConfig]): sent without
// Retry-After, and never a 4xx, so the sender keeps the delivery.
const operatorText = "Service Unavailable: the receiver's replay store needs its operator; the delivery was not processed, keep it and retry later"

// storeRetryAfter is the Retry-After of a 503 for the replay store's
// refusal err at now: the seconds until it ends when the store says
// ([replay.RetryAt]: a fenced shard's end, rounded up, at least 1, at most
// [MaxFenceRetryAfter]), else def ([Config.RetryAfter]).
func storeRetryAfter(err error, def string, now time.Time) string {
	if at, ok := replay.RetryAt(err); ok {
		return httpx.FenceRetryAfter(at, now)
	}
	return def
}

// unavailableText is the body of a refusal with status code for err: the
// status text, and for a 503 whose replay store refusal says when it ends
// ([replay.RetryAt]: only a store's error does), that instant, which its
// Retry-After (at most [MaxFenceRetryAfter]) does not give.
func unavailableText(err error, code int) string {
	if code != http.StatusServiceUnavailable {
		return http.StatusText(code)
	}
	at, ok := replay.RetryAt(err)
	if !ok {
		return http.StatusText(code)
	}
	return "Service Unavailable: the receiver's replay store is fenced after losing data until " + httpx.FenceEnd(at) + " at the latest (it may serve sooner); the delivery was not processed, keep it and retry after the Retry-After delay"
}

// heldResponse holds a handler's response until [heldResponse.send]. It
// has no Flush and no Unwrap: nothing reaches the client before the
// handler's work is committed.
type heldResponse struct {
	header http.Header
	status int // the first final status; 0 until one is written
	body   bytes.Buffer
}

func (w *heldResponse) Header() http.Header { return w.header }

// WriteHeader keeps the first final status; informational ones are dropped.
func (w *heldResponse) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
}

func (w *heldResponse) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}

// code is the status the response has or, when none was written, will
// have.
func (w *heldResponse) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// send writes the held response to rw: its header in place of rw's, its
// status and its body.
func (w *heldResponse) send(rw http.ResponseWriter) {
	h := rw.Header()
	clear(h)
	for k, vs := range w.header {
		h[k] = vs
	}
	rw.WriteHeader(w.code())
	if w.body.Len() > 0 {
		rw.Write(w.body.Bytes())
	}
}

// errTimeoutHandler refuses every request of a Middleware whose next is an
// [http.TimeoutHandler] outside [Config.Transactional].
var errTimeoutHandler = reason.New(ErrConfig, "next is an http.TimeoutHandler, which answers 503 while its handler runs on: the sender's retry would run it again (put the timeout outside the middleware, or set Config.Transactional)")

// statusWriter records the first final status a handler sends.
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

// Flush passes through to the underlying writer when it can flush; a
// flush without a status sends 200.
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
