package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// A Citation is a test, example, fuzz target or benchmark that a Markdown
// file names in an inline code span: `TestX`, `TestX/sub name` (the
// top-level TestX is cited), or inside a command or pattern
// (`go test -run 'TestX|TestY'`). A name followed by * or .* in the span
// is a prefix (`TestState*`): some function must start with it.
type Citation struct {
	File   string // the Markdown file, as given to [Citations]
	Line   int    // counted from 1
	Name   string // the top-level function name
	Prefix bool   // Name is a prefix pattern
	// Sub is the first subtest of a citation that is a whole span,
	// `TestX/sub name/deeper` (the form of the "Tested by" lists): "sub
	// name". Empty for a top-level name, a placeholder (`TestX/<driver>`)
	// and names inside a command or pattern, where go test's own spelling
	// (underscores, anchors) rules.
	Sub string
}

func (c Citation) String() string {
	if c.Prefix {
		return fmt.Sprintf("%s:%d: `%s*` cited, but no _test.go of the repository declares a func starting with %s", c.File, c.Line, c.Name, c.Name)
	}
	return fmt.Sprintf("%s:%d: `%s` cited, but no _test.go of the repository declares func %s", c.File, c.Line, c.Name, c.Name)
}

// testPrefixes are the prefixes go test runs functions by.
var testPrefixes = []string{"Test", "Example", "Fuzz", "Benchmark"}

// Citations returns the test names cited in the inline code spans of the
// Markdown text md. Fenced code blocks (``` or ~~~) are not read: they hold
// code and commands shown as such, where a func TestX may be an example to
// copy, not a citation.
func Citations(file string, md []byte) []Citation {
	text := blankFences(string(md))
	var out []Citation
	for i := 0; i < len(text); {
		if text[i] != '`' {
			i++
			continue
		}
		n := run(text, i, '`')
		start := i + n
		end := closingRun(text, start, n)
		if end < 0 {
			i = start // a literal run of backticks
			continue
		}
		line := 1 + strings.Count(text[:start], "\n")
		span := text[start:end]
		for _, c := range namesIn(span) {
			c.File = file
			c.Line = line + strings.Count(span[:c.Line], "\n")
			out = append(out, c)
		}
		i = end + n
	}
	return out
}

