package ctokenmcp

// This file holds the parts of the request-state handling that do not
// depend on an MCP SDK: the argument-binding wrapper and the mapping of
// codec errors to what the client is told. They take and return plain
// strings and bytes so that another SDK integration can reuse them as is.

import (
	"bytes"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/ctoken/ctoken"
)

// Codes in the data member ({"ctokenCode":N}) of a rejected request state's
// -32602 error.
//
// Cursors use ctoken.CodeCursorExpired (1020) and ctoken.CodeCursorInvalid
// (1021), the codes of the reference protocol. StateExpired (1022) and
// StateInvalid (1023) are local to this project: the reference protocol
// defines no code for a refused requestState, and no other implementation
// is known to send or understand them.
const (
	// StateExpired tells the client to call again without the state.
	StateExpired = 1022
	// StateInvalid reports a state that was refused as invalid.
	StateInvalid = 1023
)

// argsEnvelope is what is sealed when arguments are bound: the fingerprint
// of the call's arguments and the application's state.
type argsEnvelope struct {
	Args  string `json:"a"`
	State string `json:"s"`
}

var (
	errStateArgs    = errors.New("arguments differ from the sealed call")
	errStateNotUTF8 = errors.New("ctokenmcp: state is not valid UTF-8")
)

// argsDigest returns the ArgsFingerprint of the JSON text args, taking
// absent arguments (empty or blank) as {}.
func argsDigest(args []byte) (ctoken.Fingerprint, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = []byte("{}")
	}
	return ctoken.ArgsFingerprint(json.RawMessage(args))
}

// wrapArgs returns the text sealed for state bound to the call arguments
// args (JSON text, absent taken as {}): {"a":<hex fingerprint>,"s":<state>}.
// state must be valid UTF-8 (encoding/json would silently replace its
// invalid bytes).
func wrapArgs(args []byte, state string) (string, error) {
	if !utf8.ValidString(state) {
		return "", errStateNotUTF8
	}
	fp, err := argsDigest(args)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(argsEnvelope{Args: hex.EncodeToString(fp[:]), State: state})
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// unwrapArgs checks the wrapper of an authentic state against the call
// arguments args and returns the application's state; any mismatch or
// malformation is errStateArgs and no state.
func unwrapArgs(args []byte, plain string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(plain)))
	dec.DisallowUnknownFields()
	var env argsEnvelope
	if err := dec.Decode(&env); err != nil || dec.More() {
		return "", errStateArgs
	}
	sealed, err := hex.DecodeString(env.Args)
	if err != nil {
		return "", errStateArgs
	}
	fp, err := argsDigest(args)
	if err != nil || subtle.ConstantTimeCompare(sealed, fp[:]) != 1 {
		return "", errStateArgs
	}
	return env.State, nil
}

// stateRefusal says what the client is told about a state that did not
// open with err: storeFailed when the replay store of a single-use codec
// could not answer (a server problem, -32603; the state was not consumed);
// otherwise the ctoken code and message of the -32602 error. reason is the
// log-safe reason, for the server log only.
func stateRefusal(err error) (code int, message, reason string, storeFailed bool) {
	switch {
	case errors.Is(err, ctoken.ErrStateExpired):
		return StateExpired, "expired requestState: call again without it", ctoken.Reason(err), false
	case errors.Is(err, errStateArgs):
		return StateInvalid, "invalid requestState", errStateArgs.Error(), false
	case errors.Is(err, ctoken.ErrStateInvalid), errors.Is(err, ctoken.ErrStateReplayed):
		return StateInvalid, "invalid requestState", ctoken.Reason(err), false
	}
	return 0, "request state store unavailable", "", true
}
