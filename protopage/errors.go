package protopage

import (
	"errors"
	"log/slog"
)

// The errors [Pager.Start] and [Page.Next] return. The text of all but
// [ErrServer] is written for the client, and is all a transport should send it
// (the interceptors in grpcpage and connectpage send exactly that text):
// it never carries the reason a token was refused, token text, the caller
// or key material. The reason goes to the Pager's logger, and stays
// readable on the server side with ctoken.Reason,
// since a refusal also matches ctoken's own error with errors.Is.
var (
	// ErrTokenInvalid refuses a page_token that is forged, tampered with,
	// truncated, malformed, or issued for another method or another caller
	// (it also matches ctoken.ErrCursorInvalid). Transports answer
	// InvalidArgument.
	ErrTokenInvalid = errors.New("page_token is invalid")
	// ErrTokenExpired refuses an authentic page_token that is older than the
	// issuer's TTL or was issued by another server session (it also matches
	// ctoken.ErrCursorExpired). Transports answer InvalidArgument; the
	// client starts over.
	ErrTokenExpired = errors.New("page_token has expired: start over without a page_token")
	// ErrRequestChanged refuses a page_token sent with a request whose
	// fields (other than page_size, page_token and skip) differ from the
	// request it was issued for (it also matches ctoken.ErrCursorInvalid).
	// Page tokens bind the method, the caller and the fields inside their
	// MAC and do not carry them (ctoken's cursor format version 2), so a
	// token of another caller or method is refused with it too, and so is
	// a forged or altered token whose body still decodes: which of these
	// it is cannot be known (observe.ReasonCursorWrongScope), and the text
	// says so before it says what to do. A version 1 token is compared
	// field by field and gets it for other fields only. AIP-158:
	// transports answer InvalidArgument.
	ErrRequestChanged = errors.New("page_token does not match this request: it was issued for other fields, another caller or another method, or altered; repeat the request it was issued for (only page_size and skip may change), or start over without a page_token")
	// ErrKeyTooLarge refuses to issue the next page token because the
	// keyset state [Page.Next] was given (the sort key of the page's last
	// item) is over [Pager.StateBudget] (it also matches
	// ctoken.ErrOpaqueStateTooLarge). The same request fails the same way
	// every time, so it is no server fault a client should retry: a page
	// that ends on another item can continue, so the client asks again
	// with another page_size. The server's fix is a bounded sort key
	// (docs/pagination.md), and the refusal is logged at Error. Transports
	// answer FailedPrecondition.
	ErrKeyTooLarge = errors.New("page_token cannot be issued: this page ends on an item whose sort key is too long for a page_token; ask for the page again with another page_size, so that it ends on another item")
	// ErrNoCaller refuses a request whose caller could not be found: the
	// [Call]'s CallerFunc returned an error or an empty caller. Transports
	// answer Unauthenticated.
	ErrNoCaller = errors.New("the request has no authenticated caller")
	// ErrServer reports a fault of the server, not of the request: no [Call]
	// in the context, a request message without the page fields, a keyset
	// state message that does not marshal. Transports answer Internal with a fixed
	// message; the cause is logged and stays in the error's chain.
	ErrServer = errors.New("server error")
)

// refusal is an error of [Pager.Start] or [Page.Next]: its text is the
// kind's, fixed; errors.Is matches the kind and, through Unwrap, the cause
// (ctoken's rejection, which carries the log-safe reason).
type refusal struct {
	kind  error
	cause error
}

func (r *refusal) Error() string        { return r.kind.Error() }
func (r *refusal) Is(target error) bool { return target == r.kind }
func (r *refusal) Unwrap() error        { return r.cause }

// fault is a reason-carrying cause for refusals that ctoken does not
// produce; its text is the reason, fixed and log-safe.
type fault string

func (f fault) Error() string { return string(f) }

// logLevel is the level a refusal of kind is logged at: Info for what an
// honest client causes (an expired token, a changed request, no caller),
// Error for faults of the server and for a sort key too large for a token
// (its operator must bound the key), Warn for the rest.
func logLevel(kind error) slog.Level {
	switch kind {
	case ErrTokenExpired, ErrRequestChanged, ErrNoCaller:
		return slog.LevelInfo
	case ErrServer, ErrKeyTooLarge:
		return slog.LevelError
	}
	return slog.LevelWarn
}
