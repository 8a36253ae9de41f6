package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tools/internal/reporoot"
)

// TestAPIFilesMatchTheCode regenerates the API of every published module
// and compares it with the checked-in api/ files: an exported identifier
// added, removed or changed without its file changing fails, naming the
// line. Under GOWORK=off (as .ci/run runs it on CI's older Go legs) only
// the root module is checked: the nested modules resolve the root module
// through the repository's go.work.
func TestAPIFilesMatchTheCode(t *testing.T) {
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	statSources(t, root)
	mods, err := Modules(root)
	if err != nil {
		t.Fatal(err)
	}
	workspace := os.Getenv("GOWORK") != "off"
	if !workspace {
		t.Log("GOWORK=off: checking the root module only")
		mods = []string{"."}
	}
	for _, m := range mods {
		t.Run(FileName(m), func(t *testing.T) {
			report, err := Check(root, []string{m}, false)
			if err != nil {
				t.Fatal(err)
			}
			if report != "" {
				t.Error(report)
			}
		})
	}
	t.Run("no file without a module", func(t *testing.T) {
		if !workspace {
			t.Skip("GOWORK=off: the nested modules are not checked")
		}
		existing, err := Existing(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range existing {
			if !slices.ContainsFunc(mods, func(m string) bool { return FileName(m) == n }) {
				t.Errorf("%s is the API file of no published module: remove it (%s does)", n, UpdateCommand)
			}
		}
	})
}

// statSources stats every Go source and go.mod file under root, so that go
// test's result cache, which records the files a test opens or stats (not
// those the go command it runs reads), is invalidated by any change to the
// code whose API the test checks.
func statSources(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".go") || d.Name() == "go.mod" || d.Name() == "go.work") {
			_, err := os.Stat(p)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fixture is a small repository: a module with a published package, a
// published subpackage, an internal package, a command and an example, and
// a nested module.
var fixture = map[string]string{
	"go.mod": "module example.com/fixture\n\ngo 1.22\n",
	"fixture.go": `// Package fixture is the apicheck test's fixture.
package fixture

import (
	"fmt"
	"io"
)

// MaxSize is a typed constant, Name an untyped one.
const (
	MaxSize int64 = 1 << 20
	Name          = "fixture"
	hidden        = 1
)

// ErrGone is a variable.
var ErrGone = fmt.Errorf("gone")

// Keep stays.
func Keep(b []byte, opts ...string) (*Box[int], error) { return nil, nil }

// Gone is removed by a case.
func Gone(r rune) {}

func unexported() {}

// Box is a generic struct with an embedded type.
type Box[T any] struct {
	Inner
	Value T
	Count int
	note  string
}

// Inner's methods are promoted into Box.
type Inner struct{}

// Size is a value method.
func (Inner) Size() int { return 0 }

// Put is a pointer method.
func (b *Box[T]) Put(v T) { b.Value = v }

func (b *Box[T]) reset() {}

// Sealed cannot be implemented outside the package.
type Sealed interface {
	io.Reader
	Kind() string
	seal()
}

// Number is a constraint.
type Number interface{ ~int | ~float64 }

// Alias is an alias.
type Alias = Inner

// Level is a named integer.
type Level uint8

// String is a method of a named integer.
func (l Level) String() string { return "" }
`,
	"sub/sub.go": `// Package sub is a published subpackage.
package sub

// Handler is a func type.
type Handler func(ch <-chan int, m map[string][]byte) error
`,
	"internal/hidden/hidden.go": "// Package hidden is internal.\npackage hidden\n\n// Internal is not published.\nfunc Internal() {}\n",
	"cmd/tool/main.go":          "// Command tool is a command.\npackage main\n\nfunc main() {}\n",
	"examples/demo/demo.go":     "// Package demo is an example.\npackage demo\n\n// Demo is not published.\nfunc Demo() {}\n",
	"nested/go.mod":             "module example.com/fixture/nested\n\ngo 1.22\n",
	"nested/nested.go":          "// Package nested is a nested module.\npackage nested\n\n// V is a variable.\nvar V []int\n",
}

// writeTree writes files under a new temporary directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestFixtureAPIFile pins the format of the API lines on the fixture: every
// kind of identifier, and which packages and modules are published.
func TestFixtureAPIFile(t *testing.T) {
	t.Setenv("GOWORK", "off") // the fixture is outside the repository's workspace
	dir := writeTree(t, fixture)
	mods, err := Modules(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := Generate(dir, mods)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"api/ctoken.txt": `pkg example.com/fixture, const MaxSize = 1048576
pkg example.com/fixture, const MaxSize int64
pkg example.com/fixture, const Name = "fixture"
pkg example.com/fixture, const Name untyped string
pkg example.com/fixture, func Gone(int32)
pkg example.com/fixture, func Keep([]uint8, ...string) (*Box[int], error)
pkg example.com/fixture, method (*Box[T]) Put(T)
pkg example.com/fixture, method (Box[T]) Size() int
pkg example.com/fixture, method (Inner) Size() int
pkg example.com/fixture, method (Level) String() string
pkg example.com/fixture, type Alias = Inner
pkg example.com/fixture, type Box[T any] struct
pkg example.com/fixture, type Box[T any] struct, Count int
pkg example.com/fixture, type Box[T any] struct, Value T
pkg example.com/fixture, type Box[T any] struct, embedded Inner
pkg example.com/fixture, type Inner struct
pkg example.com/fixture, type Level uint8
pkg example.com/fixture, type Number interface { type set ~int | ~float64 }
pkg example.com/fixture, type Sealed interface { Kind, Read, unexported methods }
pkg example.com/fixture, type Sealed interface, Kind() string
pkg example.com/fixture, type Sealed interface, Read([]uint8) (int, error)
pkg example.com/fixture, var ErrGone error
pkg example.com/fixture/sub, type Handler func(<-chan int, map[string][]uint8) error
`,
		"api/nested.txt": "pkg example.com/fixture/nested, var V []int\n",
	}
	for name, text := range want {
		if got := string(files[name]); got != text {
			t.Errorf("%s:\n%s\nwant:\n%s", name, got, text)
		}
	}
	for name := range files {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected file %s:\n%s", name, files[name])
		}
	}
}

