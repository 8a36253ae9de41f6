// Package ctcheck finds comparisons of secret-derived bytes (MACs, tags,
// signatures, bind tags, digests, fingerprints) that are not constant time.
//
// A unit test cannot observe timing, so replacing [crypto/hmac.Equal] with
// [bytes.Equal] at a MAC check passes every functional test. ctcheck is the
// test that notices: [CheckTree] scans every non-test .go file of every
// module under a directory and reports each variable-time comparison of an
// operand it marks as secret-derived.
//
// # What is a comparison
//
// A call to bytes.Equal, bytes.Compare, bytes.EqualFold, strings.Compare,
// strings.EqualFold, slices.Equal, slices.Compare or reflect.DeepEqual, and
// the == and != operators (so string(x) == string(y) too). Constant-time
// comparisons (hmac.Equal, subtle.ConstantTimeCompare) are never reported.
// An == or != is not reported when either operand is nil, a literal (""
// included), an empty composite literal (a zero-value check) or a len or cap
// call, nor when the type checker knows both operands and neither is a
// string, an array, a struct or an interface (integers, booleans, pointers
// and enums leak nothing about a tag's bytes).
//
// # What is secret-derived
//
// An operand is secret-derived when, looking through parentheses, indexing,
// slicing, dereference, address-of and conversions:
//   - an identifier or field name contains, as a camelCase or snake_case
//     word, one of mac, hmac, tag, sig, signature, bind, bound, digest, sum,
//     fingerprint, fp or secret, plurals included (sig, expectedMAC,
//     bind_tag), unless its last word names a size or metadata (macSize,
//     mac.Size, tagLen, sigHeader, signaturePrefix);
//   - a called function's name does (sha256MAC(k, body), h.Sum(nil)), or an
//     encoder or decoder (a name starting with Encode, Decode, Append, To,
//     Trim or Sprint) is applied to a secret-derived argument;
//   - its type is a named type, or is declared with a type expression, that
//     mentions such a word (Fingerprint, [mac.Size]byte, [bindTagLen]byte);
//   - it is a local variable defined or assigned from a secret-derived
//     expression, or ranging over one (want := standardMAC(...);
//     for _, got := range sigs).
//
// # What it does not see
//
// It is a heuristic over one file at a time: a secret that flows through a
// struct field, a function result or a parameter whose names and types carry
// none of the words, a comparison hidden in a helper function, or a switch
// statement on a secret is not reported. Keep MACs in variables named after
// what they are, and compare them where they are computed.
//
// # Opting out
//
// A comparison that is reviewed and safe carries a line comment
// "//ctcheck:ok <reason>" on its line or the line above. A marker without a
// reason does not suppress the finding.
package ctcheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/printer"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode"
)

// secretWords are the identifier words that mark an operand as
// secret-derived. Matching is per word and case-insensitive: "sig" matches
// sig, gotSig and sig_hex but not signal or design. Read-only.
var secretWords = []string{
	"mac", "macs", "hmac", "tag", "tags", "sig", "sigs", "signature",
	"signatures", "bind", "bound", "digest", "digests", "sum", "sums",
	"fingerprint", "fp", "secret", "secrets",
}

// notBytes, as an identifier's last word, mark a length or a piece of
// protocol metadata (a header name, a prefix, a version), never the secret
// bytes themselves: sigHeader, macSize, tagLen, signaturePrefix.
var notBytes = map[string]bool{
	"size": true, "len": true, "length": true, "count": true, "n": true,
	"header": true, "name": true, "prefix": true, "label": true,
	"version": true, "mode": true, "kind": true, "scheme": true, "format": true,
}

// variableTime are the comparison functions that return early, by import
// path and name.
var variableTime = map[string]map[string]bool{
	"bytes":   {"Equal": true, "Compare": true, "EqualFold": true},
	"strings": {"Compare": true, "EqualFold": true},
	"slices":  {"Equal": true, "Compare": true},
	"reflect": {"DeepEqual": true},
}

