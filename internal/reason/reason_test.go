package reason

import (
	"errors"
	"fmt"
	"testing"
)

var (
	errSentinel = errors.New("pkg: invalid thing")
	errCause    = errors.New("store: unreachable")
)

func TestNewMatchesSentinelAndCarriesReason(t *testing.T) {
	err := error(New(errSentinel, "mac mismatch"))
	if !errors.Is(err, errSentinel) || errors.Is(err, errCause) {
		t.Fatalf("errors.Is mismatch for %v", err)
	}
	if got := Of(err); got != "mac mismatch" {
		t.Fatalf("Of = %q", got)
	}
	if got := err.Error(); got != "pkg: invalid thing: mac mismatch" {
		t.Fatalf("Error = %q", got)
	}
}

func TestWrapMatchesSentinelAndCause(t *testing.T) {
	err := fmt.Errorf("outer: %w", Wrap(errSentinel, "store failed", errCause))
	if !errors.Is(err, errSentinel) || !errors.Is(err, errCause) {
		t.Fatalf("errors.Is mismatch for %v", err)
	}
	if got := Of(err); got != "store failed" {
		t.Fatalf("Of = %q", got)
	}
	if got := err.Error(); got != "outer: pkg: invalid thing: store failed: store: unreachable" {
		t.Fatalf("Error = %q", got)
	}
}

func TestOfIsEmptyWithoutAReason(t *testing.T) {
	for _, err := range []error{nil, errSentinel, fmt.Errorf("x: %w", errCause)} {
		if got := Of(err); got != "" {
			t.Fatalf("Of(%v) = %q, want empty", err, got)
		}
	}
}

func TestReturningAPreallocatedRejectionDoesNotAllocate(t *testing.T) {
	pre := New(errSentinel, "mac mismatch")
	var sink error
	if n := testing.AllocsPerRun(100, func() { sink = pre }); n != 0 || sink == nil {
		t.Fatalf("allocs = %v", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if !errors.Is(sink, errSentinel) {
			t.Fatal("not matched")
		}
	}); n != 0 {
		t.Fatalf("errors.Is allocates %v times", n)
	}
}
