package webhook

import (
	"bytes"
	"encoding/json"
	"io"
)

// bodyStringMember reads the top-level member name of the JSON object body.
// ok is false unless body is exactly one well-formed JSON object (white
// space around it allowed) in which name appears at most once, with a
// string value; found reports whether it appears. Names are compared after
// unescaping, exactly (not case-folded as encoding/json's Unmarshal
// would). It is called only on authentic bodies, and allocates.
func bodyStringMember(body []byte, name string) (val string, found, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false, false
		}
		if key, _ := tok.(string); key == name {
			tok, err := dec.Token()
			s, isString := tok.(string)
			if err != nil || !isString || found {
				return "", false, false
			}
			val, found = s, true
			continue
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false, false
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return "", false, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", false, false
	}
	return val, found, true
}