// Finding is one variable-time comparison of a secret-derived operand.
type Finding struct {
	Pos     token.Position // where the comparison is
	Expr    string         // the comparison as written
	Operand string         // the operand judged secret-derived
}

// String formats f as "file:line:col: comparison compares secret-derived
// operand in variable time" with the fix.
func (f Finding) String() string {
	return fmt.Sprintf("%s: %s compares secret-derived %s in variable time; use hmac.Equal or subtle.ConstantTimeCompare", f.Pos, f.Expr, f.Operand)
}

// CheckSource checks one file's source, type-checked on its own against the
// standard library (imports outside it are left unresolved). It is the
// entry point for table tests on snippets.
func CheckSource(filename, src string) ([]Finding, error) {
	return new(Checker).Source(filename, src)
}

// Source checks one file's source, type-checked on its own against the
// standard library (imports outside it are left unresolved).
func (c *Checker) Source(filename, src string) ([]Finding, error) {
	c.init()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var imports []string
	for _, is := range f.Imports {
		imports = append(imports, strings.Trim(is.Path.Value, `"`))
	}
	if err := c.prefetch(imports); err != nil {
		return nil, err
	}
	imp := newImporter(nil)
	imp.std = c.std
	return checkFile(fset, f, typeCheck(fset, "snippet", []*ast.File{f}, imp)), nil
}

func (c *Checker) init() {
	if c.std == nil {
		c.exports = map[string]string{}
		c.std = importer.ForCompiler(token.NewFileSet(), "gc", c.lookup)
	}
}

// CheckTree checks every non-test .go file of every module (a directory
// holding go.mod) under root with a new [Checker]; see [Checker.Tree].
func CheckTree(root string) ([]Finding, error) {
	return new(Checker).Tree(root)
}

// A Checker checks modules, reusing the standard library's export data
// between calls. The zero value is ready to use; a Checker is not safe for
// concurrent use.
type Checker struct {
	std     types.Importer
	exports map[string]string // standard package path → export data file
}

// Tree checks every non-test .go file of every module (a directory holding
// go.mod) under root, skipping testdata, vendor and directories whose names
// start with "." or "_". Findings come module by module, each sorted by
// position. See [Checker.Module].
func (c *Checker) Tree(root string) ([]Finding, error) {
	var mods []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && skipDir(d.Name()) {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			mods = append(mods, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("ctcheck: no go.mod under %s", root)
	}
	var out []Finding
	for _, m := range mods {
		fs, err := c.Module(m, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	return out, nil
}

// Module checks the non-test .go files of the module in dir (nested
// modules excluded), reading a file's content from overlay when overlay
// has its path (as filepath.Join(dir, ...) spells it), so a test can check
// a mutated file without writing it. Each package is type-checked from
// source; the standard library comes from the toolchain's export data and
// third-party imports are left unresolved, so their types are unknown and
// the rules fall back to names. Findings are sorted by position.
func (c *Checker) Module(dir string, overlay map[string][]byte) ([]Finding, error) {
	c.init()
	out, err := checkModule(dir, c, overlay)
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Pos, out[j].Pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		return a.Offset < b.Offset
	})
	return out, err
}

// Files returns the non-test .go files CheckTree checks under root, for a
// test that the scan is not vacuous.
func Files(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && skipDir(d.Name()) {
			return filepath.SkipDir
		}
		if !d.IsDir() && isSource(d.Name()) {
			files = append(files, p)
		}
		return nil
	})
	return files, err
}

