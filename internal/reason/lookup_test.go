package reason

import (
	"errors"
	"fmt"
	"testing"
)

// label is a typed reason set as the observe package's is: a string type
// whose zero value is "no reason".
type label string

var labels = map[string]label{"mac mismatch": "mac mismatch", "expired": "expired", "store failed": "store failed"}

func parseLabel(s string) (label, bool) {
	l, ok := labels[s]
	return l, ok
}

// unhashableErr is an error whose dynamic type cannot be a map key.
type unhashableErr []string

func (e unhashableErr) Error() string { return "unhashable" }

func TestLookupOf(t *testing.T) {
	mac, expired := New(errSentinel, "mac mismatch"), New(errSentinel, "expired")
	l := NewLookup(parseLabel, mac, expired)
	if l.Len() != 2 {
		t.Fatalf("Len = %d, want 2", l.Len())
	}
	for _, tc := range []struct {
		name string
		l    Lookup[label]
		err  error
		want label
	}{
		{"preallocated rejection", l, mac, "mac mismatch"},
		{"another preallocated rejection", l, expired, "expired"},
		{"rejection built per call", l, Wrap(errSentinel, "store failed", errCause), "store failed"},
		{"wrapped rejection", l, fmt.Errorf("x: %w", mac), "mac mismatch"},
		{"reason outside the set", l, New(errSentinel, "no such reason"), ""},
		{"nil", l, nil, ""},
		{"sentinel without a reason", l, errSentinel, ""},
		{"plain error with a reason's text", l, errors.New("mac mismatch"), ""},
		{"unhashable", l, unhashableErr{"a"}, ""},
		{"unhashable, wrapped", l, fmt.Errorf("x: %w", unhashableErr{"a"}), ""},
		{"joined with an unhashable", l, errors.Join(errors.New("a"), unhashableErr{"b"}), ""},
		{"zero Lookup", Lookup[label]{}, mac, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.l.Of(tc.err); got != tc.want {
				t.Errorf("Of = %q, want %q", got, tc.want)
			}
		})
	}
	if n := testing.AllocsPerRun(100, func() { _ = l.Of(mac) }); n != 0 {
		t.Errorf("Of of a preallocated rejection allocates %v times", n)
	}
}

func TestNewLookupRefusesABadTable(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rejections []error
	}{
		{"not a *Error", []error{New(errSentinel, "expired"), errSentinel}},
		{"nil", []error{nil}},
		{"reason outside the set", []error{New(errSentinel, "no such reason")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("NewLookup accepted a bad table")
				}
			}()
			NewLookup(parseLabel, tc.rejections...)
		})
	}
}
