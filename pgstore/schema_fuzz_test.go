package pgstore

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// FuzzQuoteTable: a table name either is refused with ErrConfig or becomes
// one or two quoted lower-case identifiers that nothing can break out of,
// never in a schema named pg_*.
func FuzzQuoteTable(f *testing.F) {
	for _, s := range []string{"ctoken_replay", "public.ctoken_replay", `a"; DROP TABLE x; --`, "A", "a.b.c", "", ".", "a..b", "_1", "pg_temp.a", "pg_catalog.a", "public.pg_a"} {
		f.Add(s)
	}
	ident := regexp.MustCompile(`^"[a-z_][a-z0-9_]{0,47}"$`)
	f.Fuzz(func(t *testing.T, name string) {
		q, err := quoteTable(name)
		if err != nil {
			if !errors.Is(err, ErrConfig) || q != "" {
				t.Fatalf("quoteTable(%q) = %q, %v; want ErrConfig and nothing", name, q, err)
			}
			return
		}
		parts := strings.Split(q, ".")
		if len(parts) > 2 {
			t.Fatalf("quoteTable(%q) = %q", name, q)
		}
		if len(parts) == 2 && strings.HasPrefix(parts[0], `"pg_`) {
			t.Fatalf("quoteTable(%q) = %q: a table in one of PostgreSQL's own schemas", name, q)
		}
		for _, p := range parts {
			if !ident.MatchString(p) {
				t.Fatalf("quoteTable(%q) = %q: part %q is not a quoted identifier", name, q, p)
			}
		}
		if strings.ReplaceAll(q, `"`, "") != name {
			t.Fatalf("quoteTable(%q) = %q changes the name", name, q)
		}
		wantIs(t, errOf(Schema(name)), nil, "Schema(%q) refuses a name quoteTable accepts: %v", name)
	})
}
