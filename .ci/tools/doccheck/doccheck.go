// Package doccheck keeps the repository's Markdown honest about the code.
// It compiles the Go snippets of README.md, CONTRIBUTING.md and every page
// under docs/ against the working tree, so that a snippet cannot drift from
// the API it shows (TestDocSnippetsCompile), and it refuses a backticked
// test, example, fuzz target or benchmark name that no _test.go of the
// repository declares (TestDocsCiteOnlyExistingTests; see [Citations]).
// On the user-facing pages of [TestedByPages] a test name stands only in
// a section's "Tested by:" list, never in the prose
// (TestUserPagesNameTestsOnlyInTestedByLists; see [Inline]).
// It lives in the tools module (.ci/tools), outside the library: `.ci/run`
// runs its tests, the root module's `go test ./...` does not.
//
// # Snippets
//
// Every fenced block whose info string is exactly `go` is compiled, as
// one package of its own:
//   - a block starting with a package clause is a whole file;
//   - a block of top-level declarations (types, functions, variables) is
//     compiled as they are;
//   - anything else is a fragment of statements, compiled as the body of a
//     function. A line holding only `...` stands for elided code.
//
// The imports a snippet needs are added from the package names it uses
// (ctoken, webhook, redisstore, ctokenmcp, http, slog, …; see
// [KnownPackages]); a block's own import declarations are kept.
//
// # Preludes
//
// A fragment that uses names it does not declare (the `keys` an earlier
// snippet made, the request a handler got) says so in an HTML comment
// directly before its fence, which the rendered page does not show:
//
//	<!-- snippet
//	var keys *ctoken.Keyring
//	var userID string
//	body: func(ctx context.Context) int
//	-->
//
// Each line is a package-level Go declaration placed before the snippet,
// or an import declaration (`import "github.com/mark3labs/mcp-go/mcp"`),
// except a `body:` line, which gives the signature of the function a
// fragment becomes the body of (default `func()`): a fragment that returns
// values needs one. A one-line form is `<!-- snippet: var x T; var y U -->`.
//
// A variable a fragment declares and never reads is not an error (a
// snippet shows a call and its results); every other compile error is.
package doccheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// KnownPackages maps the package names snippets use to their import paths.
// A name a snippet declares itself (a variable named server, say) is not
// imported.
var KnownPackages = map[string]string{
	"ctoken":      "github.com/ctoken/ctoken",
	"webhook":     "github.com/ctoken/ctoken/webhook",
	"idempotency": "github.com/ctoken/ctoken/idempotency",
	"replay":      "github.com/ctoken/ctoken/replay",
	"observe":     "github.com/ctoken/ctoken/observe",
	"exchange":    "github.com/ctoken/ctoken/exchange",
	"keyfile":     "github.com/ctoken/ctoken/keyfile",
	"mcptoken":    "github.com/ctoken/ctoken/mcptoken",
	"redisstore":  "github.com/ctoken/ctoken/redisstore",
	"pgstore":     "github.com/ctoken/ctoken/pgstore",
	"pgx":         "github.com/jackc/pgx/v5",
	"pgxpool":     "github.com/jackc/pgx/v5/pgxpool",
	"sqlitestore": "github.com/ctoken/ctoken/sqlitestore",
	"ctokenmcp":   "github.com/ctoken/ctoken/mcp",
	"ctokenmcpgo": "github.com/ctoken/ctoken/mcpgo",
	"ctokenotel":  "github.com/ctoken/ctoken/otel",
	"redis":       "github.com/redis/go-redis/v9",
	"mcp":         "github.com/modelcontextprotocol/go-sdk/mcp",
	"jsonrpc":     "github.com/modelcontextprotocol/go-sdk/jsonrpc",
	"server":      "github.com/mark3labs/mcp-go/server",
	"metric":      "go.opentelemetry.io/otel/metric",
	"jsonschema":  "github.com/google/jsonschema-go/jsonschema",
	"protopage":   "github.com/ctoken/ctoken/protopage",
	"grpcpage":    "github.com/ctoken/ctoken/protopage/grpcpage",
	"connectpage": "github.com/ctoken/ctoken/protopage/connectpage",
	"grpc":        "google.golang.org/grpc",
	"connect":     "connectrpc.com/connect",

	"base64":   "encoding/base64",
	"bytes":    "bytes",
	"context":  "context",
	"errors":   "errors",
	"fmt":      "fmt",
	"hex":      "encoding/hex",
	"http":     "net/http",
	"httptest": "net/http/httptest",
	"io":       "io",
	"json":     "encoding/json",
	"log":      "log",
	"net":      "net",
	"os":       "os",
	"rand":     "crypto/rand",
	"sha256":   "crypto/sha256",
	"signal":   "os/signal",
	"slog":     "log/slog",
	"sql":      "database/sql",
	"strconv":  "strconv",
	"strings":  "strings",
	"sync":     "sync",
	"syscall":  "syscall",
	"time":     "time",
	"url":      "net/url",
}

