package doccheck

import (
	"fmt"
	"strings"
)

// TestedByPages are the user-facing pages that name tests only in their
// "Tested by" lists, so that the prose reads as a user's page and the
// evidence stays one glance away (see [Inline]). The other pages under
// docs/ join this list as they are converted; a page on it that names a
// test in its prose fails TestUserPagesNameTestsOnlyInTestedByLists.
var TestedByPages = []string{
	"README.md",
	"SECURITY.md",
	"docs/benchmarks.md",
	"docs/cli.md",
	"docs/cursors.md",
	"docs/exchange.md",
	"docs/faults.md",
	"docs/fips.md",
	"docs/fleet-reference.md",
	"docs/fleet.md",
	"docs/idempotency.md",
	"docs/keyfile.md",
	"docs/keys.md",
	"docs/mcp-reference.md",
	"docs/mcp-tasks.md",
	"docs/mcp.md",
	"docs/one-time.md",
	"docs/operations.md",
	"docs/pagination.md",
	"docs/pgstore-reference.md",
	"docs/pgstore.md",
	"docs/request-state.md",
	"docs/sqlitestore.md",
	"docs/store-authors.md",
	"docs/webhooks.md",
	"docs/wire-format.md",
	"sqlitestore/drivertest/BENCHMARKS.md",
}

// An InlineName is a test name a page cites outside its "Tested by" lists.
type InlineName struct{ Citation }

func (n InlineName) String() string {
	return fmt.Sprintf("%s:%d: `%s` named in the prose: move it to the section's \"Tested by:\" list", n.File, n.Line, n.Name)
}

// Inline returns the citations of md (see [Citations]) that stand outside
// a "Tested by" list. A list is a paragraph whose first line starts with
// "Tested by:"; when nothing follows the colon on that line, the Markdown
// list after it (items starting with "- ", "* " or a number and a dot,
// and their indented continuation lines, blank lines between them
// allowed) belongs to it too. A heading ends a list; a list item ends a
// "Tested by:" paragraph (one inside a list item ends at the next item).
// Names in fenced code blocks are not citations and are never reported.
func Inline(file string, md []byte) []InlineName {
	in := testedByLines(string(md))
	var out []InlineName
	for _, c := range Citations(file, md) {
		if c.Line-1 < len(in) && in[c.Line-1] {
			continue
		}
		out = append(out, InlineName{c})
	}
	return out
}

// testedByLines reports, for each line of md (index 0 is line 1), whether
// it belongs to a "Tested by" list.
func testedByLines(md string) []bool {
	lines := strings.Split(blankFences(md), "\n")
	in := make([]bool, len(lines))
	const (
		outside = iota
		paragraph
		list // "Tested by:" alone on its line: the list that follows belongs to it
	)
	state := outside
	startsParagraph := true
	for i, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "#"):
			state = outside
		case t == "":
			if state == paragraph {
				state = outside
			}
		case startsParagraph && strings.HasPrefix(t, "Tested by:"):
			state = paragraph
			if strings.TrimSpace(strings.TrimPrefix(t, "Tested by:")) == "" {
				state = list
			}
		case state == paragraph && isListItem(t):
			state = outside // the next item of a list the paragraph was in
		case state == list && i > 0 && strings.TrimSpace(lines[i-1]) == "" && !isListItem(t) && !strings.HasPrefix(l, "  "):
			state = outside // a paragraph after the list
		}
		in[i] = state != outside
		startsParagraph = t == "" || strings.HasPrefix(t, "#")
	}
	return in
}

// isListItem reports whether the trimmed line t starts a Markdown list item.
func isListItem(t string) bool {
	if strings.HasPrefix(t, "- ") || strings.HasPrefix(t, "* ") || strings.HasPrefix(t, "+ ") {
		return true
	}
	n := 0
	for n < len(t) && t[n] >= '0' && t[n] <= '9' {
		n++
	}
	return n > 0 && n+1 < len(t) && (t[n] == '.' || t[n] == ')') && t[n+1] == ' '
}
