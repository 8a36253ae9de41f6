package ctoken

import (
	"context"
	"errors"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
)

// stepClock is the shared settable test clock.
type stepClock = clocktest.Clock

func newStepClock() *stepClock { return clocktest.New() }

// failingStore is a ReplayStore that is down.
type failingStore struct{}

func (failingStore) Claim(context.Context, string, time.Time) (bool, error) {
	return false, errors.New("store unreachable")
}