func skipDir(name string) bool {
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

func isSource(name string) bool {
	return strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
}

// module is one module being checked: its packages by import path.
type module struct {
	fset  *token.FileSet
	path  string // module path
	dir   string
	dirs  map[string]string // import path → directory
	files map[string][]*ast.File
	pkgs  map[string]*types.Package
	infos map[string]*typesInfo
	std   types.Importer
}

// lookup opens the export data of a standard package, asking the go
// command for it when [Checker.prefetch] has not.
func (c *Checker) lookup(p string) (io.ReadCloser, error) {
	if _, ok := c.exports[p]; !ok {
		if err := c.prefetch([]string{p}); err != nil {
			return nil, err
		}
	}
	file := c.exports[p]
	if file == "" {
		return nil, fmt.Errorf("ctcheck: no export data for %s", p)
	}
	return os.Open(file)
}

// prefetch asks the go command, once, for the export data of the standard
// packages among paths that it has not asked about yet.
func (c *Checker) prefetch(paths []string) error {
	var want []string
	for _, p := range paths {
		if _, ok := c.exports[p]; !ok && isStd(p) && p != "C" && p != "unsafe" {
			want = append(want, p)
			c.exports[p] = ""
		}
	}
	if len(want) == 0 {
		return nil
	}
	sort.Strings(want)
	cmd := exec.Command("go", append([]string{"list", "-e", "-export", "-f", "{{.ImportPath}}\t{{.Export}}"}, want...)...)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("ctcheck: go list -export: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if ip, file, ok := strings.Cut(line, "\t"); ok {
			c.exports[ip] = file
		}
	}
	return nil
}

func checkModule(dir string, c *Checker, overlay map[string][]byte) ([]Finding, error) {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return nil, err
	}
	modPath := modulePath(gomod)
	if modPath == "" {
		return nil, fmt.Errorf("ctcheck: %s/go.mod has no module line", dir)
	}
	m := &module{
		fset: token.NewFileSet(), path: modPath, dir: dir,
		dirs: map[string]string{}, files: map[string][]*ast.File{},
		pkgs: map[string]*types.Package{}, infos: map[string]*typesInfo{}, std: c.std,
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			if p != dir {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // a nested module, checked on its own
				}
			}
			return nil
		}
		if !isSource(d.Name()) {
			return nil
		}
		var src any
		if b, ok := overlay[p]; ok {
			src = b
		}
		f, err := parser.ParseFile(m.fset, p, src, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, filepath.Dir(p))
		if err != nil {
			return err
		}
		ip := path.Join(modPath, filepath.ToSlash(rel))
		m.dirs[ip] = filepath.Dir(p)
		m.files[ip] = append(m.files[ip], f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	ips := make([]string, 0, len(m.files))
	var imports []string
	for ip, files := range m.files {
		ips = append(ips, ip)
		for _, f := range files {
			for _, is := range f.Imports {
				imports = append(imports, strings.Trim(is.Path.Value, `"`))
			}
		}
	}
	if err := c.prefetch(imports); err != nil {
		return nil, err
	}
	sort.Strings(ips)
	var out []Finding
	for _, ip := range ips {
		m.load(ip, nil)
		for _, f := range m.files[ip] {
			out = append(out, checkFile(m.fset, f, m.infos[ip])...)
		}
	}
	return out, nil
}

// modulePath returns the module path declared in a go.mod file.
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// load type-checks the package ip of the module (once), loading the
// module's packages it imports first. Type errors are tolerated: what is
// unresolved has no type and the checker falls back to names.
func (m *module) load(ip string, loading map[string]bool) *types.Package {
	if p, ok := m.pkgs[ip]; ok {
		return p
	}
	if loading == nil {
		loading = map[string]bool{}
	}
	if loading[ip] {
		return nil // an import cycle: the type checker reports it
	}
	loading[ip] = true
	imp := newImporter(func(path string) *types.Package {
		if _, ok := m.files[path]; ok {
			return m.load(path, loading)
		}
		return nil
	})
	imp.std = m.std
	info := typeCheck(m.fset, ip, m.files[ip], imp)
	m.infos[ip] = info
	m.pkgs[ip] = info.pkg
	return info.pkg
}

// lenientImporter resolves the module's own packages from source, the
// standard library from export data, and anything else to an empty
// package.
type lenientImporter struct {
	local func(path string) *types.Package
	std   types.Importer
	fake  map[string]*types.Package
}

func newImporter(local func(string) *types.Package) *lenientImporter {
	return &lenientImporter{local: local, fake: map[string]*types.Package{}}
}

