package ctoken

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
)

// Secrets never print. Every type that holds key material, directly or
// through a field, describes itself instead of its contents under every fmt
// verb (%v %+v %#v %s %q %x %d ...), through log/slog (LogValuer) and
// through encoding/json, by value and by pointer. The descriptions name
// counts and settings, never a key or a subkey. (RequestStateCodec holds a
// sync.Pool and is used by pointer only; its methods are on the pointer.)

// formatRedacted writes desc for verb: quoted for %q, as is otherwise.
func formatRedacted(f fmt.State, verb rune, desc string) {
	if verb == 'q' {
		desc = strconv.Quote(desc)
	}
	io.WriteString(f, desc)
}

// marshalRedacted is desc as a JSON string.
func marshalRedacted(desc string) ([]byte, error) { return json.Marshal(desc) }

// describeKeys describes a *[Keyring] field.
func describeKeys(k *Keyring) string {
	if k == nil {
		return "nil"
	}
	return k.describe()
}

func (k Keyring) describe() string { return fmt.Sprintf("ctoken.Keyring(%d keys)", len(k.keys)) }

// Format prints the [Keyring] as "ctoken.Keyring(N keys)" under every verb,
// by value and by pointer: never a key.
func (k Keyring) Format(f fmt.State, verb rune) { formatRedacted(f, verb, k.describe()) }

// LogValue is the [Keyring]'s log/slog form: its description, never a key.
func (k Keyring) LogValue() slog.Value { return slog.StringValue(k.describe()) }

// MarshalJSON encodes the [Keyring] as its description, a JSON string: never
// a key.
func (k Keyring) MarshalJSON() ([]byte, error) { return marshalRedacted(k.describe()) }

func (i CursorIssuer) describe() string {
	keys := i.ring()
	if len(keys.macs) == 0 {
		return "ctoken.CursorIssuer(no key)"
	}
	sealed := ""
	if i.seal {
		sealed = ", sealed"
	}
	return fmt.Sprintf("ctoken.CursorIssuer(%d keys, TTL %v, session of %d bytes%s)", len(keys.macs), i.ttl, len(i.session), sealed)
}

// Format prints a description of the issuer (key count, TTL, session
// length) under every verb: never a key.
func (i CursorIssuer) Format(f fmt.State, verb rune) { formatRedacted(f, verb, i.describe()) }

// LogValue is the issuer's log/slog form: its description, never a key.
func (i CursorIssuer) LogValue() slog.Value { return slog.StringValue(i.describe()) }

// MarshalJSON encodes the issuer as its description: never a key.
func (i CursorIssuer) MarshalJSON() ([]byte, error) { return marshalRedacted(i.describe()) }

func (o OneTimeIssuer) describe() string {
	macs := o.ring().macs
	if len(macs) == 0 {
		return "ctoken.OneTimeIssuer(no key)"
	}
	return fmt.Sprintf("ctoken.OneTimeIssuer(purpose %q, %d keys, TTL %v)", o.purpose, len(macs), o.ttl)
}

// Format prints a description of the issuer (purpose, key count, TTL)
// under every verb: never a key.
func (o OneTimeIssuer) Format(f fmt.State, verb rune) { formatRedacted(f, verb, o.describe()) }

// LogValue is the issuer's log/slog form: its description, never a key.
func (o OneTimeIssuer) LogValue() slog.Value { return slog.StringValue(o.describe()) }

// MarshalJSON encodes the issuer as its description: never a key.
func (o OneTimeIssuer) MarshalJSON() ([]byte, error) { return marshalRedacted(o.describe()) }

const codecDescription = "ctoken.RequestStateCodec(keys redacted)"

// Format prints a fixed description of the codec under every verb: never a
// key.
func (c *RequestStateCodec) Format(f fmt.State, verb rune) {
	formatRedacted(f, verb, codecDescription)
}

