package redisstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ctoken/ctoken/replay"
)

func TestRefusalsCarryAReason(t *testing.T) {
	for _, sentinel := range []error{ErrFenced, ErrClockSkew, ErrNotDurable} {
		err := fmt.Errorf("wrapped: %w", refuse(sentinel, "why", fmt.Errorf("%w: detail", ErrUnavailable)))
		if !errors.Is(err, sentinel) || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrInvalidClaim) {
			t.Errorf("refusal of %v: errors.Is mismatch: %v", sentinel, err)
		}
		if Reason(err) != "why" {
			t.Errorf("Reason = %q", Reason(err))
		}
	}
	for _, err := range []error{nil, ErrUnavailable, errors.New("other")} {
		if r := Reason(err); r != "" {
			t.Errorf("Reason(%v) = %q, want empty", err, r)
		}
	}
}

// TestErrorsMatchReplay: every sentinel, and every refusal built from one,
// matches its counterpart in package replay (and still its own), so code
// written against replay's vocabulary holds on this store.
func TestErrorsMatchReplay(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		own    error
		shared error
	}{
		{"ErrUnavailable", ErrUnavailable, ErrUnavailable, replay.ErrUnavailable},
		{"ErrInvalidClaim", ErrInvalidClaim, ErrInvalidClaim, replay.ErrInvalidClaim},
		{"ErrConfig", ErrConfig, ErrConfig, replay.ErrConfig},
		{"ErrFenced", ErrFenced, ErrUnavailable, replay.ErrUnavailable},
		{"ErrClockSkew", ErrClockSkew, ErrUnavailable, replay.ErrUnavailable},
		{"ErrNotDurable", ErrNotDurable, ErrUnavailable, replay.ErrUnavailable},
		{"a refusal of ErrFenced", refuse(ErrFenced, whySkew, nil), ErrFenced, replay.ErrUnavailable},
		{"a refusal of ErrUnavailable", refuse(ErrUnavailable, "timeout", nil), ErrUnavailable, replay.ErrUnavailable},
		{"wrapped", fmt.Errorf("call: %w", refuse(ErrInvalidClaim, "empty ID", nil)), ErrInvalidClaim, replay.ErrInvalidClaim},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.own) || !errors.Is(tc.err, tc.shared) {
				t.Fatalf("%v: matches %v: %v, %v: %v; want both", tc.err, tc.own, errors.Is(tc.err, tc.own), tc.shared, errors.Is(tc.err, tc.shared))
			}
		})
	}
	if errors.Is(ErrInvalidClaim, replay.ErrUnavailable) || errors.Is(ErrUnavailable, replay.ErrInvalidClaim) {
		t.Fatal("ErrInvalidClaim and ErrUnavailable match each other's counterpart")
	}
}