func (l *lenientImporter) Import(p string) (*types.Package, error) {
	if l.local != nil {
		if pkg := l.local(p); pkg != nil {
			return pkg, nil
		}
	}
	if isStd(p) && l.std != nil {
		if pkg, err := l.std.Import(p); err == nil {
			return pkg, nil
		}
	}
	if pkg, ok := l.fake[p]; ok {
		return pkg, nil
	}
	pkg := types.NewPackage(p, guessName(p))
	pkg.MarkComplete()
	l.fake[p] = pkg
	return pkg, nil
}

func isStd(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return !strings.Contains(first, ".")
}

// guessName guesses a package's name from its import path (last element,
// a /vN suffix and a go- prefix dropped).
func guessName(p string) string {
	el := path.Base(p)
	if len(el) > 1 && el[0] == 'v' && strings.Trim(el[1:], "0123456789") == "" {
		el = path.Base(path.Dir(p))
	}
	el = strings.TrimPrefix(el, "go-")
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '.' {
			return '_'
		}
		return r
	}, el)
}

// typesInfo is what the type checker learned of one package, however
// partial.
type typesInfo struct {
	*types.Info
	pkg *types.Package
}

func typeCheck(fset *token.FileSet, ip string, files []*ast.File, imp types.Importer) *typesInfo {
	info := &types.Info{
		Types: map[ast.Expr]types.TypeAndValue{},
		Defs:  map[*ast.Ident]types.Object{},
		Uses:  map[*ast.Ident]types.Object{},
	}
	conf := types.Config{Importer: imp, Error: func(error) {}, FakeImportC: true}
	pkg, _ := conf.Check(ip, fset, files, info)
	return &typesInfo{Info: info, pkg: pkg}
}

// checker holds one file's state.
type checker struct {
	fset    *token.FileSet
	info    *types.Info
	imports map[string]string // local name → import path
	sources map[types.Object][]source
	okLines map[int]bool
	out     []Finding
}

// source is where a variable's value comes from: an expression (for a
// range value, the ranged expression) or a declared type expression.
type source struct {
	expr     ast.Expr
	typeExpr ast.Expr
}

func checkFile(fset *token.FileSet, f *ast.File, ti *typesInfo) []Finding {
	c := &checker{
		fset: fset, info: ti.Info,
		imports: map[string]string{}, sources: map[types.Object][]source{}, okLines: map[int]bool{},
	}
	for _, is := range f.Imports {
		p := strings.Trim(is.Path.Value, `"`)
		name := guessName(p)
		if is.Name != nil {
			name = is.Name.Name
		}
		c.imports[name] = p
	}
	for _, cg := range f.Comments {
		for _, cm := range cg.List {
			if reason, ok := strings.CutPrefix(cm.Text, "//ctcheck:ok"); ok && strings.TrimSpace(reason) != "" {
				line := fset.Position(cm.Slash).Line
				c.okLines[line] = true
				c.okLines[line+1] = true
			}
		}
	}
	c.collectSources(f)
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			c.checkCall(n)
		case *ast.BinaryExpr:
			if n.Op == token.EQL || n.Op == token.NEQ {
				c.checkEq(n)
			}
		}
		return true
	})
	return c.out
}

// obj returns the object an identifier defines or uses, if known.
func (c *checker) obj(id *ast.Ident) types.Object {
	if o := c.info.Defs[id]; o != nil {
		return o
	}
	return c.info.Uses[id]
}

func (c *checker) addSource(id *ast.Ident, s source) {
	if id == nil || id.Name == "_" {
		return
	}
	if o := c.obj(id); o != nil {
		c.sources[o] = append(c.sources[o], s)
	}
}

