package ctcheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/printer"
	"go/token"
	"go/types"
	"slices"
	"strings"
	"unicode"
)

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
