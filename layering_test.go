package ctoken_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The module's layers, bottom up: internal/*, replay and observe (standard
// library only; observe is the event vocabulary the root package and
// webhook share; internal/jcs is the RFC 8785 canonicalizer behind the
// root package's fingerprints); the root package and webhook (side by side, neither
// importing the other); exchange and keyfile (on the root package); mcptoken (the root package, replay, some of
// internal/, and the standard library only); cmd/ctoken and the nested modules on top. Nothing imports upward.

const modulePath = "github.com/ctoken/ctoken"

// listedPackage is the part of `go list -json` output the layering rules
// read.
type listedPackage struct {
	ImportPath   string
	Name         string
	Imports      []string // direct, non-test
	TestImports  []string // direct, of the package's in-package tests
	XTestImports []string // direct, of its external (_test package) tests
	Deps         []string // transitive, non-test
	Standard     bool
}

// modulePackages lists the root module's packages with their transitive
// non-test dependencies, and the set of standard-library package paths
// among those dependencies.
func modulePackages(t *testing.T) (map[string]listedPackage, map[string]bool) {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the layering test runs `go list`: %v", err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(goCmd, "list", "-deps", "-json", "./...")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]listedPackage{}
	std := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Standard {
			std[p.ImportPath] = true
		}
		if inModule(p.ImportPath) {
			pkgs[p.ImportPath] = p
		}
	}
	for _, want := range []string{modulePath, modulePath + "/replay", modulePath + "/observe", modulePath + "/webhook", modulePath + "/mcptoken", modulePath + "/internal/b64", modulePath + "/internal/jcs"} {
		if _, ok := pkgs[want]; !ok {
			t.Fatalf("go list did not report %s; got %d packages", want, len(pkgs))
		}
	}
	return pkgs, std
}

func inModule(path string) bool {
	return path == modulePath || strings.HasPrefix(path, modulePath+"/")
}

func isInternal(path string) bool { return strings.HasPrefix(path, modulePath+"/internal/") }

func TestLayeringLowestLayersImportOnlyStdAndInternal(t *testing.T) {
	pkgs, std := modulePackages(t)
	for path, p := range pkgs {
		internal := isInternal(path)
		if !internal && path != modulePath+"/replay" && path != modulePath+"/observe" {
			continue
		}
		for _, d := range p.Deps {
			switch {
			case std[d]:
			case internal && isInternal(d):
				// internal/* may share each other (none does today).
			default:
				t.Errorf("%s imports %s: the bottom layer depends on the standard library only", path, d)
			}
		}
	}
}

// internal/ holds what the library and its tests share, nothing else: a
// package there that no other package of the module imports (in code or
// tests), or a command, is tooling, which lives in the tools module
// (.ci/tools) so that importers of the library do not download it.
func TestLayeringInternalHoldsOnlyWhatTheModuleImports(t *testing.T) {
	pkgs, _ := modulePackages(t)
	imported := map[string]bool{}
	for path, p := range pkgs {
		for _, list := range [][]string{p.Imports, p.TestImports, p.XTestImports} {
			for _, d := range list {
				if d != path {
					imported[d] = true
				}
			}
		}
	}
	n := 0
	for path, p := range pkgs {
		if !isInternal(path) {
			continue
		}
		n++
		switch {
		case p.Name == "main":
			t.Errorf("%s is a command: tooling goes in the tools module, .ci/tools", path)
		case !imported[path]:
			t.Errorf("%s is imported by no package of the module: tooling goes in the tools module, .ci/tools; dead code goes", path)
		}
	}
	if n < 5 {
		t.Fatalf("found %d internal packages: the listing is broken", n)
	}
}

func TestLayeringRootAndWebhookDoNotImportEachOther(t *testing.T) {
	pkgs, _ := modulePackages(t)
	if slices.Contains(pkgs[modulePath].Deps, modulePath+"/webhook") {
		t.Errorf("the root package imports webhook")
	}
	for _, d := range pkgs[modulePath+"/webhook"].Deps {
		if d == modulePath || strings.HasPrefix(d, "github.com/fxamacker/cbor") {
			t.Errorf("webhook imports %s: webhook-only users must not link the root package or CBOR", d)
		}
	}
}

// The canonicalizer is the root package's: it alone imports internal/jcs
// (webhook scans JSON bodies with internal/jsontext), so that jcs can change
// with the fingerprint contract (SPEC.md §3) and nothing else.
func TestLayeringOnlyTheRootPackageImportsTheCanonicalizer(t *testing.T) {
	pkgs, _ := modulePackages(t)
	const jcs = modulePath + "/internal/jcs"
	if !slices.Contains(pkgs[modulePath].Imports, jcs) {
		t.Errorf("the root package does not import %s: ArgsFingerprint and CanonicalJSON are its wrappers", jcs)
	}
	for path, p := range pkgs {
		if path != modulePath && slices.Contains(p.Imports, jcs) {
			t.Errorf("%s imports %s: only the root package may", path, jcs)
		}
	}
}

