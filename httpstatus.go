package ctoken

import "errors"

// CursorHTTPStatus returns the HTTP status a plain net/http server answers
// with when a request's cursor or arguments are refused with err:
//
//   - nil: 200 (OK).
//   - [ErrCursorExpired] (too old, or from another server session): 410
//     (Gone). The cursor will never verify again; the client starts over
//     from the first page, without it.
//   - [ErrCursorInvalid] (forged, tampered, truncated, another caller's,
//     another endpoint's, or the request's filter changed) and
//     [ErrArgsInvalid] (arguments that cannot be fingerprinted): 400 (Bad
//     Request). Retrying with the same cursor cannot succeed.
//   - [ErrOpaqueStateTooLarge] (at issue: the state, for a keyset cursor
//     the sort key of the page's last row, encodes over
//     [CursorIssuer.StateBudget]): 422 (Unprocessable Content). The same
//     request fails the same way every time, so it is no 5xx a client
//     would retry in vain: the listing cannot continue from that row, and
//     the client asks for the page again with another page size, so that
//     it ends on another row. The server's fix is a bounded sort key
//     (docs/cursors.md, "A sort key of text").
//   - Any other error (a key misconfiguration, a cursor too large to issue):
//     500 (Internal Server Error): the server's fault, not the client's.
//
// The response body should say only which of these happened (never
// [Reason], which belongs in the server's log). docs/pagination.md shows a
// handler and why 410 rather than 400 for an expired cursor.
func CursorHTTPStatus(err error) int {
	switch {
	case err == nil:
		return 200
	case errors.Is(err, ErrCursorExpired):
		return 410
	case errors.Is(err, ErrCursorInvalid), errors.Is(err, ErrArgsInvalid):
		return 400
	case errors.Is(err, ErrOpaqueStateTooLarge):
		return 422
	}
	return 500
}
