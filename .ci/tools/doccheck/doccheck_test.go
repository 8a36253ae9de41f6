package doccheck

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tools/internal/reporoot"
)

// root is the repository root (see package reporoot), set by TestMain.
var root string

func TestMain(m *testing.M) {
	r, err := reporoot.Find()
	if err != nil {
		fmt.Fprintln(os.Stderr, "doccheck:", err)
		os.Exit(2)
	}
	root = r
	os.Exit(m.Run())
}

// needWorkspace skips the test under GOWORK=off (as .ci/run runs it on CI's
// older Go legs, where the nested modules the snippets use cannot resolve;
// the newest leg runs it) and fails when no go.work is found.
func needWorkspace(t *testing.T) {
	t.Helper()
	if os.Getenv("GOWORK") == "off" {
		t.Skip("GOWORK=off: the snippets need the repository's go.work for the nested modules")
	}
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		t.Fatalf("go env GOWORK: %v", err)
	}
	if w := strings.TrimSpace(string(out)); w == "" || w == "off" {
		t.Fatalf("the snippet check needs the repository's go.work (go env GOWORK = %q)", w)
	}
}

// markdownFiles returns README.md, CONTRIBUTING.md and every .md file under
// docs/, relative to root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// statSources stats every Go source and module file of the repository, so
// that go test's result cache, which records the files a test opens or
// stats (not those the go command it runs reads), is invalidated by any
// change to the code the snippets compile against.
func statSources(t *testing.T) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		name := d.Name()
		if !d.IsDir() && (strings.HasSuffix(name, ".go") || name == "go.mod" || name == "go.sum" || name == "go.work" || name == "go.work.sum") {
			if _, err := os.Stat(p); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("found %d Go files under %s", n, root)
	}
}

// TestDocSnippetsCompile compiles every ```go block of README.md,
// CONTRIBUTING.md and docs/**/*.md against the working tree.
func TestDocSnippetsCompile(t *testing.T) {
	needWorkspace(t)
	var all []Snippet
	for _, f := range markdownFiles(t) {
		md, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Extract(f, md)
		if err != nil {
			t.Error(err)
			continue
		}
		all = append(all, s...)
	}
	if len(all) < 20 {
		t.Fatalf("found %d Go snippets: the extraction is broken", len(all))
	}
	statSources(t)
	problems, err := Check(root, all)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d snippets checked", len(all))
}

// TestCheckCatchesAStringPassedAsBytes runs the check on the snippet that
// once shipped in the README: Session is a []byte, and a string does not
// convert implicitly.
func TestCheckCatchesAStringPassedAsBytes(t *testing.T) {
	needWorkspace(t)
	md := "<!-- snippet\nvar keys *ctoken.KeySource\nvar obs observe.Observer\n-->\n```go\n" +
		"session := os.Getenv(\"CTOKEN_SESSION\")\n" +
		"issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{KeySource: keys, Session: session, Observer: obs})\n" +
		"```\n"
	s, err := Extract("bug.md", []byte(md))
	if err != nil || len(s) != 1 {
		t.Fatalf("Extract = %v, %v", s, err)
	}
	problems, err := Check(root, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || problems[0].Line != 7 || !strings.Contains(problems[0].Msg, "cannot use session") {
		t.Fatalf("problems = %v, want the Session field refused at bug.md:7", problems)
	}
	fixed := strings.Replace(md, "Session: session", "Session: []byte(session)", 1)
	s, _ = Extract("fixed.md", []byte(fixed))
	if problems, err := Check(root, s); err != nil || len(problems) != 0 {
		t.Fatalf("the fixed snippet: %v, %v", problems, err)
	}
}

// TestExtractReadsPreludesAndForms pins the snippet comment's two forms,
// the body: line, and that other fences are ignored.
func TestExtractReadsPreludesAndForms(t *testing.T) {
	md := "text\n<!-- snippet: var a int; var b string -->\n```go\n_ = a\n```\n" +
		"```sh\ngo test\n```\n" +
		"<!-- snippet\nvar v *webhook.Verifier\nbody: func(r *http.Request) int\n-->\n\n```go\nreturn 1\n```\n" +
		"```go\npackage main\n\nfunc main() {}\n```\n"
	s, err := Extract("x.md", []byte(md))
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 3 {
		t.Fatalf("got %d snippets, want 3", len(s))
	}
	if s[0].Line != 4 || strings.Join(s[0].Prelude, "|") != "var a int|var b string" || s[0].Body != "" {
		t.Errorf("first snippet: %+v", s[0])
	}
	if s[1].Line != 15 || strings.Join(s[1].Prelude, "|") != "var v *webhook.Verifier" || s[1].Body != "func(r *http.Request) int" {
		t.Errorf("second snippet: %+v", s[1])
	}
	if s[2].Prelude != nil || !strings.HasPrefix(s[2].Code, "package main") {
		t.Errorf("third snippet: %+v", s[2])
	}
	src, _, err := s[1].Source("snippet")
	if err != nil || !strings.Contains(src, `import webhook "github.com/ctoken/ctoken/webhook"`) || !strings.Contains(src, "func _(r *http.Request) int {") {
		t.Errorf("second snippet's source (%v):\n%s", err, src)
	}
	// A prelude's import wins over KnownPackages' path for the same name.
	own := Snippet{File: "x.md", Line: 1, Code: "t := mcp.NewTool(\"search\")", Prelude: []string{`import "github.com/mark3labs/mcp-go/mcp"`}}
	src, _, err = own.Source("snippet")
	if err != nil || !strings.Contains(src, `import "github.com/mark3labs/mcp-go/mcp"`) || strings.Contains(src, "go-sdk") {
		t.Errorf("a prelude's import (%v):\n%s", err, src)
	}
	for _, bad := range []string{
		"<!-- snippet\nvar a int\n",                        // not closed
		"<!-- snippet: var a int -->\nprose\n```go\n```\n", // not followed by its block
		"<!-- snippet: var a int -->\n```sh\n```\n",        // followed by another language
		"<!-- snippet: body: func -->\n```go\n```\n",       // not a signature
	} {
		if _, err := Extract("bad.md", []byte(bad)); err == nil {
			t.Errorf("Extract accepted %q", bad)
		}
	}
}
