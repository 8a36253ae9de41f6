// Command quickstart walks through ctoken: it pages through a small data set
// with signed cursors, shows forged, stale and foreign cursors refused, and
// round-trips an MCP request state in both modes.
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"

	"github.com/ctoken/ctoken"
)

const pageSize = 4

// issues is the in-memory data set the "search_issues" tool pages through.
var issues = []string{
	"#101 crash on empty query", "#102 cursor leaks across users", "#103 docs typo",
	"#104 slow search", "#105 add dark mode", "#106 flaky test", "#107 bump deps",
	"#108 rotate keys", "#109 fleet session", "#110 panic on nil", "#111 i18n",
}

// searchIssues is a tool handler: it verifies the incoming cursor against
// the call's scope and returns one page plus the next cursor.
func searchIssues(issuer *ctoken.CursorIssuer, caller string, args []byte, cursor string) ([]string, string, error) {
	fp, err := ctoken.ArgsFingerprint(args)
	if err != nil {
		return nil, "", err
	}
	scope := ctoken.CursorScope{ToolID: "search_issues", CallerID: caller, Args: fp}
	page := uint32(0)
	if cursor != "" {
		p, err := issuer.Verify(cursor, scope)
		if err != nil {
			return nil, "", err
		}
		page = p.Page
	}
	start := int(page) * pageSize
	end := min(start+pageSize, len(issues))
	next := ""
	if end < len(issues) {
		if next, err = issuer.Issue(ctoken.CursorPayload{CursorScope: scope, Page: page + 1}); err != nil {
			return nil, "", err
		}
	}
	return issues[start:end], next, nil
}

func refusal(err error) string {
	return fmt.Sprintf("refused: code %d (%s)", ctoken.ErrorCode(err), err)
}

func main() {
	log.SetFlags(0)
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run is the walk-through; it fails if any step behaves unexpectedly.
func run(w io.Writer) error {
	keys, ephemeral, err := ctoken.KeyringFromEnvOrRandom("CTOKEN_KEYS")
	if err != nil {
		return err
	}
	if ephemeral {
		fmt.Fprintln(w, "CTOKEN_KEYS is unset: using a random key (tokens die with this process)")
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	if err != nil {
		return err
	}
	caller, args := "user:42", []byte(`{"query":"is:open","sort":"created"}`)

	fmt.Fprintln(w, "== 1. Paging through search_issues with signed cursors")
	var cursor, second string
	for n := 1; ; n++ {
		items, next, err := searchIssues(issuer, caller, args, cursor)
		if err != nil {
			return fmt.Errorf("page %d: %v", n, err)
		}
		fmt.Fprintf(w, "page %d: %v\n", n, items)
		if n == 2 {
			second = cursor
		}
		if next == "" {
			break
		}
		fmt.Fprintf(w, "  next cursor (%d bytes): %s\n", len(next), next)
		cursor = next
	}

	fmt.Fprintln(w, "\n== 2. A tampered cursor")
	b := []byte(second)
	mid := len(b) / 2 // change one character: the page number, say
	if b[mid] == 'A' {
		b[mid] = 'B'
	} else {
		b[mid] = 'A'
	}
	if _, _, err := searchIssues(issuer, caller, args, string(b)); err != nil {
		fmt.Fprintln(w, refusal(err))
	} else {
		return errors.New("tampered cursor accepted")
	}

	fmt.Fprintln(w, "\n== 3. The same cursor from another caller")
	if _, _, err := searchIssues(issuer, "user:666", args, second); err != nil {
		fmt.Fprintln(w, refusal(err))
	} else {
		return errors.New("foreign caller accepted")
	}

	fmt.Fprintln(w, "\n== 4. The same cursor with other arguments")
	if _, _, err := searchIssues(issuer, caller, []byte(`{"query":"is:closed"}`), second); err != nil {
		fmt.Fprintln(w, refusal(err))
	} else {
		return errors.New("other arguments accepted")
	}

	fmt.Fprintln(w, "\n== 5. The same cursor after a server restart (new session)")
	restarted, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	if err != nil {
		return err
	}
	if _, _, err := searchIssues(restarted, caller, args, second); err != nil {
		fmt.Fprintln(w, refusal(err), "-> the client starts over")
	} else {
		return errors.New("cursor from before the restart accepted")
	}

	fmt.Fprintln(w, "\n== 6. MCP request state (multi round-trip)")
	tool := ctoken.MCPTarget("tools/call", "deploy")
	for _, mode := range []ctoken.RequestStateMode{ctoken.Signed, ctoken.Encrypted} {
		codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
			Keys: keys, Mode: mode, Binding: ctoken.BindSubjectAndTool,
		})
		if err != nil {
			return err
		}
		name := map[ctoken.RequestStateMode]string{ctoken.Signed: "signed", ctoken.Encrypted: "encrypted"}[mode]
		wire, err := codec.Encode(`{"step":2,"env":"staging"}`, "alice", tool)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s state (%d bytes): %s\n", name, len(wire), shorten(wire))
		state, err := codec.Decode(wire, "alice", tool)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  decoded for alice: %s\n", state)
		if _, err := codec.Decode(wire, "mallory", tool); err != nil {
			fmt.Fprintf(w, "  mallory presenting it: refused (%s)\n", ctoken.Reason(err))
		} else {
			return errors.New("foreign subject accepted")
		}
	}
	fmt.Fprintln(w, "\ndone")
	return nil
}

func shorten(s string) string {
	if len(s) <= 60 {
		return s
	}
	return s[:40] + "..." + s[len(s)-12:] + " (" + strconv.Itoa(len(s)) + " chars)"
}