// blankFences replaces every line of a fenced code block, fences included,
// with an empty line, so that line numbers stay those of the file.
func blankFences(md string) string {
	lines := strings.Split(md, "\n")
	fence := ""
	for i, l := range lines {
		t := strings.TrimLeft(l, " ")
		indent := len(l) - len(t)
		switch {
		case fence != "":
			if indent < 4 && strings.HasPrefix(t, fence) && strings.TrimSpace(strings.TrimLeft(t, fence[:1])) == "" {
				fence = ""
			}
			lines[i] = ""
		case indent < 4 && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")):
			fence = t[:run(t, 0, t[0])]
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// run returns the length of the run of c starting at s[i].
func run(s string, i int, c byte) int {
	n := 0
	for i+n < len(s) && s[i+n] == c {
		n++
	}
	return n
}

// closingRun returns the index of the next run of exactly n backticks at or
// after from, within the paragraph (a code span does not cross a blank
// line), or -1.
func closingRun(s string, from, n int) int {
	limit := len(s)
	if p := strings.Index(s[from:], "\n\n"); p >= 0 {
		limit = from + p
	}
	for i := from; i < limit; {
		if s[i] != '`' {
			i++
			continue
		}
		m := run(s, i, '`')
		if m == n {
			return i
		}
		i += m
	}
	return -1
}

// namesIn returns the test names in one code span; each Citation's Line is
// the name's byte offset in span, for the caller to turn into a line.
func namesIn(span string) []Citation {
	var out []Citation
	for i := 0; i < len(span); i++ {
		if i > 0 && (isIdent(span[i-1]) || span[i-1] == '.') {
			continue // inside a word, or a selector (testing.Benchmark)
		}
		for _, p := range testPrefixes {
			if !strings.HasPrefix(span[i:], p) {
				continue
			}
			j := i + len(p)
			// Go runs TestX only when X does not start with a lower-case
			// letter; a bare prefix (`Test`, `Fuzz`) is a word, not a name.
			if j >= len(span) || !(span[j] == '_' || span[j] >= 'A' && span[j] <= 'Z' || span[j] >= '0' && span[j] <= '9') {
				continue
			}
			for j < len(span) && isIdent(span[j]) {
				j++
			}
			rest := span[j:]
			c := Citation{
				Line:   i,
				Name:   span[i:j],
				Prefix: strings.HasPrefix(rest, "*") || strings.HasPrefix(rest, ".*"),
			}
			if i == 0 && strings.HasPrefix(rest, "/") {
				c.Sub, _, _ = strings.Cut(rest[1:], "/")
				if strings.HasPrefix(c.Sub, "<") {
					c.Sub = "" // a placeholder: `BenchmarkX/<driver>`
				}
			}
			out = append(out, c)
			i = j - 1
			break
		}
	}
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// TestFuncs returns the names of the top-level Test, Example, Fuzz and
// Benchmark functions declared in every _test.go file under root (testdata,
// node_modules and .git skipped), with the file of each.
func TestFuncs(root string) (map[string]string, error) {
	funcs, _, err := ReadTests(root)
	return funcs, err
}

// ReadTests parses every _test.go file under root once (testdata,
// node_modules, vendor and .git skipped) and returns its top-level Test,
// Example, Fuzz and Benchmark functions, each with its file, and the
// names its tests can give t.Run ([Subtests]).
func ReadTests(root string) (map[string]string, *Subtests, error) {
	funcs := map[string]string{}
	subs := &Subtests{literal: map[string]bool{}}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, src, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv != nil {
				continue
			}
			for _, prefix := range testPrefixes {
				if strings.HasPrefix(fd.Name.Name, prefix) {
					funcs[fd.Name.Name] = p
					break
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				subs.add(lit.Value)
			}
			return true
		})
		return nil
	})
	return funcs, subs, err
}

// Missing returns the citations that name no function of funcs (for a
// prefix, that no function starts with), sorted by file and line.
func Missing(cites []Citation, funcs map[string]string) []Citation {
	var out []Citation
	for _, c := range cites {
		if _, ok := funcs[c.Name]; ok {
			continue
		}
		if c.Prefix && hasPrefixed(funcs, c.Name) {
			continue
		}
		out = append(out, c)
	}
	sortByPlace(out)
	return out
}

// Subtests holds the names t.Run can be given in the _test.go files of a
// tree: every string literal, a format (a literal with a fmt verb, as in
// fmt.Sprintf("claimers=%d", n)) and the start of a name built by
// concatenation ("handler status " + text).
type Subtests struct {
	literal map[string]bool
	formats []*regexp.Regexp
	starts  []string
}

// minStart is the shortest literal taken as the start of a concatenated
// name: shorter ones ("a", "the ") would match nearly anything.
const minStart = 8

// minFormatText is the fewest characters outside its verbs that a format
// needs to be taken as a subtest's name: "%s" or "%s/%d" would match any.
const minFormatText = 4

var fmtVerb = regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z]`)

// Has reports whether sub, as cited (with spaces) or in go test's spelling
// (underscores), is a name a test of the tree can give t.Run.
func (s *Subtests) Has(sub string) bool {
	for _, v := range []string{sub, strings.ReplaceAll(sub, "_", " ")} {
		if s.literal[v] {
			return true
		}
		for _, f := range s.formats {
			if f.MatchString(v) {
				return true
			}
		}
		for _, st := range s.starts {
			if strings.HasPrefix(v, st) {
				return true
			}
		}
	}
	return false
}

// add records the string literal quoted (as written in Go source).
func (s *Subtests) add(quoted string) {
	v, err := strconv.Unquote(quoted)
	if err != nil || v == "" {
		return
	}
	s.literal[v] = true
	s.literal[strings.ReplaceAll(v, "_", " ")] = true
	if parts := fmtVerb.Split(v, -1); len(parts) > 1 && len(strings.Join(parts, "")) >= minFormatText {
		for i, part := range parts {
			parts[i] = regexp.QuoteMeta(part)
		}
		if re, err := regexp.Compile("^" + strings.Join(parts, ".+") + "$"); err == nil {
			s.formats = append(s.formats, re) // not UTF-8: no subtest name
		}
	}
	if len(v) >= minStart && !strings.ContainsAny(v, "\n") {
		s.starts = append(s.starts, v)
	}
}

// MissingSubtests returns the citations whose Sub no test of names can
// give t.Run, sorted by file and line.
func MissingSubtests(cites []Citation, names *Subtests) []Citation {
	var out []Citation
	for _, c := range cites {
		if c.Sub != "" && !names.Has(c.Sub) {
			out = append(out, c)
		}
	}
	sortByPlace(out)
	return out
}

// sortByPlace sorts citations by file, then line.
func sortByPlace(cs []Citation) {
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].File != cs[j].File {
			return cs[i].File < cs[j].File
		}
		return cs[i].Line < cs[j].Line
	})
}

func hasPrefixed(funcs map[string]string, prefix string) bool {
	for name := range funcs {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}
