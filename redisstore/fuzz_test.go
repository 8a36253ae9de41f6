package redisstore

import (
	"strings"
	"testing"

	"github.com/ctoken/ctoken/replay"
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

// FuzzParseEntry feeds the decoder of the entries the record scripts
// return arbitrary strings: it never panics, refuses what breaks the
// limits, and an entry it accepts as a record encodes back to itself.
func FuzzParseEntry(f *testing.F) {
	tok := "0123456789abcdef0123456789abcdef"
	for _, s := range []string{"", "1", "1abc.2", "L" + tok, "L" + tok + "fp", "D" + tok, "D" + tok + "\x02fpresult", "D" + tok + "\x00r", "D" + tok + "\xff", "X" + tok} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		state, fp, result, ok := parseEntry(v)
		if !ok {
			if state != 0 || fp != nil || result != nil {
				t.Fatalf("refused entry returned %v, %q, %q", state, fp, result)
			}
			return
		}
		if len(fp) > replay.MaxFingerprintBytes || len(result) > replay.MaxResultBytes {
			t.Fatalf("accepted a record over the limits: %d, %d bytes", len(fp), len(result))
		}
		switch {
		case state == replay.LeaseBusy:
			if result != nil || v != "L"+v[1:1+tokenLen]+string(fp) {
				t.Fatalf("lease %q decoded as %q, %q", v, fp, result)
			}
		case state == replay.LeaseDone && result != nil:
			if v != "D"+v[1:1+tokenLen]+string([]byte{byte(len(fp))})+string(fp)+string(result) {
				t.Fatalf("record %q decoded as %q, %q", v, fp, result)
			}
		case state == replay.LeaseDone:
			if fp != nil || (v[0] != '1' && v != "D"+v[1:]) || (v[0] == 'D' && len(v) != 1+tokenLen) {
				t.Fatalf("entry %q decoded as done with %q", v, fp)
			}
		default:
			t.Fatalf("entry %q decoded as %v", v, state)
		}
	})
}
