package webhook

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/ctoken/ctoken/observe"
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
//   - the delivery's lease is acquired ([Verifier.Acquire]). A delivery
//     already processed gets 200 OK with an empty body and OnDuplicate sees
//     it; a copy of a delivery in progress (its lease is live) gets 503 with
//     a Retry-After header of the seconds the lease may still run, and
//     OnReject sees [ErrInProgress]; a store failure gets 503 with a
//     Retry-After of [Config.RetryAfter] and OnReject sees it. In none of
//     these is next called.
//   - otherwise next is called with the body readable again from r.Body,
//     the delivery available through [DeliveryFrom], and a context that
//     ends at [Lease.Deadline].
//
// The status next sends is the first it writes with WriteHeader, Write or
// Flush (a later stray WriteHeader changes nothing). If it asks the sender
// to retry — 5xx, 408 Request Timeout, 423 Locked, 425 Too Early or 429
// Too Many Requests — or next panics, the lease is released
// ([Lease.Release]) so the sender's retry is processed; any other status
// (2xx, and also the other 4xx, 409 Conflict included: the handler has
// decided) confirms the delivery as processed ([Lease.Confirm]) before the
// response is finished, unless next flushed it earlier. When the store cannot record
// the outcome, OnLeaseError sees it and the handler's response is sent
// unchanged: an unconfirmed delivery can be processed again only by a copy
// arriving after its lease has expired. A zero Verifier answers every
// request 500.
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(err error) {
			if v != nil && v.p != nil && v.p.onReject != nil {
				v.p.onReject(r, err)
			}
			code := StatusCode(err)
			if code == http.StatusServiceUnavailable && v != nil && v.p != nil && len(w.Header()["Retry-After"]) == 0 {
				w.Header().Set("Retry-After", v.p.retryAfter)
			}
			http.Error(w, http.StatusText(code), code)
		}
		if v == nil || v.p == nil {
			refuse(errZeroVerifier)
			return
		}
		p := v.p
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
		lease, wait, err := v.acquire(r.Context(), d)
		switch {
		case errors.Is(err, ErrDuplicate):
			if p.onDuplicate != nil {
				p.onDuplicate(r, d)
			}
			w.WriteHeader(http.StatusOK)
			return
		case errors.Is(err, ErrInProgress):
			w.Header().Set("Retry-After", retryAfterSeconds(wait))
			refuse(err)
			return
		case err != nil:
			refuse(err)
			return
		}
		ctx, cancel := context.WithDeadline(context.WithValue(r.Context(), deliveryKey{}, d), lease.Deadline())
		defer cancel()
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
		defer func() {
			if pv := recover(); pv != nil {
				report(lease.Release(finish))
				panic(pv)
			}
			if retryStatus(sw.status) {
				report(lease.Release(finish))
				return
			}
			report(lease.Confirm(finish))
		}()
		next.ServeHTTP(sw, r2)
	})
}

// retryAfterSeconds is d as a Retry-After value: whole seconds, rounded
// up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
}

// retryStatus reports whether a handler's status asks the sender to retry
// the delivery later, so it must not be confirmed as processed.
func retryStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusLocked, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return code >= 500
}

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
