package clienttest

import (
	"errors"
	"strings"
	"testing"

	"github.com/ctoken/ctoken/idempotency"
	"github.com/dunglas/httpsfv"
)

// sfvCorpus is header values on both sides of every rule of ParseKey and
// of RFC 8941's item grammar: the fuzz seeds and the table test's cases.
var sfvCorpus = []string{
	`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `8e03978e-40d5-43e8-bc93-6894a57f9324`,
	`"a\"b\\c"`, `  "a b"  `, `""`, `"`, `"abc`, `"a"b"`, `"a";p=1`, `"a", "b"`, `"a\n"`,
	"\"a\tb\"", "\t\"a\"", `"café"`,
	`abc`, `abc;p=1`, `abc;p`, `a,b`, `a, b`, `a b`, `a"b`, `a\b`, `*tok`, `tok/en:x`,
	`42`, `-7`, `4.5`, `?1`, `?0`, `:YWJj:`, `@1659578233`, `%"caf%c3%a9"`, `(a b)`,
	`1763962740123456789_AbC-d_`, `q83vEjRWeJA+/w==`, `stainless-go-retry-0b8a6f1e`,
	`~!#$%&'()*+-./:<=>?@[]^_` + "`" + `{|}`, ``, `   `, "a\x7f", "a\x00",
}

// agree checks ParseKey against httpsfv's reading of value as one item:
//
//   - an sf-string or a token without parameters is the same key to
//     ParseKey (or refused for its length, as an empty string is);
//   - a quoted value ParseKey accepts is an sf-string without parameters
//     to httpsfv, with the same text;
//   - a bare value ParseKey accepts is, if an item at all to httpsfv, one
//     without parameters: ParseKey never reads as a key what RFC 8941
//     reads as a key with parameters;
//   - ParseKey refuses with ErrKey, never with another error.
func agree(t *testing.T, value string, max int) {
	t.Helper()
	key, err := idempotency.ParseKey(value, max)
	if err != nil && !errors.Is(err, idempotency.ErrKey) {
		t.Fatalf("ParseKey(%q): %v, not ErrKey", value, err)
	}
	item, serr := httpsfv.UnmarshalItem([]string{value})
	var params int
	if serr == nil && item.Params != nil {
		params = len(item.Params.Names())
	}
	if text, ok := sfText(item); serr == nil && params == 0 && ok {
		if fits := text != "" && len(text) <= max; fits != (err == nil) || fits && key != text {
			t.Fatalf("httpsfv reads %q as %q; ParseKey = %q, %v", value, text, key, err)
		}
	}
	if err != nil {
		return
	}
	if trimmed := strings.Trim(value, " "); trimmed[0] == '"' {
		if s, ok := item.Value.(string); serr != nil || !ok || s != key || params != 0 {
			t.Fatalf("ParseKey(%q) = %q, but httpsfv reads %#v (params %d), %v", value, key, item.Value, params, serr)
		}
		return
	}
	if serr == nil && params != 0 {
		t.Fatalf("ParseKey(%q) = %q, but httpsfv reads an item with parameters", value, key)
	}
}

// sfText returns the text of an sf-string or a token item.
func sfText(item httpsfv.Item) (string, bool) {
	switch v := item.Value.(type) {
	case string:
		return v, true
	case httpsfv.Token:
		return string(v), true
	}
	return "", false
}

func TestParseKeyAgreesWithHTTPSFV(t *testing.T) {
	for _, v := range sfvCorpus {
		t.Run(v, func(t *testing.T) {
			for _, max := range []int{1, 3, idempotency.DefaultMaxKeyBytes} {
				agree(t, v, max)
			}
		})
	}
}

// FuzzParseKeyAgreesWithHTTPSFV holds ParseKey to httpsfv's RFC 8941
// reading of arbitrary header values (see agree).
func FuzzParseKeyAgreesWithHTTPSFV(f *testing.F) {
	for _, v := range sfvCorpus {
		f.Add(v, idempotency.DefaultMaxKeyBytes)
	}
	f.Fuzz(func(t *testing.T, value string, max int) {
		agree(t, value, 1+(max&0x7fffffff)%300)
	})
}
