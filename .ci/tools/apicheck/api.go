package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// APIDir is the directory, relative to the repository root, that holds the
// checked-in API files.
const APIDir = "api"

// Modules returns the directories (slash-separated, relative to root, "."
// for root itself) of the published modules under root: every directory
// holding a go.mod, skipping testdata, vendor, directories whose names
// start with "." or "_" (so .ci) and any path with an element named bench,
// examples or drivertest (a test-only module). The result is sorted.
func Modules(root string) ([]string, error) {
	var mods []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root {
			n := d.Name()
			if n == "testdata" || n == "vendor" || n == "bench" || n == "examples" || n == "drivertest" ||
				strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
				return filepath.SkipDir
			}
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			mods = append(mods, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("apicheck: no go.mod under %s", root)
	}
	sort.Strings(mods)
	return mods, nil
}

// FileName returns the API file of the module in dir (as [Modules] spells
// it), relative to the repository root: api/ctoken.txt for the root module
// and api/<dir>.txt for a nested one (api/protopage/grpcpage.txt).
func FileName(dir string) string {
	if dir == "." {
		return APIDir + "/ctoken.txt"
	}
	return APIDir + "/" + dir + ".txt"
}

// Published reports whether the package with import path pkg, in the
// module with path mod, is published API: not the main package, and no
// element of its path below the module is internal, testdata, examples,
// cmd or bench.
func Published(mod, pkg, name string) bool {
	if name == "main" {
		return false
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, mod), "/")
	if rel == "" {
		return true
	}
	for _, e := range strings.Split(rel, "/") {
		switch e {
		case "internal", "testdata", "examples", "cmd", "bench":
			return false
		}
	}
	return true
}

// listed is one package as go list -json reports it.
type listed struct {
	ImportPath string
	Name       string
	Export     string
	Standard   bool
	DepOnly    bool
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// Package is one published package, type-checked.
type Package struct {
	Path  string
	Types *types.Package
}

// Load returns the published packages of the module in dir (an absolute
// path or relative to the working directory), sorted by import path. The
// go command lists and compiles the module's packages in the module itself
// (so in the workspace of the repository's go.work, unless GOWORK says
// otherwise), and each package's types come from its export data.
func Load(dir string) ([]Package, error) {
	cmd := exec.Command("go", "list", "-e", "-export", "-deps",
		"-json=ImportPath,Name,Export,Standard,DepOnly,Module,Error", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("apicheck: go list in %s: %v\n%s", dir, err, stderr.Bytes())
	}
	exports := map[string]string{}
	var roots []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("apicheck: go list in %s: %v", dir, err)
		}
		exports[p.ImportPath] = p.Export
		if p.DepOnly || p.Standard {
			continue
		}
		if p.Error != nil {
			return nil, fmt.Errorf("apicheck: %s: %s", p.ImportPath, p.Error.Err)
		}
		if p.Module == nil {
			return nil, fmt.Errorf("apicheck: %s: not in a module", p.ImportPath)
		}
		if Published(p.Module.Path, p.ImportPath, p.Name) {
			roots = append(roots, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(p string) (io.ReadCloser, error) {
		f := exports[p]
		if f == "" {
			return nil, fmt.Errorf("apicheck: no export data for %s", p)
		}
		return os.Open(f)
	})
	sort.Slice(roots, func(i, j int) bool { return roots[i].ImportPath < roots[j].ImportPath })
	var pkgs []Package
	for _, r := range roots {
		tp, err := imp.Import(r.ImportPath)
		if err != nil {
			return nil, fmt.Errorf("apicheck: %s: %v", r.ImportPath, err)
		}
		pkgs = append(pkgs, Package{Path: r.ImportPath, Types: tp})
	}
	return pkgs, nil
}

// ModuleAPI returns the API lines of every published package of the module
// in dir, sorted.
func ModuleAPI(dir string) ([]string, error) {
	pkgs, err := Load(dir)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, p := range pkgs {
		lines = append(lines, PackageAPI(p.Types)...)
	}
	sort.Strings(lines)
	return lines, nil
}

// Generate returns the API file contents of the modules mods (directories
// relative to root, as [Modules] returns them), keyed by [FileName].
func Generate(root string, mods []string) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, m := range mods {
		lines, err := ModuleAPI(filepath.Join(root, filepath.FromSlash(m)))
		if err != nil {
			return nil, err
		}
		files[FileName(m)] = Format(lines)
	}
	return files, nil
}