// A Snippet is one fenced ```go block of a Markdown file.
type Snippet struct {
	File string // the Markdown file, as given to [Extract]
	Line int    // the line of the block's first line of code, counted from 1
	Code string
	// Prelude holds the declarations of the snippet comment before the
	// block; Body is the signature of its `body:` line, or "".
	Prelude []string
	Body    string
}

// Extract returns the ```go blocks of the Markdown text md, each with the
// prelude of the snippet comment just before it. A snippet comment that
// is not closed, or not followed by a ```go block, is an error.
func Extract(file string, md []byte) ([]Snippet, error) {
	lines := strings.Split(string(md), "\n")
	var out []Snippet
	var pending *Snippet // a snippet comment waiting for its block
	pendingLine := 0
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		switch {
		case strings.HasPrefix(trimmed, "<!-- snippet"):
			if pending != nil {
				return nil, fmt.Errorf("%s:%d: snippet comment not followed by a ```go block", file, pendingLine)
			}
			pending, pendingLine = &Snippet{}, i+1
			rest := strings.TrimPrefix(trimmed, "<!-- snippet")
			if strings.HasPrefix(rest, ":") {
				// One line: <!-- snippet: decl; decl -->
				body, ok := strings.CutSuffix(strings.TrimSpace(rest[1:]), "-->")
				if !ok {
					return nil, fmt.Errorf("%s:%d: a one-line snippet comment ends with -->", file, i+1)
				}
				for _, d := range strings.Split(body, ";") {
					if err := pending.addPreludeLine(d); err != nil {
						return nil, fmt.Errorf("%s:%d: %v", file, i+1, err)
					}
				}
				continue
			}
			if strings.TrimSpace(rest) != "" {
				return nil, fmt.Errorf("%s:%d: want <!-- snippet, then one declaration a line, then -->", file, i+1)
			}
			for i++; ; i++ {
				if i >= len(lines) {
					return nil, fmt.Errorf("%s:%d: snippet comment not closed by -->", file, pendingLine)
				}
				if strings.TrimSpace(lines[i]) == "-->" {
					break
				}
				if err := pending.addPreludeLine(lines[i]); err != nil {
					return nil, fmt.Errorf("%s:%d: %v", file, i+1, err)
				}
			}
		case strings.HasPrefix(trimmed, "```"):
			lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
			start := i + 1
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			}
			if lang != "go" {
				if pending != nil {
					return nil, fmt.Errorf("%s:%d: snippet comment followed by a ```%s block, not ```go", file, pendingLine, lang)
				}
				continue
			}
			s := Snippet{File: file, Line: start + 1, Code: strings.Join(lines[start:min(i, len(lines))], "\n")}
			if pending != nil {
				s.Prelude, s.Body = pending.Prelude, pending.Body
				pending = nil
			}
			out = append(out, s)
		case trimmed != "" && pending != nil:
			return nil, fmt.Errorf("%s:%d: snippet comment not followed by a ```go block", file, pendingLine)
		}
	}
	if pending != nil {
		return nil, fmt.Errorf("%s:%d: snippet comment not followed by a ```go block", file, pendingLine)
	}
	return out, nil
}

