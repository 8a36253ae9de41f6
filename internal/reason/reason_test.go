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

func TestFaultsNamesEveryFaultAndMatchesEach(t *testing.T) {
	other := errors.New("other: sentinel")
	a, b := New(errSentinel, "field A is unset"), New(other, "field B is negative")
	for _, tc := range []struct {
		name   string
		faults []error
		want   error  // nil: Faults returns nil; else errors.Is must hold
		same   error  // non-nil: Faults returns this very error
		text   string // "": not checked
	}{
		{"none", nil, nil, nil, ""},
		{"all nil", []error{nil, nil}, nil, nil, ""},
		{"one", []error{nil, a, nil}, errSentinel, a, ""},
		{"two", []error{a, nil, b}, other, nil, "2 configuration faults: pkg: invalid thing: field A is unset; other: sentinel: field B is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Faults(tc.faults...)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Faults = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, errSentinel) {
				t.Errorf("Faults = %v: errors.Is does not match every fault", err)
			}
			if tc.same != nil && err != tc.same {
				t.Errorf("one fault came back as %#v, not itself", err)
			}
			if tc.text != "" && err.Error() != tc.text {
				t.Errorf("text %q, want %q", err.Error(), tc.text)
			}
			if Of(err) != "field A is unset" {
				t.Errorf("Of = %q, want the first fault's reason", Of(err))
			}
			_ = map[error]bool{err: true} // hashable: a map of errors does not panic
		})
	}
}
