package ctcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tools/internal/reporoot"
)

// snippet wraps body in a file with the imports the cases use.
func snippet(decls string) string {
	return `package p

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"reflect"
	"slices"
	"strings"
)

var _ = bytes.Equal
var _ = hmac.Equal
var _ = sha256.Sum256
var _ = subtle.ConstantTimeCompare
var _ = hex.EncodeToString
var _ = reflect.DeepEqual
var _ = slices.Equal[[]byte]
var _ = strings.Compare

const macSize = 32

type Fingerprint [32]byte

func computeMAC(msg []byte) []byte { return msg }

type delivery struct {
	mac  []byte
	body []byte
	n    int
}

` + decls
}

func TestCheckSourceFlagsVariableTimeSecretCompares(t *testing.T) {
	var c Checker
	cases := []struct {
		name, src string
	}{
		{"BytesEqualOnMAC", `func f(mac, got []byte) bool { return bytes.Equal(mac, got) }`},
		{"BytesEqualOnCalledMAC", `func f(k, body, got []byte) bool { return bytes.Equal(computeMAC(body), got) }`},
		{"BytesEqualOnTag", `func f(tag, want []byte) bool { return bytes.Equal(want, tag) }`},
		{"BytesCompareOnSignature", `func f(signature, b []byte) bool { return bytes.Compare(b, signature) == 0 }`},
		{"BytesEqualFoldOnSig", `func f(sig, b []byte) bool { return bytes.EqualFold(sig, b) }`},
		{"StringsCompareOnDigest", `func f(digest, b string) bool { return strings.Compare(digest, b) == 0 }`},
		{"StringsEqualFoldOnHexMAC", `func f(expectedMAC, b string) bool { return strings.EqualFold(b, expectedMAC) }`},
		{"SlicesEqualOnBindTag", `func f(bindTag, b []byte) bool { return slices.Equal(bindTag, b) }`},
		{"ReflectDeepEqualOnSum", `func f(b []byte) bool { sum := sha256.Sum256(b); return reflect.DeepEqual(sum, [32]byte{1}) }`},
		{"StringEqOnConvertedMAC", `func f(mac, got []byte) bool { return string(mac) == string(got) }`},
		{"StringNeqOnSig", `func f(sig, got string) bool { return sig != got }`},
		{"ArrayEqOnSum", `func f(a, b []byte) bool { return sha256.Sum256(a) == sha256.Sum256(b) }`},
		{"ArrayEqOnMACSizedParams", `func f(a, b *[macSize]byte) bool { return *a == *b }`},
		{"ArrayEqOnNamedDigestType", `func f(a, b Fingerprint) bool { return a == b }`},
		{"SliceOfFingerprint", `func f(a, b Fingerprint) bool { return bytes.Equal(a[:], b[:]) }`},
		{"LocalFromMACCall", `func f(body, got []byte) bool { want := computeMAC(body); return bytes.Equal(want, got) }`},
		{"LocalAssignedFromHMAC", `func f(body, got []byte) bool { var want []byte; want = hmac.New(sha256.New, nil).Sum(body); return bytes.Equal(want, got) }`},
		{"RangeOverSigs", `func f(sigs [][]byte, want []byte) bool { for _, got := range sigs { if bytes.Equal(want, got) { return true } }; return false }`},
		{"HexEncodedMAC", `func f(mac []byte, got string) bool { return hex.EncodeToString(mac) == got }`},
		{"FieldNamedMAC", `func f(d delivery, got []byte) bool { return bytes.Equal(d.mac, got) }`},
		{"SnakeCaseBindTag", `func f(bind_tag, got string) bool { return got == bind_tag }`},
		{"SecretString", `func f(secret, got string) bool { return got == secret }`},
		{"ReasonWithoutText", `func f(mac, got []byte) bool {
	//ctcheck:ok
	return bytes.Equal(mac, got)
}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Source("p.go", snippet(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("want 1 finding, got %d: %v", len(got), got)
			}
			if !strings.Contains(got[0].String(), "variable time") {
				t.Errorf("finding text %q", got[0])
			}
		})
	}
}

func TestCheckSourceAcceptsConstantTimeAndNonSecretCompares(t *testing.T) {
	var c Checker
	cases := []struct {
		name, src string
	}{
		{"HMACEqual", `func f(mac, got []byte) bool { return hmac.Equal(mac, got) }`},
		{"ConstantTimeCompare", `func f(tag, got []byte) bool { return subtle.ConstantTimeCompare(tag, got) == 1 }`},
		{"BytesEqualOnPlainData", `func f(body, want []byte) bool { return bytes.Equal(body, want) }`},
		{"FieldNotSecret", `func f(d delivery, b []byte) bool { return bytes.Equal(d.body, b) }`},
		{"LengthOfMAC", `func f(mac []byte) bool { return len(mac) != macSize }`},
		{"SizeConstantAsOperand", `func f(n int) bool { return n == macSize }`},
		{"IntegerFieldOfSecretStruct", `func f(d delivery, n int) bool { return d.n == n }`},
		{"HeaderNamesOfSignature", `func f(sigHeader, idHeader string) bool { return strings.EqualFold(sigHeader, idHeader) }`},
		{"EmptySigCheck", `func f(sig string) bool { return sig == "" }`},
		{"NilMACCheck", `func f(mac []byte) bool { return mac == nil }`},
		{"ZeroFingerprintCheck", `func f(fp Fingerprint) bool { return fp == Fingerprint{} }`},
		{"ByteOfSigAgainstChar", `func f(sig string) bool { return sig[0] == 'v' }`},
		{"IntegerEnumNamedBind", `type Binding int
const BindSubject Binding = 1
func f(b Binding) bool { return b == BindSubject }`},
		{"BoolNamedTag", `func f(tagged, ok bool) bool { return tagged == ok }`},
		{"WordInsideOtherWord", `func f(signal, design string) bool { return signal == design }`},
		{"ReviewedWithReason", `func f(mac, got []byte) bool {
	//ctcheck:ok both operands are public test vectors
	return bytes.Equal(mac, got)
}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Source("p.go", snippet(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 0 {
				t.Fatalf("want no finding, got %v", got)
			}
		})
	}
}

func TestCheckSourceRejectsUnparsableSource(t *testing.T) {
	if _, err := CheckSource("p.go", "package p\nfunc {"); err == nil {
		t.Fatal("CheckSource accepted a syntax error")
	}
}

func TestWordsSplitsIdentifiers(t *testing.T) {
	cases := map[string][]string{
		"sha256MAC":      {"sha", "mac"},
		"bindTagLen":     {"bind", "tag", "len"},
		"HMACKey":        {"hmac", "key"},
		"bind_tag":       {"bind", "tag"},
		"parseSignature": {"parse", "signature"},
		"signal":         {"signal"},
		"x":              {"x"},
		"_":              nil,
	}
	for in, want := range cases {
		if got := words(in); !slices.Equal(got, want) {
			t.Errorf("words(%q) = %q, want %q", in, got, want)
		}
	}
}

// repoRoot is the root module's directory (see package reporoot).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestRepositoryComparesSecretsInConstantTime runs the check over every
// module of the repository and fails on any finding.
func TestRepositoryComparesSecretsInConstantTime(t *testing.T) {
	root := repoRoot(t)
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("only %d source files under %s: the scan would be vacuous", len(files), root)
	}
	findings, err := CheckTree(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Error(f)
	}
}