func (s *Snippet) addPreludeLine(line string) error {
	line = strings.TrimSpace(line)
	switch {
	case line == "":
	case strings.HasPrefix(line, "body:"):
		sig := strings.TrimSpace(strings.TrimPrefix(line, "body:"))
		if !strings.HasPrefix(sig, "func(") || s.Body != "" {
			return fmt.Errorf("want one body: func(...) line, got %q", line)
		}
		s.Body = sig
	default:
		s.Prelude = append(s.Prelude, line)
	}
	return nil
}

// Source returns the Go file that compiles s as package pkg (a block with
// its own package clause keeps it), and for each of its lines the
// Markdown line it comes from (0 for a line the wrapper adds).
func (s Snippet) Source(pkg string) (string, []int, error) {
	var imports, decls []string
	for _, p := range s.Prelude {
		if strings.HasPrefix(p, "import ") {
			imports = append(imports, p)
		} else {
			decls = append(decls, p)
		}
	}
	code := strings.Split(s.Code, "\n")
	var b srcBuilder
	fileForm := strings.HasPrefix(strings.TrimSpace(s.Code), "package ")
	if fileForm {
		b.lines(code, s.Line)
	} else {
		b.line("package "+pkg, 0)
	}
	// The block's own imports come first in its text; the prelude's and the
	// inferred ones go after the package clause as separate declarations.
	head := b.len()
	if fileForm {
		for i, l := range code {
			if strings.HasPrefix(strings.TrimSpace(l), "package ") {
				head = i + 1
				break
			}
		}
	}
	if !fileForm {
		b.lines(decls, 0)
		if _, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+s.Code, 0); err == nil && s.Body == "" {
			b.lines(code, s.Line) // top-level declarations
		} else {
			sig := s.Body
			if sig == "" {
				sig = "func()"
			}
			b.line("func _"+strings.TrimPrefix(sig, "func")+" {", 0)
			for i, l := range code {
				if strings.TrimSpace(l) == "..." {
					l = strings.Replace(l, "...", `panic("elided")`, 1)
				}
				b.line(l, s.Line+i)
			}
			b.line("}", 0)
		}
	} else if len(decls) > 0 {
		b.lines(decls, 0)
	}
	src := b.String()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", src, parser.ImportsOnly)
	if err != nil {
		return "", nil, err
	}
	have := map[string]bool{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		have[name] = true
	}
	for _, imp := range imports {
		if f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+imp, parser.ImportsOnly); err == nil {
			for _, spec := range f.Imports {
				path, _ := strconv.Unquote(spec.Path.Value)
				name := path[strings.LastIndex(path, "/")+1:]
				if spec.Name != nil {
					name = spec.Name.Name
				}
				have[name] = true
			}
		}
	}
	full, err := parser.ParseFile(token.NewFileSet(), "snippet.go", src, 0)
	if err != nil {
		return "", nil, err
	}
	for _, name := range usedPackageNames(full) {
		if path, ok := KnownPackages[name]; ok && !have[name] {
			imports = append(imports, fmt.Sprintf("import %s %q", name, path))
		}
	}
	b.insert(head, imports)
	return b.String(), b.origin, nil
}

// usedPackageNames returns, sorted, the names f uses as X in X.Sel that it
// does not declare: the packages it needs.
func usedPackageNames(f *ast.File) []string {
	unresolved := map[*ast.Ident]bool{}
	for _, id := range f.Unresolved {
		unresolved[id] = true
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && unresolved[id] && !slices.Contains(names, id.Name) {
				names = append(names, id.Name)
			}
		}
		return true
	})
	slices.Sort(names)
	return names
}

// srcBuilder is a Go file under construction, with the Markdown line of
// each of its lines.
type srcBuilder struct {
	text   []string
	origin []int
}