// mcptoken is the SDK-independent part of the MCP integrations; it builds on
// the root package, replay (a round's record and the store of idempotent
// tool calls: replay.Recorder), internal/stateclaim (a state opened but not
// claimed, which the root package offers through it without a new exported
// name), the sealing of recorded results (internal/ringkey,
// internal/xaes, as the idempotency middleware seals its responses) and
// the retry of a record's confirmation (internal/confirm, as the
// middlewares retry theirs), so
// that the nested modules can share it without reaching into internal/
// themselves, and nothing below it imports it (but its own test support,
// mcptoken/mcptokentest, and storetest, the suite every store runs).
func TestLayeringMCPTokenSitsOnRootReplayAndSealing(t *testing.T) {
	pkgs, std := modulePackages(t)
	allowed := map[string]bool{
		modulePath:                          true,
		modulePath + "/replay":              true,
		modulePath + "/internal/stateclaim": true,
		modulePath + "/internal/ringkey":    true,
		modulePath + "/internal/xaes":       true,
		modulePath + "/internal/confirm":    true,
	}
	for _, d := range pkgs[modulePath+"/mcptoken"].Imports {
		if !allowed[d] && !std[d] {
			t.Errorf("mcptoken imports %s: it may import only the root package, replay, internal/stateclaim, the record sealing of internal/ (ringkey, xaes), internal/confirm and the standard library", d)
		}
	}
	for path, p := range pkgs {
		if !strings.HasPrefix(path, modulePath+"/mcptoken/") && path != modulePath+"/storetest" && slices.Contains(p.Deps, modulePath+"/mcptoken") {
			t.Errorf("%s imports mcptoken: only the MCP integrations (nested modules), mcptoken's own test support and storetest build on it", path)
		}
	}
}

// idempotency is an HTTP middleware over the root package, replay and
// observe: nothing of the library builds on it (the examples do, and its
// own test support, idempotency/idempotencytest, and storetest, the suite
// every store runs).
func TestLayeringOnlyExamplesImportIdempotency(t *testing.T) {
	pkgs, _ := modulePackages(t)
	const idem = modulePath + "/idempotency"
	if _, ok := pkgs[idem]; !ok {
		t.Fatalf("go list did not report %s", idem)
	}
	for path, p := range pkgs {
		if path != idem && !strings.HasPrefix(path, idem+"/") && path != modulePath+"/storetest" && !strings.HasPrefix(path, modulePath+"/examples/") && slices.Contains(p.Deps, idem) {
			t.Errorf("%s imports %s", path, idem)
		}
	}
}

func TestLayeringNothingInTheModuleImportsCmd(t *testing.T) {
	pkgs, _ := modulePackages(t)
	for path, p := range pkgs {
		for _, d := range p.Deps {
			if strings.HasPrefix(d, modulePath+"/cmd/") || strings.HasPrefix(d, modulePath+"/examples/") {
				t.Errorf("%s imports %s", path, d)
			}
		}
	}
}

// Go's internal rule admits any importer under github.com/ctoken/ctoken/,
// nested modules included; this test is what keeps them out, so internal/
// stays free to change. It reads every .go file (tests too) of each nested
// module.
func TestLayeringNestedModulesNeverImportInternal(t *testing.T) {
	nested := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" || path == "go.mod" {
			return nil
		}
		nested++
		dir := filepath.Dir(path)
		return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".go") {
				return err
			}
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, src, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				ip, _ := strconv.Unquote(imp.Path.Value)
				if ip == modulePath+"/internal" || isInternal(ip) {
					t.Errorf("%s (nested module %s) imports %s", p, dir, ip)
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if nested < 4 {
		t.Fatalf("found %d nested modules, want mcp, mcpgo, redisstore and bench at least", nested)
	}
}

// exchange (the RFC 8693 endpoint) and keyfile (key file reloading) are
// built on the root package: they import it, observe, internal/reason and
// the standard library only, and nothing of the library imports them (the
// examples do, exchange's own test support, exchange/exchangetest, and
// storetest, the suite every store runs).
func TestLayeringExchangeAndKeyfileSitOnTheRootPackage(t *testing.T) {
	pkgs, std := modulePackages(t)
	for _, pkg := range []string{modulePath + "/exchange", modulePath + "/keyfile"} {
		p, ok := pkgs[pkg]
		if !ok {
			t.Fatalf("go list did not report %s", pkg)
		}
		for _, d := range p.Imports {
			switch {
			case std[d], d == modulePath, d == modulePath+"/observe", d == modulePath+"/internal/reason":
			default:
				t.Errorf("%s imports %s: it builds on the root package, observe and internal/reason only", pkg, d)
			}
		}
		for path, q := range pkgs {
			if path != pkg && !strings.HasPrefix(path, pkg+"/") && path != modulePath+"/storetest" && !strings.HasPrefix(path, modulePath+"/examples/") && slices.Contains(q.Deps, pkg) {
				t.Errorf("%s imports %s", path, pkg)
			}
		}
	}
}
