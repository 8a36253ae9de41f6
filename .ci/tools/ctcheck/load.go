package ctcheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

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
