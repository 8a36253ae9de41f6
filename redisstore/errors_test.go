package redisstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ctoken/ctoken/replay"
)

func TestRefusalsCarryAReason(t *testing.T) {
	for _, sentinel := range []error{ErrFenced, ErrClockSkew, ErrNotDurable} {
		if !errors.Is(sentinel, ErrUnavailable) {
			t.Errorf("%v does not match ErrUnavailable", sentinel)
		}
		err := fmt.Errorf("wrapped: %w", refuse(sentinel, "why", fmt.Errorf("%w: detail", ErrUnavailable)))
		if !errors.Is(err, sentinel) || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrInvalidClaim) {
			t.Errorf("refusal of %v: errors.Is mismatch: %v", sentinel, err)
		}
		if Reason(err) != "why" {
			t.Errorf("Reason = %q", Reason(err))
		}
	}
	if !errors.Is(ErrConfig, replay.ErrConfig) {
		t.Error("ErrConfig is not replay.ErrConfig")
	}
	for _, err := range []error{nil, ErrUnavailable, errors.New("other")} {
		if r := Reason(err); r != "" {
			t.Errorf("Reason(%v) = %q, want empty", err, r)
		}
	}
}