// ctSite is a constant-time comparison call in the repository.
type ctSite struct {
	file       string
	start, end int    // offsets of the selector, e.g. "hmac.Equal"
	repl       string // a variable-time function for the selector
	callStart  int    // offsets of the whole call
	callEnd    int
	args       [2]string // the two operands as written
	line       int
	text       string // the call as written
}

// mutants returns the site's file content with the call made variable time
// in two ways: the function swapped, and the call replaced by
// string(a) == string(b).
func (s ctSite) mutants(src []byte) map[string][]byte {
	splice := func(start, end int, with string) []byte {
		return append(append(append([]byte{}, src[:start]...), with...), src[end:]...)
	}
	return map[string][]byte{
		s.repl: splice(s.start, s.end, s.repl),
		"string ==": splice(s.callStart, s.callEnd,
			"(string("+s.args[0]+") == string("+s.args[1]+"))"),
	}
}

// constantTimeSites finds every hmac.Equal and subtle.ConstantTimeCompare
// call in the non-test files of the module in dir (nested modules
// excluded).
func constantTimeSites(t *testing.T, dir string) []ctSite {
	t.Helper()
	var sites []ctSite
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != dir {
				return filepath.SkipDir
			}
			return nil
		}
		if !isSource(d.Name()) {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, src, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			var repl string
			switch {
			case x.Name == "hmac" && sel.Sel.Name == "Equal":
				repl = "bytes.Equal"
			case x.Name == "subtle" && sel.Sel.Name == "ConstantTimeCompare":
				// Same int result, so the mutant still type-checks.
				repl = "bytes.Compare"
			default:
				return true
			}
			if len(call.Args) != 2 {
				return true
			}
			off := func(p token.Pos) int { return fset.Position(p).Offset }
			sites = append(sites, ctSite{
				callStart: off(call.Pos()), callEnd: off(call.End()),
				args: [2]string{
					string(src[off(call.Args[0].Pos()):off(call.Args[0].End())]),
					string(src[off(call.Args[1].Pos()):off(call.Args[1].End())]),
				},
				file: p, start: fset.Position(sel.Pos()).Offset, end: fset.Position(sel.End()).Offset,
				repl: repl, line: fset.Position(sel.Pos()).Line,
				text: string(src[fset.Position(call.Pos()).Offset:fset.Position(call.End()).Offset]),
			})
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sites
}

