package doccheck

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// A Package is one published package of the repository, as [Packages]
// reads it: its package doc, the exported names it declares and the
// Example functions of its tests.
type Package struct {
	Dir  string // relative to the repository root, "." for the root
	Name string // the package clause
	Doc  string // the package doc comment's text, "" when there is none
	// Exported holds the exported top-level names (Name) and the exported
	// methods of exported types (Type.Method); Examples the Example
	// functions of the directory's _test.go files.
	Exported map[string]bool
	Examples map[string]bool
	// ExampleBodies maps each Example that go test runs (in a file built
	// without tags, with an output comment) to its body's source (see
	// [exampleBody]); CompiledBodies each Example of such a file without
	// an output comment, which go test compiles but never runs.
	ExampleBodies  map[string]string
	CompiledBodies map[string]string
}

// skippedDirs are the directory names under which no published package
// lives: tools and CI, generated or demonstration code, internals, and the
// test-only drivertest modules (unpublished, as apicheck and the release
// check treat them).
var skippedDirs = []string{".git", "testdata", "examples", "internal", "cmd", "bench", "node_modules", "vendor", "drivertest"}

// Packages reads every published package under root: each directory with
// non-test Go files whose package is not main, outside directories whose
// name begins with a dot or is one of testdata, examples, internal, cmd,
// bench, node_modules, vendor or drivertest.
func Packages(root string) ([]*Package, error) {
	var out []*Package
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != root && (strings.HasPrefix(d.Name(), ".") || slices.Contains(skippedDirs, d.Name())) {
			return filepath.SkipDir
		}
		pkg, err := readPackage(root, p)
		if err != nil {
			return err
		}
		if pkg != nil {
			out = append(out, pkg)
		}
		return nil
	})
	return out, err
}

// readPackage reads the package in dir, or returns nil when dir holds no
// non-test Go file or a main package.
func readPackage(root, dir string) (*Package, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return nil, err
	}
	pkg := &Package{Dir: filepath.ToSlash(rel), Exported: map[string]bool{}, Examples: map[string]bool{}, ExampleBodies: map[string]string{}, CompiledBodies: map[string]string{}}
	fset := token.NewFileSet()
	sources := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(name, "_test.go") {
			for _, decl := range f.Decls {
				if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Example") && fd.Body != nil {
					pkg.Examples[fd.Name.Name] = true
					from, to := fset.Position(fd.Body.Lbrace).Offset+1, fset.Position(fd.Body.Rbrace).Offset
					body, runs := exampleBody(string(src[from:to]))
					if built, err := build.Default.MatchFile(dir, name); err == nil && built && runs {
						pkg.ExampleBodies[fd.Name.Name] = body
					} else if err == nil && built {
						pkg.CompiledBodies[fd.Name.Name] = body
					}
				}
			}
			continue
		}
		if f.Name.Name == "main" {
			return nil, nil
		}
		sources++
		pkg.Name = f.Name.Name
		if f.Doc != nil {
			if pkg.Doc != "" {
				return nil, fmt.Errorf("%s: a second package doc comment (the first is in another file of %s)", filepath.Join(dir, name), pkg.Dir)
			}
			pkg.Doc = f.Doc.Text()
		}
		addExported(pkg.Exported, f)
	}
	if sources == 0 {
		return nil, nil
	}
	return pkg, nil
}

func addExported(names map[string]bool, f *ast.File) {
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				names[d.Name.Name] = true
				continue
			}
			t := d.Recv.List[0].Type
			if s, ok := t.(*ast.StarExpr); ok {
				t = s.X
			}
			if ix, ok := t.(*ast.IndexExpr); ok {
				t = ix.X
			}
			if ix, ok := t.(*ast.IndexListExpr); ok {
				t = ix.X
			}
			if id, ok := t.(*ast.Ident); ok && id.IsExported() {
				names[id.Name+"."+d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						names[s.Name.Name] = true
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
}

// docLink matches a doc link: [Name], [Name.Method], [pkg.Name] or
// [pkg.Name.Method], not followed by "(" or ":" (a Markdown-style link or
// a link definition is not a doc link).
var docLink = regexp.MustCompile(`\[([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,2})\]([^(:]|$)`)

// exampleName matches the name of an Example function of a package:
// ExampleName, Example_suffix, ExampleName_Method_suffix. The bare word
// "Example" is English, not a name.
var exampleName = regexp.MustCompile(`\bExample[A-Z_][A-Za-z0-9_]*`)

// RouteProblems returns what is wrong with pkg's package doc, judged by the
// rule the repository keeps for every published package:
//
//  1. the doc exists;
//  2. its first paragraph (what the package is for, and where to start)
//     holds a doc link that resolves: a name pkg declares ([Name],
//     [Type.Method]) or one another package of byName declares
//     ([pkg.Name], [pkg.Type.Method]);
//  3. the doc names at least one Example function of pkg's tests (its
//     happy path, compiled and run by go test), and every Example it names
//     exists.
//
// byName maps package names to the packages of the repository.
func RouteProblems(pkg *Package, byName map[string]*Package) []string {
	if strings.TrimSpace(pkg.Doc) == "" {
		return []string{"no package doc comment"}
	}
	var problems []string
	first, _, _ := strings.Cut(strings.TrimSpace(pkg.Doc), "\n\n")
	routed := false
	for _, m := range docLink.FindAllStringSubmatch(first, -1) {
		if resolves(m[1], pkg, byName) {
			routed = true
			break
		}
	}
	if !routed {
		problems = append(problems, "the first paragraph links no name the package (or another of the repository) declares: say which type or function most users start with, as a [Name] doc link")
	}
	named := exampleName.FindAllString(pkg.Doc, -1)
	slices.Sort(named)
	named = slices.Compact(named)
	if len(named) == 0 {
		problems = append(problems, "the doc names no Example function: link its happy path by the Example's name")
	}
	for _, n := range named {
		if !pkg.Examples[n] {
			problems = append(problems, fmt.Sprintf("the doc names %s, which no _test.go of the package declares", n))
		}
	}
	return problems
}

func resolves(link string, pkg *Package, byName map[string]*Package) bool {
	if pkg.Exported[link] {
		return true
	}
	qual, rest, ok := strings.Cut(link, ".")
	if !ok {
		return false
	}
	other, ok := byName[qual]
	return ok && other.Exported[rest]
}
