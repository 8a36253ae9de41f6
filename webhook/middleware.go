package webhook

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
)

// StatusCode is the HTTP status [Verifier.Middleware] answers a refused
// request with: 413 for [ErrTooLarge]; 400 for [ErrMalformed]; 401 for
// [ErrSignature] and [ErrTimestamp]; 503 for [ErrReplayStore], so the
// sender retries later; and 500 for everything else, including
// [ErrNoSecret] and [ErrConfig] (a misconfigured receiver is the
// receiver's fault, not the sender's). It returns 200 for nil.
func StatusCode(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrMalformed):
		return http.StatusBadRequest
	case errors.Is(err, ErrSignature), errors.Is(err, ErrTimestamp):
		return http.StatusUnauthorized
	case errors.Is(err, ErrReplayStore):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Middleware returns a handler that admits only authentic, first-seen
// deliveries to next. Refused requests get the status of [StatusCode] with
// the status text as body, and OnReject sees their error:
//
//   - a body over MaxBody is refused with 413 without buffering more than
//     the cap (the body is read through http.MaxBytesReader);
//   - an unreadable body, or any error of [Verifier.Verify] or
//     [Verifier.Claim], maps through [StatusCode];
//   - a duplicate gets 200 OK with an empty body, and next is not called;
//   - otherwise next is called with the body readable again from r.Body
//     and the delivery available through [DeliveryFrom].
//
// The status next sends is the first it writes with WriteHeader, Write or
// Flush (a later stray WriteHeader changes nothing). If it is 5xx, or next
// panics, the claim is released when the store implements
// [replay.Releaser], so the sender's retry is processed rather than
// acknowledged as a duplicate. A zero Verifier answers every request 500.
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(err error) {
			if v != nil && v.p != nil && v.p.onReject != nil {
				v.p.onReject(r, err)
			}
			code := StatusCode(err)
			http.Error(w, http.StatusText(code), code)
		}
		if v == nil || v.p == nil {
			refuse(errZeroVerifier)
			return
		}
		if r.ContentLength > v.p.maxBody {
			refuse(errBodyTooLarge)
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
				refuse(errBodyTooLarge)
			} else {
				refuse(errBodyUnreadable)
			}
			return
		}
		d, err := v.Verify(r.Header, body)
		if err != nil {
			refuse(err)
			return
		}
		first, err := v.Claim(r.Context(), d)
		if err != nil {
			refuse(err)
			return
		}
		if !first {
			w.WriteHeader(http.StatusOK)
			return
		}
		r2 := r.WithContext(context.WithValue(r.Context(), deliveryKey{}, d))
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.ContentLength = int64(len(body))
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				_ = v.Release(context.WithoutCancel(r.Context()), d)
				panic(p)
			}
			if sw.status >= 500 {
				_ = v.Release(context.WithoutCancel(r.Context()), d)
			}
		}()
		next.ServeHTTP(sw, r2)
	})
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