// TestCheckCatchesEachConstantTimeCompareMutatedToVariableTime replaces,
// one at a time, each hmac.Equal of the repository with bytes.Equal and
// each subtle.ConstantTimeCompare with bytes.Compare, then each such call
// with string(a) == string(b) (in memory), and requires a finding on that
// line: the mutation issue 21 found surviving
// every functional test. A compare of the server session (cursor Verify,
// after the MAC) is constant time by choice, but a session is not
// secret-derived in the check's vocabulary: its mutant is expected to pass,
// and the test says so.
func TestCheckCatchesEachConstantTimeCompareMutatedToVariableTime(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the repository once per compare site")
	}
	root := repoRoot(t)
	var mods []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && skipDir(d.Name()) {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			mods = append(mods, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var c Checker
	total := 0
	for _, m := range mods {
		for _, s := range constantTimeSites(t, m) {
			total++
			src, err := os.ReadFile(s.file)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, s.file)
			for kind, mutant := range s.mutants(src) {
				findings, err := c.Module(m, map[string][]byte{s.file: mutant})
				if err != nil {
					t.Fatal(err)
				}
				caught := false
				for _, f := range findings {
					if f.Pos.Filename == s.file && f.Pos.Line == s.line {
						caught = true
					}
				}
				switch notSecret := strings.Contains(strings.ToLower(s.text), "session"); {
				case notSecret && caught:
					t.Errorf("%s:%d: %s mutant of %s flagged, but a session is not in the vocabulary", rel, s.line, kind, s.text)
				case notSecret:
					t.Logf("%s:%d: %s compares the session, not a secret: %s mutant not flagged, as designed", rel, s.line, s.text, kind)
				case !caught:
					t.Errorf("%s:%d: %s mutant of %s not caught (findings: %v)", rel, s.line, kind, s.text, findings)
				default:
					t.Logf("%s:%d: %s mutant caught", rel, s.line, kind)
				}
			}
		}
	}
	if total < 5 {
		t.Fatalf("only %d constant-time compare sites found: the test would be vacuous", total)
	}
}
