package mcptoken

import (
	"context"
	"errors"
	"log/slog"
)

// Integration is what an SDK integration tells the shared [Cursors] and
// [States] about itself: the name it logs under and the errors its SDK sends
// for a request without a caller and for a refused token. Both integrations
// of this repository fill one in; the core does everything else once for
// both. Its fields are read, not written, by the core; do not change them
// after building Cursors or States on it.
type Integration struct {
	// Name begins every log message and constructor error, for example
	// "ctokenmcp".
	Name string
	// Log receives one record per refused token, per request without a
	// caller and per outgoing state that cannot be sealed, with ctoken's
	// log-safe reason (never the token). Nil means slog.Default().
	Log *slog.Logger
	// NoCaller returns the error the client is sent for a request without
	// an authenticated caller. Required.
	NoCaller func() error
	// Refused returns the error the client is sent for a refused cursor or
	// request state; r.StoreFailed marks a replay store that could not
	// answer. Required.
	Refused func(r Refusal) error
}

// errNoCaller is logged when a caller function returns "" with a nil error.
var errNoCaller = errors.New("the caller function returned an empty caller")

// check refuses an Integration that lacks a required field.
func (in *Integration) check(what string) error {
	if in == nil || in.NoCaller == nil || in.Refused == nil {
		return errors.New("mcptoken: " + what + ": incomplete Integration (NoCaller and Refused are required)")
	}
	return nil
}

// Logger returns the Log of in, or slog.Default(): failures are never
// dropped because no logger was set.
func (in *Integration) Logger() *slog.Logger {
	if in.Log != nil {
		return in.Log
	}
	return slog.Default()
}

// Caller checks the result of an integration's caller function: an error,
// or "" with a nil error, is logged (the function's own error text goes to
// the log only) and becomes the error of NoCaller; otherwise it returns id.
// A caller is never anonymous: every token is bound to one.
func (in *Integration) Caller(ctx context.Context, id string, err error) (string, error) {
	if err == nil && id == "" {
		err = errNoCaller
	}
	if err != nil {
		in.Logger().LogAttrs(ctx, slog.LevelWarn, in.Name+": no authenticated caller", slog.String("error", err.Error()))
		return "", in.NoCaller()
	}
	return id, nil
}

// anonymous refuses an empty caller handed to the core directly, as
// [Integration.Caller] refuses one from a caller lookup: logged, then
// NoCaller. Every token is bound to an authenticated caller, also when an
// integration skips Caller; an empty caller would share one binding among
// every unauthenticated request.
func (in *Integration) anonymous(ctx context.Context, caller string) error {
	if caller != "" {
		return nil
	}
	_, err := in.Caller(ctx, "", nil)
	return err
}

// NameAttr is the log attribute naming what a token was for: tool=NAME for
// tools/call, prompt=NAME for prompts/get, resource=URI for resources/read.
func NameAttr(method, name string) slog.Attr {
	switch method {
	case "prompts/get":
		return slog.String("prompt", name)
	case "resources/read":
		return slog.String("resource", name)
	}
	return slog.String("tool", name)
}
