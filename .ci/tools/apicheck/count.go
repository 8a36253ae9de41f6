package main

import (
	"fmt"
	"go/types"
	"os"
	"path/filepath"
	"strings"
)

// Counts are a package's exported identifiers, counted for review: a root
// package that grows is a cost every user pays to read.
type Counts struct {
	Funcs, Types, Methods int
	// Plumbing counts the methods that only implement a standard interface
	// (see [plumbing]): a reader skips them.
	Plumbing     int
	Consts, Vars int
	// PlumbingNames are the methods Plumbing counts, as Type.Method.
	PlumbingNames []string
}

// plumbing lists the methods that only implement a standard interface, by
// name and signature as [writer.signature] spells it: fmt.Formatter,
// slog.LogValuer, json.Marshaler, fmt.Stringer, fmt.GoStringer and error.
var plumbing = map[string]string{
	"Format":      "(fmt.State, int32)",
	"LogValue":    "() slog.Value",
	"MarshalJSON": "() ([]uint8, error)",
	"String":      "() string",
	"GoString":    "() string",
	"Error":       "() string",
}

// Count counts the exported identifiers of pkg: package-level funcs, types
// (aliases included) and the methods declared on its exported types
// (promoted methods and interface methods not counted), consts and vars.
func Count(pkg *types.Package) Counts {
	var c Counts
	w := &writer{pkg: pkg}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			c.Consts++
		case *types.Var:
			c.Vars++
		case *types.Func:
			c.Funcs++
		case *types.TypeName:
			c.Types++
			named, ok := obj.Type().(*types.Named)
			if obj.IsAlias() || !ok {
				continue
			}
			if _, ok := named.Underlying().(*types.Interface); ok {
				continue
			}
			for i := 0; i < named.NumMethods(); i++ {
				m := named.Method(i)
				if !m.Exported() {
					continue
				}
				c.Methods++
				if sig, ok := plumbing[m.Name()]; ok && w.signature(m.Type().(*types.Signature)) == sig {
					c.Plumbing++
					c.PlumbingNames = append(c.PlumbingNames, name+"."+m.Name())
				}
			}
		}
	}
	return c
}

// String reports the counts on a few lines.
func (c Counts) String() string {
	all := c.Funcs + c.Types + c.Methods
	return fmt.Sprintf("funcs + types + methods: %d + %d + %d = %d\n"+
		"without the %d methods that only implement fmt.Formatter, slog.LogValuer, json.Marshaler, fmt.Stringer, fmt.GoStringer or error: %d + %d + %d = %d\n"+
		"  (%s)\n"+
		"consts: %d\nvars: %d\n",
		c.Funcs, c.Types, c.Methods, all,
		c.Plumbing, c.Funcs, c.Types, c.Methods-c.Plumbing, all-c.Plumbing,
		strings.Join(c.PlumbingNames, ", "),
		c.Consts, c.Vars)
}

// printCounts prints the counts of the packages with the import paths
// paths, each found in the published module whose path is its longest
// prefix.
func printCounts(root string, mods []string, paths []string) error {
	loaded := map[string][]Package{}
	for _, ip := range paths {
		dir, err := moduleOf(root, mods, ip)
		if err != nil {
			return err
		}
		if _, ok := loaded[dir]; !ok {
			pkgs, err := Load(filepath.Join(root, filepath.FromSlash(dir)))
			if err != nil {
				return err
			}
			loaded[dir] = pkgs
		}
		found := false
		for _, p := range loaded[dir] {
			if p.Path == ip {
				fmt.Printf("%s\n%s", ip, Count(p.Types))
				found = true
			}
		}
		if !found {
			return fmt.Errorf("apicheck: %s is not a published package", ip)
		}
	}
	return nil
}

// moduleOf returns the directory of the published module holding the
// package with import path ip: the one whose module path is ip's longest
// prefix.
func moduleOf(root string, mods []string, ip string) (string, error) {
	best, bestLen := "", -1
	for _, m := range mods {
		mp, err := readModulePath(filepath.Join(root, filepath.FromSlash(m)))
		if err != nil {
			return "", err
		}
		if (ip == mp || strings.HasPrefix(ip, mp+"/")) && len(mp) > bestLen {
			best, bestLen = m, len(mp)
		}
	}
	if bestLen < 0 {
		return "", fmt.Errorf("apicheck: no published module under %s holds %s", root, ip)
	}
	return best, nil
}

// readModulePath returns the module path the go.mod in dir declares.
func readModulePath(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), nil
		}
	}
	return "", fmt.Errorf("apicheck: %s/go.mod has no module line", dir)
}
