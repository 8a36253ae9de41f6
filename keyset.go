package ctoken

// Keyset pagination: the cursor carries the last sort key a page ended on
// (the "seek" or "after" position), not a page number. The wire is that of
// every cursor: Page 0 and the sort key as the typed state of
// [IssueState], so a keyset cursor verifies with [VerifyState] too.

// IssueKeyset issues a cursor for the page that starts after the sort key
// after, bound to scope: [IssueState] with no page number. after is encoded
// as deterministic CBOR and must fit [MaxOpaqueStateBytes]
// ([ErrOpaqueStateTooLarge], which [CursorHTTPStatus] answers with 422) and
// [MaxCursorBytes] ([ErrCursorTooLarge]). A key that holds text a user
// wrote has no length of its own: docs/cursors.md ("A sort key of text")
// bounds it so that every key fits and paging stays exact.
//
// scope.ToolID names the operation or endpoint the cursor belongs to (for
// an HTTP API, say "GET /v1/items"), scope.CallerID the authenticated
// caller, and scope.Args the fingerprint of the request's other parameters
// (filter, order, parent; not the page size or the cursor itself).
func IssueKeyset[T any](i *CursorIssuer, scope CursorScope, after T) (string, error) {
	b, err := encodeState(after)
	if err != nil {
		return "", err
	}
	return i.Issue(CursorPayload{CursorScope: scope, State: b})
}

// VerifyKeyset verifies cursor like [CursorIssuer.Verify] and returns the
// sort key [IssueKeyset] put in it. A cursor that is not a keyset cursor of
// T — issued with a page number, or whose state does not decode strictly
// into a T — is [ErrCursorInvalid] with the [Reason] of [VerifyState]'s
// type refusal ([observe.ReasonCursorStateType]); every other error is Verify's
// ([ErrCursorInvalid] or [ErrCursorExpired], with a Reason). On error the
// key is T's zero value. Like VerifyState, the [observe.Observer] sees the
// cursor's authentication (verified) before the type check.
//
// The first page has no cursor: a handler checks for the empty string
// before calling VerifyKeyset, which refuses it.
func VerifyKeyset[T any](i *CursorIssuer, cursor string, want CursorScope) (T, error) {
	var zero T
	p, err := i.Verify(cursor, want)
	if err != nil {
		return zero, err
	}
	var v T
	if p.Page != 0 || stateDecMode.Unmarshal(p.State, &v) != nil {
		return zero, errCursorStateType
	}
	return v, nil
}
