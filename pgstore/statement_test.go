package pgstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
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
		// A carriage return ends a -- comment, as PostgreSQL's lexer has it.
		{"-- x\rCOMMIT", true},
		{"-- x\r\nrollback", true},
		{"-- commit\rselect 1", false},
		// Empty statements before the one the server runs.
		{";COMMIT", true},
		{"; ;\n;rollback", true},
		{";/* x */;set synchronous_commit = off", true},
		{"select 1;", false},
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

// skippable are the pieces PostgreSQL's lexer skips before a
// statement's first keyword: FuzzRefusedStatement builds leads of them,
// and TestRefusedStatementAgreesWithTheServer sends them.
var skippable = []string{" ", "\t", "\n", "\r", "\f", "(", ";", "-- c\n", "-- c\r", "--\r\n", "/* c */", "/* a /* b */ */", "/**/"}

// lead maps each byte of b to a piece of [skippable].
func lead(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteString(skippable[int(c)%len(skippable)])
	}
	return sb.String()
}

// FuzzRefusedStatement: no input panics, and a refused statement stays
// refused behind any run of what PostgreSQL skips before a keyword (white
// space, comments ended by a line feed or a carriage return, nested
// comments, parentheses, empty statements), and in upper case.
func FuzzRefusedStatement(f *testing.F) {
	for _, s := range []string{"commit", "select 1", "/* x */ set a = 1", "set local a = 1", "-- \n rollback", "/*/*", "((("} {
		f.Add(s, []byte{0, 7, 10, 9, 4})
	}
	f.Fuzz(func(t *testing.T, sql string, pieces []byte) {
		first := refusedStatement(sql)
		l := lead(pieces)
		if again := refusedStatement(l + sql); (again != nil) != (first != nil) {
			t.Fatalf("refusedStatement(%q) = %v but with %q before it = %v", sql, first, l, again)
		}
		if up := refusedStatement(strings.ToUpper(sql)); first != nil && up == nil {
			t.Fatalf("refusedStatement(%q) refused, but not in upper case", sql)
		}
	})
}

// TestRefusedStatementAgreesWithTheServer sends, in a transaction on a
// real PostgreSQL and with the extended protocol (as a work sends the
// handler's SQL), every statement that ends or replaces a transaction
// behind each lead PostgreSQL skips: whatever the filter lets through
// must leave the session in the same transaction. The server's own lexer
// is the reference, so a skip the filter does not know of fails here.
func TestRefusedStatementAgreesWithTheServer(t *testing.T) {
	s := newTestStore(t)
	ctx := bg()
	conn, err := s.pool.Acquire(ctx)
	must(t, err)
	defer conn.Release()
	pc := conn.Conn().PgConn()
	var leads []string
	for i := range skippable {
		leads = append(leads, skippable[i])
		for j := range skippable {
			leads = append(leads, skippable[i]+skippable[j])
		}
	}
	enders := []string{"COMMIT", "rollback", "end", "abort", "commit and chain", "rollback and chain", "begin", "start transaction", "savepoint a", "prepare transaction 'x'",
		"select 1", "set local work_mem = '1MB'"}
	sent, refused := 0, 0
	for _, l := range leads {
		for _, e := range enders {
			sql := l + e
			if refusedStatement(sql) != nil {
				if e == "select 1" || e == "set local work_mem = '1MB'" {
					t.Errorf("%q refused: it ends with the transaction", sql)
				}
				refused++
				continue
			}
			sent++
			must(t, errOf(pc.Exec(ctx, "begin").ReadAll()))
			var before, after int64
			must(t, conn.QueryRow(ctx, "select txid_current()").Scan(&before))
			conn.Exec(ctx, sql, pgx.QueryExecModeExec) // an error leaves the transaction aborted: in it still
			switch pc.TxStatus() {
			case 'T':
				must(t, conn.QueryRow(ctx, "select txid_current()").Scan(&after))
				if after != before {
					t.Errorf("%q passed the filter and replaced the transaction", sql)
				}
			case 'E':
			default:
				t.Errorf("%q passed the filter and ended the transaction (status %q)", sql, pc.TxStatus())
			}
			pc.Exec(ctx, "rollback").ReadAll()
		}
	}
	if refused == 0 || sent == 0 {
		t.Fatalf("the filter refused %d and let %d through: the test is broken", refused, sent)
	}
	t.Logf("%d statements refused by the filter, %d sent: none ended the transaction", refused, sent)
}