// Format returns lines as an API file: one line each, newline-terminated.
func Format(lines []string) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Parse returns the lines of an API file, blank lines and lines starting
// with "#" left out.
func Parse(b []byte) []string {
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// Diff returns the lines of got that want lacks (added) and those of want
// that got lacks (removed), each sorted.
func Diff(want, got []string) (added, removed []string) {
	in := func(ls []string) map[string]bool {
		m := make(map[string]bool, len(ls))
		for _, l := range ls {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	for l := range g {
		if !w[l] {
			added = append(added, l)
		}
	}
	for l := range w {
		if !g[l] {
			removed = append(removed, l)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed
}

// Write writes files (keyed by path relative to root) under root and
// removes every other .txt file under root's API directory, so the
// directory holds exactly the files of the modules that exist.
func Write(root string, files map[string][]byte) error {
	if err := removeStale(root, files); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(root, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[n], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Existing returns the .txt files under root's API directory, as paths
// relative to root with slashes; none when the directory does not exist.
func Existing(root string) ([]string, error) {
	var names []string
	err := filepath.WalkDir(filepath.Join(root, APIDir), func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == filepath.Join(root, APIDir) {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".txt") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(names)
	return names, err
}

func removeStale(root string, files map[string][]byte) error {
	names, err := Existing(root)
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, ok := files[n]; !ok {
			if err := os.Remove(filepath.Join(root, filepath.FromSlash(n))); err != nil {
				return err
			}
		}
	}
	return nil
}

// PackageAPI returns the API lines of pkg, one per exported identifier (and
// per exported field, method and interface method), each starting
// "pkg <import path>, ". The lines are sorted.
func PackageAPI(pkg *types.Package) []string {
	w := &writer{pkg: pkg}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			w.emit("const %s = %s", name, obj.Val().ExactString())
			w.emit("const %s %s", name, w.typ(obj.Type()))
		case *types.Var:
			w.emit("var %s %s", name, w.typ(obj.Type()))
		case *types.Func:
			sig := obj.Type().(*types.Signature)
			w.emit("func %s%s%s", name, w.typeParams(sig.TypeParams()), w.signature(sig))
		case *types.TypeName:
			w.typeName(obj)
		}
	}
	sort.Strings(w.lines)
	return w.lines
}

// writer writes the API lines of one package.
type writer struct {
	pkg   *types.Package
	lines []string
}

func (w *writer) emit(format string, args ...any) {
	w.lines = append(w.lines, "pkg "+w.pkg.Path()+", "+fmt.Sprintf(format, args...))
}

// typeName emits the lines of an exported type: its declaration, its
// exported fields or interface methods, and the exported methods of its
// method sets (promoted ones included).
func (w *writer) typeName(obj *types.TypeName) {
	name := obj.Name()
	if obj.IsAlias() {
		w.emit("type %s = %s", name, w.typ(obj.Type()))
		return
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		w.emit("type %s %s", name, w.typ(obj.Type()))
		return
	}
	decl := name + w.typeParams(named.TypeParams())
	switch u := named.Underlying().(type) {
	case *types.Struct:
		w.emit("type %s struct", decl)
		for i := 0; i < u.NumFields(); i++ {
			f := u.Field(i)
			switch {
			case f.Embedded():
				w.emit("type %s struct, embedded %s", decl, w.typ(f.Type()))
			case f.Exported():
				w.emit("type %s struct, %s %s", decl, f.Name(), w.typ(f.Type()))
			}
		}
	case *types.Interface:
		var names []string
		unexported := false
		for i := 0; i < u.NumMethods(); i++ {
			m := u.Method(i)
			if !m.Exported() {
				unexported = true
				continue
			}
			names = append(names, m.Name())
			w.emit("type %s interface, %s%s", decl, m.Name(), w.signature(m.Type().(*types.Signature)))
		}
		sort.Strings(names)
		if unexported {
			names = append(names, "unexported methods")
		}
		if u.IsComparable() || !u.IsMethodSet() {
			names = append(names, "type set "+w.typeSet(u))
		}
		if len(names) == 0 {
			w.emit("type %s interface {}", decl)
		} else {
			w.emit("type %s interface { %s }", decl, strings.Join(names, ", "))
		}
		return
	default:
		w.emit("type %s %s", decl, w.typ(u))
	}
	recv := name
	if tp := named.TypeParams(); tp.Len() > 0 {
		var ps []string
		for i := 0; i < tp.Len(); i++ {
			ps = append(ps, tp.At(i).Obj().Name())
		}
		recv += "[" + strings.Join(ps, ", ") + "]"
	}
	value := types.NewMethodSet(named)
	seen := map[string]bool{}
	for i := 0; i < value.Len(); i++ {
		m := value.At(i).Obj()
		seen[m.Name()] = true
		if m.Exported() {
			w.emit("method (%s) %s%s", recv, m.Name(), w.signature(m.Type().(*types.Signature)))
		}
	}
	ptr := types.NewMethodSet(types.NewPointer(named))
	for i := 0; i < ptr.Len(); i++ {
		m := ptr.At(i).Obj()
		if m.Exported() && !seen[m.Name()] {
			w.emit("method (*%s) %s%s", recv, m.Name(), w.signature(m.Type().(*types.Signature)))
		}
	}
}

// typeSet describes the type terms of a constraint interface.
func (w *writer) typeSet(u *types.Interface) string {
	var terms []string
	for i := 0; i < u.NumEmbeddeds(); i++ {
		terms = append(terms, w.typ(u.EmbeddedType(i)))
	}
	if u.IsComparable() && len(terms) == 0 {
		return "comparable"
	}
	return strings.Join(terms, "; ")
}

// typeParams writes a type parameter list, "" when there is none.
func (w *writer) typeParams(tp *types.TypeParamList) string {
	if tp.Len() == 0 {
		return ""
	}
	var ps []string
	for i := 0; i < tp.Len(); i++ {
		p := tp.At(i)
		ps = append(ps, p.Obj().Name()+" "+w.typ(p.Constraint()))
	}
	return "[" + strings.Join(ps, ", ") + "]"
}

// signature writes a signature without the func keyword or parameter
// names: "([]uint8, ...[]uint8) (*Keyring, error)".
func (w *writer) signature(sig *types.Signature) string {
	var b strings.Builder
	b.WriteString(w.tuple(sig.Params(), sig.Variadic()))
	switch r := sig.Results(); r.Len() {
	case 0:
	case 1:
		b.WriteString(" " + w.typ(r.At(0).Type()))
	default:
		b.WriteString(" " + w.tuple(r, false))
	}
	return b.String()
}

func (w *writer) tuple(t *types.Tuple, variadic bool) string {
	var ps []string
	for i := 0; i < t.Len(); i++ {
		typ := t.At(i).Type()
		if variadic && i == t.Len()-1 {
			if s, ok := typ.(*types.Slice); ok {
				ps = append(ps, "..."+w.typ(s.Elem()))
				continue
			}
			ps = append(ps, "..."+w.typ(typ)) // a string for append-like signatures
			continue
		}
		ps = append(ps, w.typ(typ))
	}
	return "(" + strings.Join(ps, ", ") + ")"
}

// typ writes a type as Go spells it, without parameter names, with byte and
// rune as uint8 and int32, aliases resolved (any stays any), the package's
// own names unqualified and other packages' names qualified as
// [writer.qualifier] says.
func (w *writer) typ(t types.Type) string {
	switch t := t.(type) {
	case *types.Alias:
		if t.Obj().Pkg() == nil && t.Obj().Name() == "any" {
			return "any"
		}
		return w.typ(types.Unalias(t))
	case *types.Basic:
		if t.Kind() == types.UnsafePointer {
			return "unsafe.Pointer"
		}
		return types.Typ[t.Kind()].Name()
	case *types.Pointer:
		return "*" + w.typ(t.Elem())
	case *types.Slice:
		return "[]" + w.typ(t.Elem())
	case *types.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), w.typ(t.Elem()))
	case *types.Map:
		return "map[" + w.typ(t.Key()) + "]" + w.typ(t.Elem())
	case *types.Chan:
		elem := w.typ(t.Elem())
		switch t.Dir() {
		case types.SendOnly:
			return "chan<- " + elem
		case types.RecvOnly:
			return "<-chan " + elem
		}
		if c, ok := t.Elem().(*types.Chan); ok && c.Dir() == types.RecvOnly {
			elem = "(" + elem + ")"
		}
		return "chan " + elem
	case *types.Signature:
		return "func" + w.signature(t)
	case *types.Named:
		s := t.Obj().Name()
		if p := t.Obj().Pkg(); p != nil && p.Path() != w.pkg.Path() {
			s = w.qualifier(p) + "." + s
		}
		if args := t.TypeArgs(); args.Len() > 0 {
			var as []string
			for i := 0; i < args.Len(); i++ {
				as = append(as, w.typ(args.At(i)))
			}
			s += "[" + strings.Join(as, ", ") + "]"
		}
		return s
	case *types.TypeParam:
		return t.Obj().Name()
	case *types.Struct:
		if t.NumFields() == 0 {
			return "struct{}"
		}
		var fs []string
		for i := 0; i < t.NumFields(); i++ {
			f := t.Field(i)
			if f.Embedded() {
				fs = append(fs, w.typ(f.Type()))
			} else {
				fs = append(fs, f.Name()+" "+w.typ(f.Type()))
			}
		}
		return "struct{ " + strings.Join(fs, "; ") + " }"
	case *types.Interface:
		if t.NumExplicitMethods() == 0 && t.NumEmbeddeds() == 0 {
			if t.IsComparable() {
				return "comparable"
			}
			return "any"
		}
		var es []string
		for i := 0; i < t.NumEmbeddeds(); i++ {
			es = append(es, w.typ(t.EmbeddedType(i)))
		}
		for i := 0; i < t.NumExplicitMethods(); i++ {
			m := t.ExplicitMethod(i)
			es = append(es, m.Name()+w.signature(m.Type().(*types.Signature)))
		}
		return "interface{ " + strings.Join(es, "; ") + " }"
	case *types.Union:
		var ts []string
		for i := 0; i < t.Len(); i++ {
			term := t.Term(i)
			s := w.typ(term.Type())
			if term.Tilde() {
				s = "~" + s
			}
			ts = append(ts, s)
		}
		return strings.Join(ts, " | ")
	}
	return types.TypeString(t, func(p *types.Package) string {
		if p.Path() == w.pkg.Path() {
			return ""
		}
		return w.qualifier(p)
	})
}

// qualifier names another package in a type: by its name, or by its import
// path when its name is the package's own (a package mcp wrapping another
// package mcp), so that an unqualified name is always the package's own.
func (w *writer) qualifier(p *types.Package) string {
	if p.Name() == w.pkg.Name() {
		return p.Path()
	}
	return p.Name()
}
