// Package httpx holds what the idempotency and webhook middlewares decide
// alike about a handler's response: which statuses ask for a retry, how a
// Retry-After is spelled, and which handler answers before it returns.
package httpx

import (
	"net/http"
	"reflect"
	"strconv"
	"time"
)

// RetryStatus reports whether a handler's status asks the client to retry
// the request later, so the work it guards must be released, not
// recorded: 5xx, 408 Request Timeout, 423 Locked, 425 Too Early and 429
// Too Many Requests. Every other status, 409 Conflict included, is the
// handler's decision.
func RetryStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusLocked, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return code >= 500
}

// RetryAfterSeconds is d as a Retry-After value: whole seconds, rounded
// up, at least 1.
func RetryAfterSeconds(d time.Duration) string {
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
}

// MaxFenceRetryAfter is the longest Retry-After sent for a store refusal
// that says when it ends (a fenced shard): an operator may end the fence
// long before then, and a client that sleeps for the header (go-retryablehttp,
// the Stainless SDKs) must come back within a minute of the store serving
// again.
const MaxFenceRetryAfter = 30 * time.Second

// FenceRetryAfter is the Retry-After of a refusal that ends by itself at
// end, asked at now: the seconds until end, rounded up, at least 1 and at
// most [MaxFenceRetryAfter].
func FenceRetryAfter(end, now time.Time) string {
	return RetryAfterSeconds(min(end.Sub(now), MaxFenceRetryAfter))
}

// FenceEnd is end as the body and logs state it: UTC, RFC 3339, rounded
// up to the second, so a client that waits until then is not early.
func FenceEnd(end time.Time) string {
	if t := end.Truncate(time.Second); t.Before(end) {
		end = t.Add(time.Second)
	}
	return end.UTC().Format(time.RFC3339)
}

// timeoutHandlerType is the type of the handler [http.TimeoutHandler]
// returns.
var timeoutHandlerType = reflect.TypeOf(http.TimeoutHandler(http.NotFoundHandler(), time.Second, ""))

// IsTimeoutHandler reports whether h is an [http.TimeoutHandler], which
// answers 503 while the handler it wraps goes on running.
func IsTimeoutHandler(h http.Handler) bool {
	return h != nil && reflect.TypeOf(h) == timeoutHandlerType
}
