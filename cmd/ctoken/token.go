package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	strictb64 "github.com/ctoken/ctoken/internal/b64"
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
// whose alphabet has no '.', so the four never overlap.
type tokenKind int

const (
	kindCursor tokenKind = iota
	kindSignedState
	kindEncryptedState
	kindOneTime
)

const (
	signedPrefix    = "v1."
	encryptedPrefix = "v1e."
	oneTimePrefix   = "ot1."
)

func classify(tok string) tokenKind {
	switch {
	case strings.HasPrefix(tok, encryptedPrefix):
		return kindEncryptedState
	case strings.HasPrefix(tok, signedPrefix):
		return kindSignedState
	case strings.HasPrefix(tok, oneTimePrefix):
		return kindOneTime
	default:
		return kindCursor
	}
}

// b64 is the framing of every ctoken token: base64url without padding
// through the module's one strict decoder (internal/b64), which refuses
// padding, CR, LF and non-zero unused trailing bits, as the library does.
var b64 = strictb64.URL

// writeJSON prints v as indented JSON followed by a newline, with every
// character a terminal could be tricked by escaped (see escapeTerminal).
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(escapeTerminal(buf.Bytes()))
	return err
}

// escapeTerminal rewrites, in JSON text, every DEL, C1 control and bidi
// control (U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069) as a
// \uXXXX escape. encoding/json already escapes C0 controls, U+2028 and
// U+2029 but leaves these raw, and a token's unverified fields could use
// them to drive a terminal or reorder what a reader sees. Such characters
// occur only inside JSON strings (the rest of the text is ASCII), where
// the escape decodes to the same character: the JSON means the same.
func escapeTerminal(js []byte) []byte {
	out := make([]byte, 0, len(js))
	for i := 0; i < len(js); {
		r, n := utf8.DecodeRune(js[i:])
		if mustEscape(r) {
			out = fmt.Appendf(out, "\\u%04x", r)
		} else {
			out = append(out, js[i:i+n]...)
		}
		i += n
	}
	return out
}

// mustEscape reports whether r is DEL, a C1 control or a bidi control.
func mustEscape(r rune) bool {
	return r == 0x7f || (r >= 0x80 && r <= 0x9f) || unicode.Is(unicode.Bidi_Control, r)
}
