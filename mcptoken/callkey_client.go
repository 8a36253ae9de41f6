package mcptoken

// The key of a call a client sends, shared by the SDK integrations'
// CallTool: from the options, the key argument and _meta, which must agree.

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// CallKey returns the idempotency key of a tool call a client sends, and
// an error matching [ErrIdempotencyKey] before anything is sent. The key is
// the string the argument keyArg of args (an object, as JSON) holds when
// keyArg is set, metaKey (the call's _meta key, as [MetaKeyOf] returns it;
// nil when absent), or key: those given must agree. With none given it is
// 16 random bytes, base64url. It must be a key an [Idempotency] accepts:
// 1 to [DefaultMaxIdempotencyKeyBytes] bytes of visible ASCII other than
// '"', '\', ',' and ';'. The error's text never holds the key.
func CallKey(key, keyArg string, args, metaKey any) (string, error) {
	bad := func(msg string) error { return fmt.Errorf("%w: %s", ErrIdempotencyKey, msg) }
	if keyArg != "" {
		s, ok := argumentKey(args, keyArg)
		switch {
		case !ok || s == "":
			return "", bad("the arguments hold no string " + keyArg + ", or an empty one (CallOptions.KeyArgument)")
		case key != "" && s != key:
			return "", bad("the argument " + keyArg + " holds another key than CallOptions.Key")
		}
		key = s
	}
	if metaKey != nil {
		s, ok := metaKey.(string)
		switch {
		case !ok:
			return "", bad("_meta " + MetaIdempotencyKey + " is not a string, or differs from " + LegacyMetaIdempotencyKey)
		case key != "" && s != key:
			return "", bad("_meta " + MetaIdempotencyKey + " holds another key than CallOptions.Key or KeyArgument")
		}
		key = s
	} else if key == "" {
		var b [16]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		key = base64.RawURLEncoding.EncodeToString(b[:])
	}
	if err := checkIdempotencyKey(key, DefaultMaxIdempotencyKeyBytes); err != nil {
		return "", err
	}
	return key, nil
}

// argumentKey returns the string args (an object, as JSON) holds in
// member name, and whether it holds one.
func argumentKey(args any, name string) (string, bool) {
	b, err := json.Marshal(args)
	if err != nil {
		return "", false
	}
	var m map[string]json.RawMessage
	var s string
	if json.Unmarshal(b, &m) != nil || len(m[name]) == 0 || m[name][0] != '"' || json.Unmarshal(m[name], &s) != nil {
		return "", false
	}
	return s, true
}
