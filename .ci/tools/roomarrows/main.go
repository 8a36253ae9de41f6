// Command roomarrows counts the arrows between the files of one Go
// package (a "room"), the arrows that run back up, and the stays of a
// path from one function, as issue 92 asks for redisstore:
//
//	cd .ci/tools && go run ./roomarrows -dir ../../redisstore -from Store.Claim
//
// It type-checks the package's non-test files (its imports from export
// data, as apicheck does) and reads, for every package-level declaration
// (a function, a method, a type, a var or const spec), which other
// package-level declarations, methods and struct fields of the package it
// names. Then:
//
//   - arrow: a file naming something declared in another file of the
//     package; each ordered pair of files counts once.
//   - back up: an arrow from a file to one earlier in the room's order.
//     The order is the one that leaves the fewest arrows running back up
//     that a greedy search finds (Eades, Lin and Smyth's heuristic for a
//     feedback arc set, ties broken by file name, then each file moved to
//     its best place while that removes one): the count is how many
//     arrows keep the files from being layered, whatever order they are
//     read in. -order a.go,b.go,... judges a given order instead.
//   - path: the declarations reachable from -from (Func or Type.Method)
//     by naming, each counted once ("stays"), and the files they are in;
//     and the same counting functions and methods only, through the
//     functions and methods each names (calls, and functions passed as
//     values).
//
// A struct field counts as part of its struct's declaration, a method as
// its own.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

func main() {
	dir := flag.String("dir", ".", "the package's directory")
	from := flag.String("from", "", "the path's first function: Func or Type.Method")
	order := flag.String("order", "", "judge this order of files (comma-separated) instead of searching one")
	verbose := flag.Bool("v", false, "list the arrows that run back up")
	flag.Parse()
	r, err := load(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	arrows := r.arrows()
	var files []string
	if *order != "" {
		files = strings.Split(*order, ",")
	} else {
		files = bestOrder(r.files, arrows)
	}
	back := backUp(files, arrows)
	fmt.Printf("files %d, arrows %d, back up %d\n", len(r.files), len(arrows), len(back))
	fmt.Printf("order: %s\n", strings.Join(files, " "))
	if *verbose {
		for _, a := range back {
			fmt.Printf("  back up: %s -> %s\n", a[0], a[1])
		}
	}
	if *from != "" {
		for _, funcs := range []bool{false, true} {
			stays, inFiles, err := r.path(*from, funcs)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			what := "declarations"
			if funcs {
				what = "functions and methods"
			}
			fmt.Printf("path from %s, %s: %d stays in %d files\n", *from, what, stays, inFiles)
		}
	}
}

// room is a type-checked package: each declaration's file and what it
// names.
type room struct {
	files []string            // file names, sorted
	file  map[string]string   // declaration key -> file name
	uses  map[string][]string // declaration key -> declaration keys it names
	funcs map[string]bool     // the keys of functions and methods
}

// listed is one package as go list -json reports it.
type listed struct {
	ImportPath string
	Export     string
}

func load(dir string) (*room, error) {
	cmd := exec.Command("go", "list", "-e", "-export", "-deps", "-json=ImportPath,Export", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s: %v\n%s", dir, err, stderr.Bytes())
	}
	exports := map[string]string{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		exports[p.ImportPath] = p.Export
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var parsed []*ast.File
	r := &room{file: map[string]string{}, uses: map[string][]string{}, funcs: map[string]bool{}}
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, f)
		r.files = append(r.files, filepath.Base(n))
	}
	sort.Strings(r.files)
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", func(p string) (io.ReadCloser, error) {
		if exports[p] == "" {
			return nil, fmt.Errorf("no export data for %s", p)
		}
		return os.Open(exports[p])
	})}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, err := conf.Check(parsed[0].Name.Name, fset, parsed, info)
	if err != nil {
		return nil, err
	}
	// owner maps a package object (a package-level name, a method, a
	// struct field) to the key of the declaration that holds it.
	owner := map[types.Object]string{}
	declOf := func(pos token.Pos) string { return filepath.Base(fset.Position(pos).Filename) }
	for _, f := range parsed {
		for _, d := range f.Decls {
			for _, key := range declare(d, info, owner) {
				r.file[key] = declOf(d.Pos())
				if _, ok := d.(*ast.FuncDecl); ok {
					r.funcs[key] = true
				}
			}
		}
	}
	for _, f := range parsed {
		for _, d := range f.Decls {
			keys := declare(d, info, nil)
			seen := map[string]bool{}
			ast.Inspect(d, func(n ast.Node) bool {
				id, ok := n.(*ast.Ident)
				if !ok {
					return true
				}
				obj := info.Uses[id]
				if obj == nil || obj.Pkg() != pkg {
					return true
				}
				if o, ok := owner[obj]; ok && !seen[o] {
					seen[o] = true
				}
				return true
			})
			for _, k := range keys {
				for o := range seen {
					if o != k {
						r.uses[k] = append(r.uses[k], o)
					}
				}
				slices.Sort(r.uses[k])
			}
		}
	}
	return r, nil
}

