package redisstore

import (
	"strings"
	"testing"
)

// FuzzServerReplyParsers feeds the parsers of ROLE, CONFIG GET and TIME
// replies and INFO replication's text arbitrary strings in the shapes
// Redis answers with: they never panic.
func FuzzServerReplyParsers(f *testing.F) {
	f.Add("master", "6380", "1700000000", "123456")
	f.Add("slave", "", "x", "")
	f.Add("", "noeviction", "-1", "99999999999")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		parseRole([]any{a, int64(1), []any{[]any{b, c, d}}})
		parseRole([]any{a})
		parseRole([]any{a, b, c})
		configValue([]any{a, b, c, d}, "maxmemory-policy")
		configValue(map[any]any{a: b, c: d}, "maxmemory-policy")
		parseTime([]any{c, d})
		parseTime([]any{a})
		replicaAway(a + "\r\n" + b + ":" + c + "\nmaster_repl_offset:" + d)
		replicaAway([]any{a})
		if replicaAway("role:master\r\nmaster_repl_offset:9\r\nrepl_backlog_active:0\r\n"+"x"+a) && !strings.Contains(a, ":") {
			t.Fatal("replicaAway without a backlog")
		}
	})
}
