package mcptoken

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestCallKey: the key a client sends is the one given, by the options,
// the key argument or _meta, all of which must agree; a fresh random one
// when none is; every other case is refused before anything is sent,
// with an error that never holds the key.
func TestCallKey(t *testing.T) {
	args := json.RawMessage(`{"idempotency_key":"k-arg","amount":5}`)
	for _, c := range []struct {
		name, key, keyArg string
		args, meta        any
		want              string // "" with ok: a random key
		ok                bool
	}{
		{"the options' key", "k-opt", "", args, nil, "k-opt", true},
		{"the argument's key", "", "idempotency_key", args, nil, "k-arg", true},
		{"the argument's key, the same in the options and _meta", "k-arg", "idempotency_key", args, "k-arg", "k-arg", true},
		{"_meta's key", "", "", args, "k-meta", "k-meta", true},
		{"none: a random key", "", "", args, nil, "", true},
		{"no such argument", "", "key", args, nil, "", false},
		{"an argument that is not a string", "", "amount", args, nil, "", false},
		{"an empty argument", "", "k", json.RawMessage(`{"k":""}`), nil, "", false},
		{"a null argument", "", "k", json.RawMessage(`{"k":null}`), nil, "", false},
		{"arguments that are not an object", "", "k", json.RawMessage(`["k"]`), nil, "", false},
		{"the argument against the options", "k-other", "idempotency_key", args, nil, "", false},
		{"_meta against the options", "k-other", "", args, "k-meta", "", false},
		{"_meta that is not a string", "", "", args, 7, "", false},
		{"_meta's two keys differ", "", "", args, metaKeysDiffer{}, "", false},
		{"a key with a space", "k secret", "", args, nil, "", false},
		{"a key over 255 bytes", strings.Repeat("k", 256), "", args, nil, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := CallKey(c.key, c.keyArg, c.args, c.meta)
			switch {
			case !c.ok:
				if !errors.Is(err, ErrIdempotencyKey) || got != "" || c.key != "" && strings.Contains(err.Error(), c.key) {
					t.Fatalf("CallKey = %q, %v; want a refusal matching ErrIdempotencyKey, without the key", got, err)
				}
			case err != nil:
				t.Fatal(err)
			case c.want == "":
				if len(got) != 22 {
					t.Fatalf("random key %q; want 22 characters of base64url", got)
				}
			case got != c.want:
				t.Fatalf("CallKey = %q; want %q", got, c.want)
			}
		})
	}
}