// LogValue is the codec's log/slog form: a fixed description, never a key.
func (c *RequestStateCodec) LogValue() slog.Value { return slog.StringValue(codecDescription) }

// MarshalJSON encodes the codec as a fixed description: never a key.
func (c *RequestStateCodec) MarshalJSON() ([]byte, error) { return marshalRedacted(codecDescription) }

// isSet describes an optional field.
func isSet(set bool) string {
	if set {
		return "set"
	}
	return "nil"
}

func (c CursorConfig) describe() string {
	session := "nil"
	if c.Session != nil {
		session = fmt.Sprintf("%d bytes", len(c.Session))
	}
	return fmt.Sprintf("ctoken.CursorConfig{Keys: %s, TTL: %v, Session: %s, Now: %s}",
		describeKeys(c.Keys), c.TTL, session, isSet(c.Now != nil))
}

// Format prints the config with its Keys described, never a key.
func (c CursorConfig) Format(f fmt.State, verb rune) { formatRedacted(f, verb, c.describe()) }

// LogValue is the config's log/slog form: its description, never a key.
func (c CursorConfig) LogValue() slog.Value { return slog.StringValue(c.describe()) }

// MarshalJSON encodes the config as its description: never a key.
func (c CursorConfig) MarshalJSON() ([]byte, error) { return marshalRedacted(c.describe()) }

func (c OneTimeConfig) describe() string {
	return fmt.Sprintf("ctoken.OneTimeConfig{Keys: %s, Purpose: %q, TTL: %v, Replay: %s, Now: %s}",
		describeKeys(c.Keys), c.Purpose, c.TTL, isSet(c.Replay != nil), isSet(c.Now != nil))
}

// Format prints the config with its Keys described, never a key.
func (c OneTimeConfig) Format(f fmt.State, verb rune) { formatRedacted(f, verb, c.describe()) }

// LogValue is the config's log/slog form: its description, never a key.
func (c OneTimeConfig) LogValue() slog.Value { return slog.StringValue(c.describe()) }

// MarshalJSON encodes the config as its description: never a key.
func (c OneTimeConfig) MarshalJSON() ([]byte, error) { return marshalRedacted(c.describe()) }

func (s RequestStateSecurity) describe() string {
	return fmt.Sprintf("ctoken.RequestStateSecurity{Keys: %s, Mode: %d, Binding: %d, TTL: %v, MaxBytes: %d, Now: %s, Replay: %s}",
		describeKeys(s.Keys), s.Mode, s.Binding, s.TTL, s.MaxBytes, isSet(s.Now != nil), isSet(s.Replay != nil))
}

// Format prints the settings with their Keys described, never a key.
func (s RequestStateSecurity) Format(f fmt.State, verb rune) { formatRedacted(f, verb, s.describe()) }

// LogValue is the settings' log/slog form: their description, never a key.
func (s RequestStateSecurity) LogValue() slog.Value { return slog.StringValue(s.describe()) }

// MarshalJSON encodes the settings as their description: never a key.
func (s RequestStateSecurity) MarshalJSON() ([]byte, error) { return marshalRedacted(s.describe()) }

func (s *KeySource) describe() string {
	kr := s.Keyring()
	if kr == nil {
		return "ctoken.KeySource(no ring)"
	}
	return fmt.Sprintf("ctoken.KeySource(%d keys)", kr.Len())
}

// Format prints the [KeySource] as "ctoken.KeySource(N keys)" under every
// verb: never a key.
func (s *KeySource) Format(f fmt.State, verb rune) { formatRedacted(f, verb, s.describe()) }

// LogValue is the [KeySource]'s log/slog form: its description, never a key.
func (s *KeySource) LogValue() slog.Value { return slog.StringValue(s.describe()) }

// MarshalJSON encodes the [KeySource] as its description: never a key.
func (s *KeySource) MarshalJSON() ([]byte, error) { return marshalRedacted(s.describe()) }
