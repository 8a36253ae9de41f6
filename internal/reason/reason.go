// Package reason is the rejection error shared by ctoken's packages: a
// sentinel for errors.Is plus a fixed, log-safe reason naming the check that
// failed, and optionally the underlying cause (a replay store's error).
//
// Reasons are constant strings chosen by the package that rejects; they
// never contain input, token text or keys. A rejection without a cause is
// meant to be allocated once (a package-level variable), so that returning
// it costs no allocation.
package reason

import (
	"errors"
	"strconv"
	"strings"
)

// Error is a rejection: Is(Sentinel) holds, and [Of] returns its reason.
type Error struct {
	sentinel error
	reason   string
	cause    error
}

// New returns a rejection matching sentinel with the given fixed reason.
func New(sentinel error, reason string) *Error {
	return &Error{sentinel: sentinel, reason: reason}
}

// Wrap returns a rejection matching both sentinel and cause (errors.Is and
// errors.As see both), with the given fixed reason.
func Wrap(sentinel error, reason string, cause error) *Error {
	return &Error{sentinel: sentinel, reason: reason, cause: cause}
}

// Error returns the sentinel's text, the reason, and the cause's text if any.
func (e *Error) Error() string {
	s := e.sentinel.Error() + ": " + e.reason
	if e.cause != nil {
		s += ": " + e.cause.Error()
	}
	return s
}

// Is reports whether target is e's sentinel; errors.Is uses it, so matching
// costs no allocation.
func (e *Error) Is(target error) bool { return target == e.sentinel }

// Unwrap returns the cause, or nil.
func (e *Error) Unwrap() error { return e.cause }

// Of returns the reason of the first [Error] in err's tree, or "" if there
// is none.
func Of(err error) string {
	var re *Error
	if errors.As(err, &re) {
		return re.reason
	}
	return ""
}

// Faults returns nil when every fault is nil, the fault when one is not,
// and when several are not one error naming each in order ("2
// configuration faults: a; b"), which errors.Is and errors.As match
// against each. Constructors use it so that a user fixes a config in one
// pass instead of meeting the next missing field after each fix.
func Faults(faults ...error) error {
	var got []error
	for _, e := range faults {
		if e != nil {
			got = append(got, e)
		}
	}
	switch len(got) {
	case 0:
		return nil
	case 1:
		return got[0]
	}
	return &faultList{errs: got}
}

// faultList is the error of several faults. It is used through a pointer,
// so that it is comparable and hashable like the package's other errors.
type faultList struct{ errs []error }

func (f *faultList) Error() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(f.errs)))
	b.WriteString(" configuration faults: ")
	for i, e := range f.errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

func (f *faultList) Unwrap() []error { return f.errs }