func (b *srcBuilder) line(l string, origin int) {
	b.text = append(b.text, l)
	b.origin = append(b.origin, origin)
}

// lines adds ls; the first comes from Markdown line first (0: none), the
// others from the lines after it.
func (b *srcBuilder) lines(ls []string, first int) {
	for i, l := range ls {
		o := 0
		if first > 0 {
			o = first + i
		}
		b.line(l, o)
	}
}

func (b *srcBuilder) len() int { return len(b.text) }

// insert adds ls, from no Markdown line, before line index at.
func (b *srcBuilder) insert(at int, ls []string) {
	b.text = slices.Insert(b.text, at, ls...)
	b.origin = slices.Insert(b.origin, at, make([]int, len(ls))...)
}

func (b *srcBuilder) String() string { return strings.Join(b.text, "\n") + "\n" }

// A Problem is a compile error in a snippet, at a Markdown line (or at the
// block's first line when the wrapper's own line is at fault).
type Problem struct {
	File string
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// genDir is where, inside the root module, the snippets' packages appear to
// the go command (through -overlay: nothing is written there, and the
// directory need not exist). It is outside internal/, so a snippet can use
// only what a user of the library can import.
const genDir = "doccheck-snippets"

// compileError is a line of the compiler's output naming a snippet file.
var compileError = regexp.MustCompile(`(s[0-9]+)\.go:([0-9]+)(?::[0-9]+)?: (.*)$`)

// Check compiles each snippet as a package of its own inside the module
// rooted at root, in workspace mode (root's go.work), with `go build
// -overlay`: nothing is written under root. It returns every compile error
// but "declared and not used", at its Markdown line.
func Check(root string, snippets []Snippet) ([]Problem, error) {
	if len(snippets) == 0 {
		return nil, nil
	}
	tmp, err := os.MkdirTemp("", "doccheck")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	overlay := map[string]string{}
	origins := map[string][]int{}
	var pkgs []string
	for i, s := range snippets {
		id := fmt.Sprintf("s%03d", i)
		src, origin, err := s.Source("snippet")
		if err != nil {
			return []Problem{{s.File, s.Line, "does not parse as a file, declarations or statements: " + err.Error()}}, nil
		}
		file := filepath.Join(tmp, id+".go")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			return nil, err
		}
		overlay[filepath.Join(absRoot, genDir, id, id+".go")] = file
		origins[id] = origin
		pkgs = append(pkgs, "./"+genDir+"/"+id)
	}
	o, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		return nil, err
	}
	ovl := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovl, o, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("go", append([]string{"build", "-overlay", ovl, "-gcflags=-e", "-o", os.DevNull}, pkgs...)...)
	if len(pkgs) > 1 {
		cmd.Args = slices.Delete(cmd.Args, 5, 7) // -o applies to one package only
	}
	cmd.Dir = absRoot
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	var problems []Problem
	for _, l := range strings.Split(out.String(), "\n") {
		m := compileError.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if strings.Contains(m[3], "declared and not used") {
			continue
		}
		id := m[1]
		n, _ := strconv.Atoi(m[2])
		var i int
		fmt.Sscanf(id, "s%d", &i)
		if i >= len(snippets) {
			continue
		}
		s, line := snippets[i], 0
		if origin := origins[id]; n >= 1 && n <= len(origin) {
			line = origin[n-1]
		}
		if line == 0 {
			line = s.Line
		}
		problems = append(problems, Problem{s.File, line, m[3]})
	}
	if runErr != nil && len(problems) == 0 && !onlyUnused(out.String()) {
		return nil, fmt.Errorf("go build: %v\n%s", runErr, out.String())
	}
	return problems, nil
}

// onlyUnused reports whether every error line of the go command's output
// is "declared and not used".
func onlyUnused(out string) bool {
	found := false
	for _, l := range strings.Split(out, "\n") {
		if compileError.MatchString(l) {
			found = true
			if !strings.Contains(l, "declared and not used") {
				return false
			}
		}
	}
	return found
}
