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
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
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
