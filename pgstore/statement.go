package pgstore

import (
	"errors"
	"fmt"
)

// errStatementRefused reports a statement of the handler that the work's
// transaction refuses before sending it: one that would end, replace or
// outlive the transaction (see [refusedStatement]). The Work then rolls
// back at Commit (nothing was sent, so nothing escaped).
var errStatementRefused = errors.New("pgstore: the work's transaction refuses a statement that ends, replaces or outlives it (transaction control, session settings, prepared statements, DISCARD, LISTEN, LOAD)")

// refusedStatement reports why sql, a statement the handler sends in the
// work's transaction, must not run there, or nil. Every statement of the
// work is sent with the extended protocol (one statement per string: the
// server refuses a string of several), so its first keyword says what it
// is. Refused: transaction control (BEGIN, START, COMMIT, END, ROLLBACK,
// ABORT, SAVEPOINT, RELEASE, PREPARE TRANSACTION), which would end or
// replace the transaction the fence must run in, and what outlives it on
// the pooled session: SET and RESET (other than SET LOCAL, SET
// TRANSACTION and SET CONSTRAINTS, which end with the transaction),
// PREPARE and DEALLOCATE, DISCARD, LISTEN, LOAD.
// Savepoints are the Tx's Begin. This is a first line only: what it
// cannot see (a function's set_config, a statement sent some other way)
// the fence's transaction id and the reset after the work catch.
func refusedStatement(sql string) error {
	first, second := leadingWords(sql)
	switch first {
	case "begin", "start", "commit", "end", "rollback", "abort", "savepoint", "release",
		"prepare", "deallocate", "discard", "reset", "listen", "load":
		return fmt.Errorf("%w: %s", errStatementRefused, first)
	case "set":
		switch second {
		case "local", "transaction", "constraints":
			return nil
		}
		return fmt.Errorf("%w: set (use SET LOCAL)", errStatementRefused)
	}
	return nil
}

// leadingWords returns the first two keywords of sql, lower-cased ASCII
// letters and underscores, skipping what PostgreSQL's lexer skips before
// a statement's first keyword: white space, comments (-- to the end of
// the line, which a carriage return ends as a line feed does, and nested
// /* */), opening parentheses, and semicolons (an empty statement before
// the one the server runs: the extended protocol refuses a string of
// several statements, but ";COMMIT" is one). A word is empty where sql
// has none.
func leadingWords(sql string) (first, second string) {
	i := 0
	next := func() string {
		for i < len(sql) {
			switch c := sql[i]; {
			case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '(' || c == ';':
				i++
			case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
				for i < len(sql) && sql[i] != '\n' && sql[i] != '\r' {
					i++
				}
			case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
				depth := 0
				for i < len(sql) {
					switch {
					case i+1 < len(sql) && sql[i] == '/' && sql[i+1] == '*':
						depth++
						i += 2
					case i+1 < len(sql) && sql[i] == '*' && sql[i+1] == '/':
						depth--
						i += 2
					default:
						i++
					}
					if depth == 0 {
						break
					}
				}
			default:
				start := i
				word := make([]byte, 0, 16)
				for i < len(sql) {
					c := sql[i]
					switch {
					case c >= 'A' && c <= 'Z':
						word = append(word, c+'a'-'A')
					case c >= 'a' && c <= 'z' || c == '_':
						word = append(word, c)
					default:
						if i == start {
							return "" // not a keyword: a quote, a digit, a symbol
						}
						return string(word)
					}
					i++
				}
				return string(word)
			}
		}
		return ""
	}
	first = next()
	if first != "" {
		second = next()
	}
	return first, second
}
