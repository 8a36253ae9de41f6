package idempotency

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
)

// A Config and a Middleware print their settings, never a recorded byte:
// under every fmt verb (%v %+v %#v %s %q %x ...), through log/slog
// (LogValuer) and encoding/json they describe themselves, naming the
// store by its type and the keyring by its size, never a key, a stored
// response, a fingerprint or a store ID, whatever the store would print.

// formatRedacted writes desc for verb: quoted for %q, as is otherwise.
func formatRedacted(f fmt.State, verb rune, desc string) {
	if verb == 'q' {
		desc = strconv.Quote(desc)
	}
	io.WriteString(f, desc)
}

// isSet describes an optional field.
func isSet(set bool) string {
	if set {
		return "set"
	}
	return "nil"
}

func (c Config) describe() string {
	return fmt.Sprintf("idempotency.Config{Store: %s, Keys: %s, Caller: %s, Header: %q, Required: %t, Methods: %q, Route: %s, "+
		"Window: %v, Lease: %v, MaxKeyBytes: %d, MaxRequestBytes: %d, MaxResponseBytes: %d, ReplayHeaders: %q, "+
		"RetryAfter: %v, Challenge: %q, Observer: %s, Logger: %s, Wait: %v, Transactional: %t}",
		storeType(c.Store), c.Keys.String(), isSet(c.Caller != nil), c.Header, c.Required, c.Methods, isSet(c.Route != nil),
		c.Window, c.Lease, c.MaxKeyBytes, c.MaxRequestBytes, c.MaxResponseBytes, c.ReplayHeaders,
		c.RetryAfter, c.Challenge, isSet(c.Observer != nil), isSet(c.Logger != nil), c.Wait, c.Transactional)
}

// storeType names a store by its type only: a store's own printing is not
// trusted to leave out what it holds.
func storeType(s any) string {
	if s == nil {
		return "nil"
	}
	return fmt.Sprintf("%T", s)
}

// Format prints the config's settings under every verb, the store by its
// type and the keyring by its size: never a key or a recorded byte.
func (c Config) Format(f fmt.State, verb rune) { formatRedacted(f, verb, c.describe()) }

// LogValue is the config's log/slog form: its description.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.describe()) }

// MarshalJSON encodes the config as its description, a JSON string.
func (c Config) MarshalJSON() ([]byte, error) { return json.Marshal(c.describe()) }

func (m *Middleware) describe() string {
	if m == nil || m.p == nil {
		return "idempotency.Middleware(not from New)"
	}
	p := m.p
	return fmt.Sprintf("idempotency.Middleware(store %s, %d keys, header %s, window %v, lease %v)",
		storeType(p.store), len(p.records.aeads), p.header, p.window, p.lease)
}

// Format prints the middleware's main settings under every verb: never a
// key or a recorded byte.
func (m *Middleware) Format(f fmt.State, verb rune) { formatRedacted(f, verb, m.describe()) }

// LogValue is the middleware's log/slog form: its description.
func (m *Middleware) LogValue() slog.Value { return slog.StringValue(m.describe()) }

// MarshalJSON encodes the middleware as its description, a JSON string.
func (m *Middleware) MarshalJSON() ([]byte, error) { return json.Marshal(m.describe()) }