// declare returns the keys of the declarations d holds (one per function,
// method and spec) and, when owner is not nil, records which key owns each
// object d defines (a struct type's fields included).
func declare(d ast.Decl, info *types.Info, owner map[types.Object]string) []string {
	var keys []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		key := d.Name.Name
		if d.Recv != nil && len(d.Recv.List) == 1 {
			key = recvName(d.Recv.List[0].Type) + "." + key
		}
		keys = append(keys, key)
		if owner != nil {
			owner[info.Defs[d.Name]] = key
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			var idents []*ast.Ident
			switch s := s.(type) {
			case *ast.TypeSpec:
				idents = append(idents, s.Name)
				if owner != nil {
					ast.Inspect(s.Type, func(n ast.Node) bool {
						if f, ok := n.(*ast.Field); ok {
							for _, nm := range f.Names {
								owner[info.Defs[nm]] = s.Name.Name
							}
						}
						return true
					})
				}
			case *ast.ValueSpec:
				idents = s.Names
			default:
				continue
			}
			key := idents[0].Name
			keys = append(keys, key)
			if owner != nil {
				for _, id := range idents {
					owner[info.Defs[id]] = key
				}
			}
		}
	}
	return keys
}

// recvName is a receiver type's name, without a pointer or type
// parameters.
func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// arrows returns each ordered pair of distinct files where the first names
// something the second declares, sorted.
func (r *room) arrows() [][2]string {
	set := map[[2]string]bool{}
	for k, us := range r.uses {
		for _, u := range us {
			a := [2]string{r.file[k], r.file[u]}
			if a[0] != a[1] && a[1] != "" {
				set[a] = true
			}
		}
	}
	var out [][2]string
	for a := range set {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	return out
}

// backUp returns the arrows that run from a file to one earlier in order.
func backUp(order []string, arrows [][2]string) [][2]string {
	at := map[string]int{}
	for i, f := range order {
		at[f] = i
	}
	var out [][2]string
	for _, a := range arrows {
		if at[a[0]] > at[a[1]] {
			out = append(out, a)
		}
	}
	return out
}

// bestOrder orders files so that few arrows run back up: Eades, Lin and
// Smyth's greedy order (sinks last, sources first, else the file with the
// most arrows out less arrows in), then single moves while one helps.
// Arrows run from a file that names to the file it names, so a file
// comes before the files it uses.
func bestOrder(files []string, arrows [][2]string) []string {
	left := slices.Clone(files)
	var head, tail []string
	out, in := func(f string) int { return degree(f, left, arrows, 0) }, func(f string) int { return degree(f, left, arrows, 1) }
	for len(left) > 0 {
		moved := true
		for moved {
			moved = false
			for _, f := range left {
				if out(f) == 0 {
					tail = append([]string{f}, tail...)
					left = slices.DeleteFunc(left, func(g string) bool { return g == f })
					moved = true
					break
				}
				if in(f) == 0 {
					head = append(head, f)
					left = slices.DeleteFunc(left, func(g string) bool { return g == f })
					moved = true
					break
				}
			}
		}
		if len(left) == 0 {
			break
		}
		best, bestD := "", 0
		for _, f := range left {
			if d := out(f) - in(f); best == "" || d > bestD {
				best, bestD = f, d
			}
		}
		head = append(head, best)
		left = slices.DeleteFunc(left, func(g string) bool { return g == best })
	}
	order := append(head, tail...)
	for improved := true; improved; {
		improved = false
		n := len(backUp(order, arrows))
		for i := range order {
			for j := range order {
				if i == j {
					continue
				}
				try := slices.Clone(order)
				f := try[i]
				try = slices.Delete(try, i, i+1)
				try = slices.Insert(try, j, f)
				if m := len(backUp(try, arrows)); m < n {
					order, n, improved = try, m, true
				}
			}
		}
	}
	return order
}

// degree counts the arrows between f and the files of left: out of f
// (end 0) or into f (end 1).
func degree(f string, left []string, arrows [][2]string, end int) int {
	n := 0
	for _, a := range arrows {
		other := a[1-end]
		if a[end] == f && other != f && slices.Contains(left, other) {
			n++
		}
	}
	return n
}

// path returns how many declarations are reachable from from by naming,
// from included, and in how many files they are; with funcs, functions
// and methods only, through the functions and methods each names.
func (r *room) path(from string, funcs bool) (stays, files int, err error) {
	if _, ok := r.file[from]; !ok {
		return 0, 0, fmt.Errorf("roomarrows: no declaration %s", from)
	}
	seen := map[string]bool{from: true}
	queue := []string{from}
	inFiles := map[string]bool{}
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		inFiles[r.file[k]] = true
		for _, u := range r.uses[k] {
			if funcs && !r.funcs[u] {
				continue
			}
			if !seen[u] {
				seen[u] = true
				queue = append(queue, u)
			}
		}
	}
	return len(seen), len(inFiles), nil
}
