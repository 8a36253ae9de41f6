package pgstore

import (
	"errors"
	"strings"
	"testing"
)

// TestRefusedStatement: the first keyword decides, after white space,
// comments and parentheses, in any case; SET is allowed only in the forms
// that end with the transaction.
func TestRefusedStatement(t *testing.T) {
	tests := []struct {
		sql     string
		refused bool
	}{
		{"", false},
		{"select 1", false},
		{"insert into t values (1)", false},
		{"WITH x AS (SELECT 1) SELECT * FROM x", false},
		{"select 'commit'", false},
		{"/* commit */ select 1", false},
		{"/* nested /* commit */ */ select 1", false},
		{"-- commit\nselect 1", false},
		{"set local statement_timeout = 1", false},
		{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", false},
		{"set constraints all immediate", false},
		{"\"commit\"", false},
		{"commit", true},
		{"COMMIT", true},
		{"  \t\n(commit", true},
		{"/* x */ commit", true},
		{"/* a /* b */ c */ rollback", true},
		{"-- x\n-- y\nEND", true},
		{"commit and chain", true},
		{"commit prepared 'x'", true},
		{"rollback to savepoint a", true},
		{"abort", true},
		{"begin", true},
		{"start transaction", true},
		{"savepoint a", true},
		{"release a", true},
		{"prepare transaction 'x'", true},
		{"prepare p as select 1", true},
		{"deallocate all", true},
		{"discard all", true},
		{"reset all", true},
		{"listen x", true},
		{"load 'x'", true},
		{"set synchronous_commit = off", true},
		{"SET SESSION synchronous_commit = off", true},
		{"set session characteristics as transaction read only", true},
		{"set role none", true},
		{"set", true},
		{"/* unterminated", false},
		{"--", false},
	}
	for _, tt := range tests {
		t.Run(tt.sql, func(t *testing.T) {
			err := refusedStatement(tt.sql)
			if (err != nil) != tt.refused {
				t.Fatalf("refusedStatement(%q) = %v, want refused %v", tt.sql, err, tt.refused)
			}
			if err != nil && !errors.Is(err, errStatementRefused) {
				t.Fatalf("error %v does not match errStatementRefused", err)
			}
		})
	}
}

// FuzzRefusedStatement: no input panics, and a refused statement stays
// refused behind any run of white space, comments and parentheses, and
// in upper case.
func FuzzRefusedStatement(f *testing.F) {
	for _, s := range []string{"commit", "select 1", "/* x */ set a = 1", "set local a = 1", "-- \n rollback", "/*/*", "((("} {
		f.Add(s, "/* c */ ")
	}
	f.Fuzz(func(t *testing.T, sql, lead string) {
		first := refusedStatement(sql)
		leadingWords(lead + sql)
		for _, r := range lead {
			if !strings.ContainsRune(" \t\n(", r) {
				return
			}
		}
		if again := refusedStatement(lead + sql); (again != nil) != (first != nil) {
			t.Fatalf("refusedStatement(%q) = %v but with %q before it = %v", sql, first, lead, again)
		}
		if up := refusedStatement(strings.ToUpper(sql)); first != nil && up == nil {
			t.Fatalf("refusedStatement(%q) refused, but not in upper case", sql)
		}
	})
}
