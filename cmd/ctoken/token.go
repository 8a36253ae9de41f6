package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxTokenInput caps what is read as a token: far above every token's own
// cap (MaxCursorBytes, RequestStateSecurity.MaxBytes defaults to 16 KiB), so
// an over-cap token still reaches the library and is refused there with its
// own reason, while a runaway pipe is not read without limit.
const maxTokenInput = 1 << 20

var (
	errNoToken       = errors.New("expected exactly one TOKEN argument (or - for standard input)")
	errEmptyToken    = errors.New("the token is empty")
	errTokenTooLarge = fmt.Errorf("the token is longer than %d bytes", maxTokenInput)
)

// tokenArg returns the single positional argument of fs as a token: the
// argument itself, or standard input when it is "-". Surrounding white space
// (a trailing newline from echo or a file) is removed.
func tokenArg(args []string, e *env) (string, error) {
	if len(args) != 1 {
		return "", errNoToken
	}
	tok := args[0]
	if tok == "-" {
		b, err := io.ReadAll(io.LimitReader(e.stdin, maxTokenInput+1))
		if err != nil {
			return "", fmt.Errorf("reading standard input: %w", err)
		}
		if len(b) > maxTokenInput {
			return "", errTokenTooLarge
		}
		tok = string(b)
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", errEmptyToken
	}
	if len(tok) > maxTokenInput {
		return "", errTokenTooLarge
	}
	return tok, nil
}

// Token kinds, recognised by their framing. A cursor is bare base64url,
// whose alphabet has no '.', so the three never overlap.
type tokenKind int

const (
	kindCursor tokenKind = iota
	kindSignedState
	kindEncryptedState
)

const (
	signedPrefix    = "v1."
	encryptedPrefix = "v1e."
)

func classify(tok string) tokenKind {
	switch {
	case strings.HasPrefix(tok, encryptedPrefix):
		return kindEncryptedState
	case strings.HasPrefix(tok, signedPrefix):
		return kindSignedState
	default:
		return kindCursor
	}
}

// b64 is the framing of every ctoken token: base64url without padding,
// strict about unused trailing bits, as the library decodes it.
var b64 = base64.RawURLEncoding.Strict()

// writeJSON prints v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}