// TestCheckNamesTheChange shows that the check works: in a copy of the
// fixture whose API files are up to date, each case changes the code (or
// the files) and Check must name exactly the added and removed lines, and
// say how to update the files and that the change needs review.
func TestCheckNamesTheChange(t *testing.T) {
	t.Setenv("GOWORK", "off") // the fixture is outside the repository's workspace
	const p = "pkg example.com/fixture, "
	cases := []struct {
		name             string
		edit             map[string]string // file → new content ("" removes it)
		added, removed   []string
		file             string // the file the report names, when not api/ctoken.txt
		wantNoDifference bool
	}{
		{
			name:  "planted func",
			edit:  map[string]string{"planted.go": "package fixture\n\n// Planted is new.\nfunc Planted() int { return 0 }\n"},
			added: []string{p + "func Planted() int"},
		},
		{
			name:  "planted method",
			edit:  map[string]string{"planted.go": "package fixture\n\n// Planted is new.\nfunc (*Inner) Planted(s string) {}\n"},
			added: []string{p + "method (*Box[T]) Planted(string)", p + "method (*Inner) Planted(string)"},
		},
		{
			name:    "removed func",
			edit:    map[string]string{"fixture.go": strings.Replace(fixture["fixture.go"], "func Gone(r rune) {}", "", 1)},
			removed: []string{p + "func Gone(int32)"},
		},
		{
			name:    "changed signature",
			edit:    map[string]string{"fixture.go": strings.Replace(fixture["fixture.go"], "func Gone(r rune) {}", "func Gone(r rune) error { return nil }", 1)},
			added:   []string{p + "func Gone(int32) error"},
			removed: []string{p + "func Gone(int32)"},
		},
		{
			name:    "changed constant value",
			edit:    map[string]string{"fixture.go": strings.Replace(fixture["fixture.go"], "1 << 20", "1 << 21", 1)},
			added:   []string{p + "const MaxSize = 2097152"},
			removed: []string{p + "const MaxSize = 1048576"},
		},
		{
			name:  "planted field",
			edit:  map[string]string{"fixture.go": strings.Replace(fixture["fixture.go"], "\tnote  string", "\tNote  string", 1)},
			added: []string{p + "type Box[T any] struct, Note string"},
		},
		{
			name:  "planted in a nested module",
			edit:  map[string]string{"nested/more.go": "package nested\n\n// W is new.\nvar W bool\n"},
			added: []string{"pkg example.com/fixture/nested, var W bool"},
			file:  "api/nested.txt",
		},
		{
			name:    "stale file of no module",
			edit:    map[string]string{"api/gone.txt": "pkg example.com/gone, func F()\n"},
			removed: []string{"pkg example.com/gone, func F()"},
			file:    "api/gone.txt",
		},
		{
			name:             "renamed parameter",
			edit:             map[string]string{"fixture.go": strings.Replace(fixture["fixture.go"], "func Gone(r rune)", "func Gone(ch rune)", 1)},
			wantNoDifference: true,
		},
		{
			name:             "planted unexported func",
			edit:             map[string]string{"planted.go": "package fixture\n\nfunc planted() {}\n"},
			wantNoDifference: true,
		},
		{
			name:             "planted in an internal package",
			edit:             map[string]string{"internal/hidden/more.go": "package hidden\n\n// Planted is internal.\nfunc Planted() {}\n"},
			wantNoDifference: true,
		},
		{
			name:             "planted in a command and an example",
			edit:             map[string]string{"cmd/tool/more.go": "package main\n\n// Planted is in a command.\nfunc Planted() {}\n", "examples/demo/more.go": "package demo\n\n// Planted is in an example.\nfunc Planted() {}\n"},
			wantNoDifference: true,
		},
	}
	base := writeTree(t, fixture)
	mods, err := Modules(base)
	if err != nil {
		t.Fatal(err)
	}
	files, err := Generate(base, mods)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tree := map[string]string{}
			for n, text := range fixture {
				tree[n] = text
			}
			for n, text := range files {
				tree[n] = string(text)
			}
			for n, text := range tc.edit {
				if text == "" {
					delete(tree, n)
				} else {
					tree[n] = text
				}
			}
			dir := writeTree(t, tree)
			report, err := Check(dir, mods, true)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantNoDifference {
				if report != "" {
					t.Fatalf("want no difference, got:\n%s", report)
				}
				return
			}
			var added, removed []string
			for _, line := range strings.Split(report, "\n") {
				if l, ok := strings.CutPrefix(line, "\tadded: "); ok {
					added = append(added, l)
				}
				if l, ok := strings.CutPrefix(line, "\tremoved: "); ok {
					removed = append(removed, l)
				}
			}
			if !slices.Equal(added, tc.added) || !slices.Equal(removed, tc.removed) {
				t.Errorf("added %q, removed %q; want added %q, removed %q; report:\n%s", added, removed, tc.added, tc.removed, report)
			}
			file := tc.file
			if file == "" {
				file = "api/ctoken.txt"
			}
			for _, want := range []string{file + ": the exported API differs", UpdateCommand, "RELEASING.md", "needs review"} {
				if !strings.Contains(report, want) {
					t.Errorf("the report does not say %q:\n%s", want, report)
				}
			}

			// The update command's work: after Write, the check passes and
			// a stale file is gone.
			regenerated, err := Generate(dir, mods)
			if err != nil {
				t.Fatal(err)
			}
			if err := Write(dir, regenerated); err != nil {
				t.Fatal(err)
			}
			if report, err := Check(dir, mods, true); err != nil || report != "" {
				t.Fatalf("after Write: %q, %v", report, err)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		want, got            []string
		wantAdded, wantRemov []string
	}{
		{"same", []string{"a", "b"}, []string{"b", "a"}, nil, nil},
		{"added", []string{"a"}, []string{"a", "c", "b"}, []string{"b", "c"}, nil},
		{"removed", []string{"a", "b"}, nil, nil, []string{"a", "b"}},
		{"both", []string{"a", "b"}, []string{"b", "c"}, []string{"c"}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			added, removed := Diff(tc.want, tc.got)
			if !slices.Equal(added, tc.wantAdded) || !slices.Equal(removed, tc.wantRemov) {
				t.Errorf("Diff = %q, %q; want %q, %q", added, removed, tc.wantAdded, tc.wantRemov)
			}
		})
	}
}

func TestPublished(t *testing.T) {
	const mod = "github.com/ctoken/ctoken"
	for _, tc := range []struct {
		pkg, name string
		want      bool
	}{
		{mod, "ctoken", true},
		{mod + "/webhook", "webhook", true},
		{mod + "/observe/observetest", "observetest", true},
		{mod + "/internal/jcs", "jcs", false},
		{mod + "/protopage/internal/shelf", "shelf", false},
		{mod + "/cmd/ctoken", "main", false},
		{mod + "/examples/quickstart", "main", false},
		{mod + "/protopage/examples/librarypb", "librarypb", false},
		{mod + "/mcp/examples/server", "server", false},
	} {
		t.Run(tc.pkg, func(t *testing.T) {
			if got := Published(mod, tc.pkg, tc.name); got != tc.want {
				t.Errorf("Published(%s) = %v, want %v", tc.pkg, got, tc.want)
			}
		})
	}
}