// collectSources records, for each variable of the file, the expressions
// it is defined or assigned from and its declared type expression.
func (c *checker) collectSources(f *ast.File) {
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok != token.DEFINE && n.Tok != token.ASSIGN {
				return true
			}
			for i, l := range n.Lhs {
				id, ok := l.(*ast.Ident)
				if !ok {
					continue
				}
				switch {
				case len(n.Lhs) == len(n.Rhs):
					c.addSource(id, source{expr: n.Rhs[i]})
				case len(n.Rhs) == 1:
					c.addSource(id, source{expr: n.Rhs[0]})
				}
			}
		case *ast.RangeStmt:
			if id, ok := n.Value.(*ast.Ident); ok {
				c.addSource(id, source{expr: n.X})
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				s := source{typeExpr: n.Type}
				if len(n.Values) == len(n.Names) {
					s.expr = n.Values[i]
				} else if len(n.Values) == 1 {
					s.expr = n.Values[0]
				}
				c.addSource(id, s)
			}
		case *ast.Field:
			for _, id := range n.Names {
				c.addSource(id, source{typeExpr: n.Type})
			}
		}
		return true
	})
}

// callee returns the import path and name of a package-level function
// call, or "" and the method or function name.
func (c *checker) callee(call *ast.CallExpr) (pkg, name string) {
	switch fn := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		return "", fn.Name
	case *ast.SelectorExpr:
		if x, ok := fn.X.(*ast.Ident); ok {
			if o := c.info.Uses[x]; o != nil {
				if pn, ok := o.(*types.PkgName); ok {
					return pn.Imported().Path(), fn.Sel.Name
				}
			} else if p, ok := c.imports[x.Name]; ok {
				return p, fn.Sel.Name
			} else if c.info.Defs[x] == nil && variableTime[x.Name] != nil {
				return x.Name, fn.Sel.Name // bytes.Equal without its import
			}
		}
		return "", fn.Sel.Name
	}
	return "", ""
}

func (c *checker) checkCall(call *ast.CallExpr) {
	pkg, name := c.callee(call)
	if !variableTime[pkg][name] {
		return
	}
	for _, a := range call.Args {
		if c.secret(a, 0) {
			c.report(call, a)
			return
		}
	}
}

func (c *checker) checkEq(b *ast.BinaryExpr) {
	for _, e := range []ast.Expr{b.X, b.Y} {
		if c.exempt(e) {
			return
		}
	}
	if c.leaksNothing(b.X) && c.leaksNothing(b.Y) {
		return
	}
	for _, e := range []ast.Expr{b.X, b.Y} {
		if c.secret(e, 0) {
			c.report(b, e)
			return
		}
	}
}

// exempt reports whether an == operand makes the comparison safe whatever
// the other operand: nil, a literal, a zero composite literal, len or cap.
func (c *checker) exempt(e ast.Expr) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.BasicLit:
		return true
	case *ast.Ident:
		switch e.Name {
		case "nil", "true", "false":
			o := c.info.Uses[e]
			return o == nil || o.Parent() == types.Universe
		}
	case *ast.CompositeLit:
		return len(e.Elts) == 0
	case *ast.CallExpr:
		if id, ok := ast.Unparen(e.Fun).(*ast.Ident); ok && (id.Name == "len" || id.Name == "cap") {
			return true
		}
	}
	return false
}

// leaksNothing reports whether e's type is known and is neither a string,
// an array, a struct nor an interface.
func (c *checker) leaksNothing(e ast.Expr) bool {
	tv, ok := c.info.Types[e]
	if !ok || tv.Type == nil {
		return false
	}
	switch u := tv.Type.Underlying().(type) {
	case *types.Basic:
		return u.Kind() != types.Invalid && u.Info()&types.IsString == 0
	case *types.Array, *types.Struct, *types.Interface:
		return false
	default:
		return true
	}
}

const maxDepth = 8

