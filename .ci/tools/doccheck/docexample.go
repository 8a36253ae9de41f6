package doccheck

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// OpenWithCode lists the packages whose doc opens with code: a code block,
// before the doc's first heading, that is the body of one of the package's
// Example functions (see [DocExampleProblems]). They are the ones a new
// user reads first: the root, the idempotency and webhook middlewares, the
// replay stores' contract, and the two MCP integrations.
var OpenWithCode = []string{".", "idempotency", "webhook", "replay", "mcp", "mcpgo", "sqlitestore"}

// CompiledOnly lists the packages whose opening code may be an Example go
// test compiles but does not run: sqlitestore's module imports no SQLite
// driver, so its program cannot open a database there (its drivertest
// module runs the same set-up on each driver).
var CompiledOnly = []string{"sqlitestore"}

// exampleIntro matches the line that introduces a code block copied from
// an Example: it ends with the Example's name in parentheses and a colon,
// as in "A cursor issued and verified (ExampleCursorIssuer):".
var exampleIntro = regexp.MustCompile(`\((Example[A-Z_][A-Za-z0-9_]*)\):$`)

// A docBlock is a code block of a package doc that its introducing line
// says is an Example's body.
type docBlock struct {
	example string
	code    string // the block's lines, one tab of indentation removed
	opening bool   // before the doc's first heading
}

// docBlocks returns the code blocks of doc (the text of a package doc
// comment: a code block's lines are indented by a tab) whose introducing
// line names an Example.
func docBlocks(doc string) []docBlock {
	var out []docBlock
	lines := strings.Split(doc, "\n")
	prev, heading := "", false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "# "):
			heading = true
			prev = ""
		case strings.HasPrefix(line, "\t"):
			var code []string
			for ; i < len(lines) && (strings.HasPrefix(lines[i], "\t") || lines[i] == ""); i++ {
				code = append(code, strings.TrimPrefix(lines[i], "\t"))
			}
			i--
			if m := exampleIntro.FindStringSubmatch(prev); m != nil {
				out = append(out, docBlock{example: m[1], code: trimBlank(strings.Join(code, "\n")), opening: !heading})
			}
			prev = ""
		case strings.TrimSpace(line) != "":
			prev = strings.TrimSpace(line)
		}
	}
	return out
}

// exampleBody returns the source of an Example function's body with one
// tab of indentation removed and without its output comment (from
// "// Output:" or "// Unordered output:" to the end, in any case, as go
// test reads it), and whether it has one: an Example without it is
// compiled, never run.
func exampleBody(src string) (string, bool) {
	var kept []string
	runs := false
	for _, line := range strings.Split(src, "\n") {
		if outputComment.MatchString(line) {
			runs = true
			break
		}
		kept = append(kept, strings.TrimPrefix(line, "\t"))
	}
	return trimBlank(strings.Join(kept, "\n")), runs
}

// outputComment matches the line that starts an Example's output comment.
var outputComment = regexp.MustCompile(`(?i)^\s*//\s*(unordered\s+)?output:`)

// trimBlank removes the blank lines around s.
func trimBlank(s string) string {
	return strings.Trim(s, "\n")
}

// DocExampleProblems returns what is wrong with the code of pkg's package
// doc:
//
//  1. a code block introduced by a line ending in "(ExampleName):" is,
//     line for line, the body of that Example of pkg's tests (without its
//     output comment), so that the code a reader sees first is compiled
//     and run by go test and cannot drift from the API;
//  2. when opens is set, the doc has such a block before its first
//     heading.
func DocExampleProblems(pkg *Package, opens bool) []string {
	var problems []string
	opened := false
	for _, b := range docBlocks(pkg.Doc) {
		body, ok := pkg.ExampleBodies[b.example]
		if !ok && slices.Contains(CompiledOnly, pkg.Dir) {
			body, ok = pkg.CompiledBodies[b.example]
		}
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("a code block is introduced as %s, which is not an Example go test runs: no _test.go of the package built without tags declares it with an output comment", b.example))
		case b.code != body:
			problems = append(problems, fmt.Sprintf("the code block introduced as %s is not that Example's body; the body is:\n%s", b.example, body))
		default:
			opened = opened || b.opening
		}
	}
	if opens && !opened {
		problems = append(problems, `the doc does not open with code: before its first heading, give its happy path as a code block introduced by a line ending in "(ExampleName):", the body of that Example`)
	}
	return problems
}
