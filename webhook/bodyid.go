package webhook

import (
	"bytes"
	"encoding/json"

	"github.com/ctoken/ctoken/internal/jsontext"
)

// bodyStringMember reads the top-level member name of the JSON object body.
// ok is false unless body is exactly one well-formed JSON object (white
// space around it allowed, as encoding/json's Valid checks) in which name
// appears at most once, with a string value; found reports whether it
// appears. Names are compared after unescaping, exactly (not case-folded
// as encoding/json's Unmarshal would). It is called only on authentic
// bodies; it allocates the returned string (and more only for a member
// name or value holding escapes or non-ASCII bytes).
func bodyStringMember(body []byte, name string) (val string, found, ok bool) {
	if !json.Valid(body) {
		return "", false, false
	}
	// body is valid JSON from here on, which keeps the scanner short: a
	// string ends at the first unescaped quote, and a value ends where the
	// nesting depth returns to zero.
	i := jsontext.SkipSpace(body, 0)
	if body[i] != '{' {
		return "", false, false
	}
	i++
	for {
		i = jsontext.SkipSpace(body, i)
		if body[i] == '}' {
			return val, found, true
		}
		if body[i] == ',' {
			i = jsontext.SkipSpace(body, i+1)
		}
		keyEnd := jsonStringEnd(body, i)
		key := body[i:keyEnd]
		i = jsontext.SkipSpace(body, keyEnd)
		i = jsontext.SkipSpace(body, i+1) // the colon
		valEnd := jsonValueEnd(body, i)
		if jsonStringIs(key, name) {
			if found || body[i] != '"' {
				return "", false, false
			}
			s, good := jsonStringValue(body[i:valEnd])
			if !good {
				return "", false, false
			}
			val, found = s, true
		}
		i = valEnd
	}
}

// jsonStringEnd returns the index just past the string starting at b[i]
// (a quote) of valid JSON.
func jsonStringEnd(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// jsonValueEnd returns the index just past the value starting at b[i] of
// valid JSON.
func jsonValueEnd(b []byte, i int) int {
	depth := 0
	for {
		switch c := b[i]; {
		case c == '"':
			i = jsonStringEnd(b, i)
		case c == '{' || c == '[':
			depth++
			i++
		case c == '}' || c == ']':
			if depth == 0 { // the end of the enclosing object
				return i
			}
			depth--
			i++
		case c == ',' && depth == 0:
			return i
		default:
			i++
		}
		// A string, object or array value ends at its closing byte (a
		// member value is followed at least by the object's closing '}').
		if depth == 0 && (b[i-1] == '"' || b[i-1] == '}' || b[i-1] == ']') {
			return i
		}
	}
}

// jsonStringValue decodes the JSON string literal raw (quotes included).
func jsonStringValue(raw []byte) (string, bool) {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && isASCII(inner) {
		return string(inner), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// jsonStringIs reports whether the JSON string literal raw decodes to name.
func jsonStringIs(raw []byte, name string) bool {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == name // compared without allocating
	}
	s, ok := jsonStringValue(raw)
	return ok && s == name
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}