// secret reports whether e is secret-derived (see the package doc).
func (c *checker) secret(e ast.Expr, depth int) bool {
	if depth > maxDepth || e == nil {
		return false
	}
	if tv, ok := c.info.Types[e]; ok && tv.Type != nil && secretType(tv.Type) {
		return true
	}
	switch e := e.(type) {
	case *ast.ParenExpr:
		return c.secret(e.X, depth+1)
	case *ast.Ident:
		if secretName(e.Name) {
			return true
		}
		if o := c.obj(e); o != nil {
			for _, s := range c.sources[o] {
				if s.typeExpr != nil && mentionsSecret(s.typeExpr) {
					return true
				}
				if s.expr != nil && c.secret(s.expr, depth+1) {
					return true
				}
			}
		}
	case *ast.SelectorExpr:
		return secretName(e.Sel.Name)
	case *ast.IndexExpr:
		return c.secret(e.X, depth+1)
	case *ast.SliceExpr:
		return c.secret(e.X, depth+1)
	case *ast.StarExpr:
		return c.secret(e.X, depth+1)
	case *ast.UnaryExpr:
		return c.secret(e.X, depth+1)
	case *ast.TypeAssertExpr:
		return c.secret(e.X, depth+1)
	case *ast.CallExpr:
		if c.isConversion(e) {
			return len(e.Args) == 1 && c.secret(e.Args[0], depth+1)
		}
		_, name := c.callee(e)
		if name == "len" || name == "cap" {
			return false
		}
		if secretName(name) {
			return true
		}
		if transforms(name) {
			for _, a := range e.Args {
				if c.secret(a, depth+1) {
					return true
				}
			}
		}
	}
	return false
}

func (c *checker) isConversion(call *ast.CallExpr) bool {
	if tv, ok := c.info.Types[call.Fun]; ok {
		return tv.IsType()
	}
	switch fn := ast.Unparen(call.Fun).(type) {
	case *ast.ArrayType:
		return true
	case *ast.Ident:
		return fn.Name == "string"
	}
	return false
}

// transforms reports whether a function named name passes its argument's
// bytes through (an encoder, decoder or formatter).
func transforms(name string) bool {
	for _, p := range []string{"Encode", "Decode", "Append", "To", "Trim", "Sprint", "encode", "decode", "append"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// secretType reports whether t is a named type, or a pointer to one, whose
// name contains a secret word.
func secretType(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := t.(*types.Named); ok {
		return hasSecretWord(n.Obj().Name())
	}
	return false
}

// mentionsSecret reports whether a type expression names a secret word
// anywhere ([mac.Size]byte, [bindTagLen]byte, *Fingerprint).
func mentionsSecret(t ast.Expr) bool {
	found := false
	ast.Inspect(t, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && hasSecretWord(id.Name) {
			found = true
		}
		return !found
	})
	return found
}

// secretName reports whether an identifier names secret-derived bytes: it
// has a secret word and its last word is not a size or metadata.
func secretName(name string) bool {
	w := words(name)
	if len(w) == 0 || notBytes[w[len(w)-1]] {
		return false
	}
	return anySecret(w)
}

func hasSecretWord(name string) bool { return anySecret(words(name)) }

func anySecret(ws []string) bool {
	for _, w := range ws {
		if slices.Contains(secretWords, w) {
			return true
		}
	}
	return false
}

// words splits an identifier into lower-case words at underscores, digits
// and case changes: "sha256MAC" → sha, mac; "bindTagLen" → bind, tag, len;
// "HMACKey" → hmac, key.
func words(name string) []string {
	var out []string
	rs := []rune(name)
	start := -1
	flush := func(end int) {
		if start >= 0 && end > start {
			out = append(out, strings.ToLower(string(rs[start:end])))
		}
		start = -1
	}
	for i, r := range rs {
		switch {
		case !unicode.IsLetter(r):
			flush(i)
		case start < 0:
			start = i
		case unicode.IsUpper(r):
			prevLower := unicode.IsLower(rs[i-1])
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if prevLower || (unicode.IsUpper(rs[i-1]) && nextLower) {
				flush(i)
				start = i
			}
		}
	}
	flush(len(rs))
	return out
}

func (c *checker) report(cmp ast.Node, operand ast.Expr) {
	pos := c.fset.Position(cmp.Pos())
	if c.okLines[pos.Line] {
		return
	}
	c.out = append(c.out, Finding{Pos: pos, Expr: c.text(cmp), Operand: c.text(operand)})
}

func (c *checker) text(n ast.Node) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, c.fset, n); err != nil {
		return fmt.Sprintf("%T", n)
	}
	return b.String()
}
