package sqlitestore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ctoken/ctoken/replay"
)

// TestErrorsMatchReplay: every sentinel, and the refusals built from one,
// match their counterpart in package replay (and still their own), so
// code written against replay's vocabulary holds on this store.
func TestErrorsMatchReplay(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		own, shared error
	}{
		{"ErrUnavailable", ErrUnavailable, ErrUnavailable, replay.ErrUnavailable},
		{"ErrInvalidClaim", ErrInvalidClaim, ErrInvalidClaim, replay.ErrInvalidClaim},
		{"ErrConfig", ErrConfig, ErrConfig, replay.ErrConfig},
		{"ErrForgotten", ErrForgotten, ErrUnavailable, replay.ErrUnavailable},
		{"a fence", fenced{}, ErrUnavailable, replay.ErrUnavailable},
		{"a lowered connection", fmt.Errorf("%w: %w: synchronous=OFF", ErrUnavailable, ErrConfig), ErrConfig, replay.ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.own) || !errors.Is(tc.err, tc.shared) {
				t.Fatalf("%v: matches %v: %v, %v: %v; want both", tc.err, tc.own, errors.Is(tc.err, tc.own), tc.shared, errors.Is(tc.err, tc.shared))
			}
		})
	}
	if errors.Is(ErrInvalidClaim, replay.ErrUnavailable) || errors.Is(ErrConfig, replay.ErrUnavailable) {
		t.Fatal("a sentinel matches another's counterpart")
	}
}

// must fails t on an error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
