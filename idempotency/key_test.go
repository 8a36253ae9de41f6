package idempotency

import (
	"errors"
	"net/http"
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
		{"bare token", `abc`, 255, "abc", nil},
		{"bare UUID", `8e03978e-40d5-43e8-bc93-6894a57f9324`, 255, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"bare stripe-go generated key", `1763962740123456789_AbC-d_`, 255, "1763962740123456789_AbC-d_", nil},
		{"bare base64 with padding", `q83vEjRWeJA+/w==`, 255, "q83vEjRWeJA+/w==", nil},
		{"bare with spaces around", `  abc  `, 255, "abc", nil},
		{"bare byte-sequence look-alike is its text", `:YWJj:`, 255, ":YWJj:", nil},
		{"bare integer look-alike is its text", `42`, 255, "42", nil},
		{"bare exactly max bytes", strings.Repeat("k", 8), 8, strings.Repeat("k", 8), nil},
		{"bare one over max bytes", strings.Repeat("k", 9), 8, "", errKeyLength},
		{"bare far over max: refused before parsing", strings.Repeat(",", 100), 8, "", errKeyLength},
		{"bare with a parameter", `abc;x=1`, 255, "", errKeyMalformed},
		{"bare list", `a,b`, 255, "", errKeyMalformed},
		{"bare list with a space", `a, b`, 255, "", errKeyMalformed},
		{"bare with an inner space", `a b`, 255, "", errKeyMalformed},
		{"bare with a quote", `a"b`, 255, "", errKeyMalformed},
		{"bare with a backslash", `a\b`, 255, "", errKeyMalformed},
		{"bare with a tab", "a\tb", 255, "", errKeyMalformed},
		{"bare with DEL", "a\x7f", 255, "", errKeyMalformed},
		{"bare non-ASCII", `café`, 255, "", errKeyMalformed},
		{"only spaces", `   `, 255, "", errKeyMalformed},
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

func TestParseKeyReadsBothSpellingsOfOneKeyAsTheSameKey(t *testing.T) {
	for _, tc := range []struct{ name, quoted, bare string }{
		{"UUID", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `8e03978e-40d5-43e8-bc93-6894a57f9324`},
		{"stripe-go generated key", `"1763962740123456789_AbC-d_"`, `1763962740123456789_AbC-d_`},
		{"every bare byte", `"!#$%&'()*+-./0123456789:<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]^_` + "`" + `abcdefghijklmnopqrstuvwxyz{|}~"`,
			`!#$%&'()*+-./0123456789:<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]^_` + "`" + `abcdefghijklmnopqrstuvwxyz{|}~`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, qerr := ParseKey(tc.quoted, 255)
			b, berr := ParseKey(tc.bare, 255)
			if qerr != nil || berr != nil || q != b {
				t.Fatalf("quoted %q, %v; bare %q, %v", q, qerr, b, berr)
			}
			if StoreID("alice", "POST /payments", q) != StoreID("alice", "POST /payments", b) {
				t.Fatal("the two spellings have two store IDs")
			}
		})
	}
	t.Run("a quoted key with a byte no bare key has is not a bare key", func(t *testing.T) {
		for _, c := range []byte{' ', '"', '\\', ',', ';'} {
			quoted := `"a\` + string(c) + `b"`
			if c != '"' && c != '\\' {
				quoted = `"a` + string(c) + `b"`
			}
			if _, err := ParseKey(quoted, 255); err != nil {
				t.Fatalf("quoted %q: %v", quoted, err)
			}
			if _, err := ParseKey("a"+string(c)+"b", 255); err != errKeyMalformed {
				t.Fatalf("bare with %q: %v, want malformed", c, err)
			}
		}
	})
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

func TestMiddlewareReplaysOneKeyAcrossItsTwoSpellings(t *testing.T) {
	const bare = `8e03978e-40d5-43e8-bc93-6894a57f9324`
	for _, tc := range []struct{ name, first, second string }{
		{"bare then quoted", bare, `"` + bare + `"`},
		{"quoted then bare", `"` + bare + `"`, bare},
		{"bare then bare with spaces around", bare, "  " + bare + " "},
		{"stripe-go generated key, bare then quoted", `1763962740123456789_AbC-d_`, `"1763962740123456789_AbC-d_"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, nil)
			first := f.post(tc.first, `{"amount":100}`)
			if first.Code != http.StatusCreated || first.Header().Get(ReplayedHeader) != "" {
				t.Fatalf("first: %d %q", first.Code, first.Header().Get(ReplayedHeader))
			}
			second := f.post(tc.second, `{"amount":100}`)
			if second.Code != http.StatusCreated || second.Header().Get(ReplayedHeader) != "true" || second.Body.String() != first.Body.String() {
				t.Fatalf("second: %d %q %q, want the replay of %q", second.Code, second.Header().Get(ReplayedHeader), second.Body, first.Body)
			}
			if f.runs.Load() != 1 {
				t.Fatalf("handler ran %d times", f.runs.Load())
			}
		})
	}
}
