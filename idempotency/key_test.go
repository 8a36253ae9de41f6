package idempotency

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		max         int
		want        string
		err         error
	}{
		{"uuid", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, 255, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"escapes", `"a\"b\\c"`, 255, `a"b\c`, nil},
		{"spaces around the item", `  "k"  `, 255, "k", nil},
		{"exactly max bytes", `"` + strings.Repeat("k", 8) + `"`, 8, strings.Repeat("k", 8), nil},
		{"max bytes once unescaped", `"` + strings.Repeat(`\"`, 8) + `"`, 8, strings.Repeat(`"`, 8), nil},
		{"one over max bytes", `"` + strings.Repeat("k", 9) + `"`, 8, "", errKeyLength},
		{"over max once unescaped", `"` + strings.Repeat(`\\`, 9) + `"`, 8, "", errKeyLength},
		{"far over max: refused before parsing", `"` + strings.Repeat("k", 100) + `"`, 8, "", errKeyLength},
		{"empty string", `""`, 255, "", errKeyLength},
		{"empty value", ``, 255, "", errKeyMalformed},
		{"token", `abc`, 255, "", errKeyMalformed},
		{"byte sequence", `:YWJj:`, 255, "", errKeyMalformed},
		{"integer", `42`, 255, "", errKeyMalformed},
		{"no closing quote", `"abc`, 255, "", errKeyMalformed},
		{"lone quote", `"`, 255, "", errKeyMalformed},
		{"escape at the end", `"abc\`, 255, "", errKeyMalformed},
		{"escaped quote at the end", `"abc\"`, 255, "", errKeyMalformed},
		{"other escape", `"a\nb"`, 255, "", errKeyMalformed},
		{"inner quote", `"a"b"`, 255, "", errKeyMalformed},
		{"parameter", `"a";x=1`, 255, "", errKeyMalformed},
		{"list", `"a","b"`, 255, "", errKeyMalformed},
		{"tab inside", "\"a\tb\"", 255, "", errKeyMalformed},
		{"DEL inside", "\"a\x7fb\"", 255, "", errKeyMalformed},
		{"NUL inside", "\"a\x00b\"", 255, "", errKeyMalformed},
		{"non-ASCII inside", `"café"`, 255, "", errKeyMalformed},
		{"tab before", "\t\"a\"", 255, "", errKeyMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKey(tc.value, tc.max)
			if got != tc.want || err != tc.err {
				t.Fatalf("ParseKey = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			if err != nil && (!errors.Is(err, ErrKey) || strings.Contains(err.Error(), tc.value) && tc.value != "") {
				t.Fatalf("error %q does not match ErrKey or echoes the value", err)
			}
		})
	}
}

func TestStoreID(t *testing.T) {
	t.Run("each field is length-prefixed: shifting bytes between fields changes the ID", func(t *testing.T) {
		ids := map[string]bool{}
		for _, f := range [][3]string{{"ab", "c", "d"}, {"a", "bc", "d"}, {"a", "b", "cd"}, {"abc", "", "d"}, {"", "abc", "d"}, {"abcd", "", ""}} {
			id := StoreID(f[0], f[1], f[2])
			if ids[id] {
				t.Fatalf("StoreID%q collides", f)
			}
			ids[id] = true
		}
	})
	t.Run("holds neither the caller nor the key in clear", func(t *testing.T) {
		id := StoreID("alice@example.com", "POST /payments", "order-12345")
		if !strings.HasPrefix(id, "idem:") || len(id) != len("idem:")+43 || strings.Contains(id, "alice") || strings.Contains(id, "order") {
			t.Fatalf("StoreID = %q", id)
		}
	})
}
