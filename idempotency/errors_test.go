package idempotency

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestStatusCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{errKeyMissing, 400}, {errKeyRepeated, 400}, {errKeyMalformed, 400}, {errKeyLength, 400},
		{errBodyUnreadable, 400}, {errNoCaller, 401}, {errInProgress, 409}, {errBodyTooLarge, 413},
		{errMismatch, 422}, {errNoRecord, 500}, {errRecordCorrupt, 500}, {errResponseTooBig, 500},
		{storeAcquireError(errInjected), 503}, {outcomeUnknownError(errInjected), 503}, {fmt.Errorf("wrapped: %w", errMismatch), 422},
		{nil, 500}, {errors.New("other"), 500},
	} {
		if got := StatusCode(tc.err); got != tc.want {
			t.Errorf("StatusCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestProblemBodies(t *testing.T) {
	p, err := newParams(Config{Store: newStore(), Keys: testKeys, Caller: func(*http.Request) (string, error) { return "a", nil }, Header: "X-Key", MaxKeyBytes: 40, MaxRequestBytes: 99})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		err    error
		detail string
	}{
		{errKeyMissing, "This request requires the X-Key header: send a unique value, and the same value when you retry the request."},
		{errKeyMalformed, "The X-Key header must be one key of 1 to 40 characters: a structured-field string (RFC 8941, printable ASCII in double quotes), or bare visible ASCII without '\"', '\\', ',' or ';'."},
		{errNoCaller, "The request has no authenticated caller."},
		{errBodyTooLarge, "The request body is over 99 bytes."},
		{errBodyUnreadable, "The request body could not be read."},
		{errInProgress, "A request with this X-Key is still being processed: retry after the Retry-After delay."},
		{errMismatch, "This X-Key was already used with a different request (method, path, query, body or its content coding): the first request under it may have been processed; send that request again unchanged to get its response. A new key is for a new request only."},
		{storeAcquireError(errInjected), "The request could not be checked for a repeat: retry with the same X-Key after the Retry-After delay."},
		{errRecordCorrupt, "The request with this X-Key was processed, but its response cannot be replayed."},
		{errResponseTooBig, "The request with this X-Key was processed, but its response was too large to store and cannot be replayed."},
		{errors.New("other"), "The server is misconfigured."},
		{outcomeUnknownError(errInjected), "The request was processed, but whether its effects were kept is unknown: the server lost its store while committing them. Do not send it again under a new X-Key; retry it with the same X-Key after the Retry-After delay: the retry gets the response if they were kept, and is processed if they were not."},
	} {
		t.Run(tc.detail, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeProblem(w, StatusCode(tc.err), p.problems.body(tc.err), "7")
			var doc struct {
				Type, Title, Detail string
				Status              int
			}
			if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			status := StatusCode(tc.err)
			wantType, wantTitle := "about:blank", http.StatusText(status)
			if errors.Is(tc.err, ErrOutcomeUnknown) {
				wantType, wantTitle = ProblemOutcomeUnknown, "Outcome Unknown"
			}
			if doc.Detail != tc.detail || doc.Status != status || doc.Title != wantTitle || doc.Type != wantType {
				t.Fatalf("problem %+v", doc)
			}
			h := w.Header()
			if w.Code != status || h.Get("Content-Type") != "application/problem+json" || h.Get("Cache-Control") != "no-store" || h.Get("Retry-After") != "7" {
				t.Fatalf("status %d headers %v", w.Code, h)
			}
		})
	}
}
