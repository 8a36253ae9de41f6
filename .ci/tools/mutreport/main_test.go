package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tools/internal/reporoot"
)

// fixture writes a repository with one source file (pkg/a.go), a gremlins
// result for it and a survivors file, and returns the root and the paths.
func fixture(t *testing.T, resultJSON, survivors string) (root, result, docs string) {
	t.Helper()
	root = t.TempDir()
	src := "package pkg\n\nfunc f(a, b bool, n int) bool {\n\tif a && b || n > 0 {\n\t\treturn true\n\t}\n\treturn n < 2\n}\n"
	if err := os.MkdirAll(filepath.Join(root, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, s string) string {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write(filepath.Join(root, "pkg", "a.go"), src)
	result = write(filepath.Join(root, "a.json"), resultJSON)
	docs = write(filepath.Join(root, "survivors.md"), survivors)
	return root, result, docs
}

const twoKilledTwoLived = `{"files":[{"file_name":"a.go","mutations":[
 {"type":"INVERT_LOGICAL","status":"LIVED","line":4,"column":7},
 {"type":"INVERT_LOGICAL","status":"KILLED","line":4,"column":12},
 {"type":"CONDITIONALS_BOUNDARY","status":"LIVED","line":7,"column":11},
 {"type":"CONDITIONALS_NEGATION","status":"KILLED","line":7,"column":11},
 {"type":"ARITHMETIC_BASE","status":"NOT COVERED","line":7,"column":11},
 {"type":"ARITHMETIC_BASE","status":"TIMED OUT","line":7,"column":11},
 {"type":"ARITHMETIC_BASE","status":"NOT VIABLE","line":7,"column":11}]}]}`

func TestRunPrintsPerFileTableAndSurvivors(t *testing.T) {
	root, result, docs := fixture(t, twoKilledTwoLived, "")
	var out strings.Builder
	if err := run([]string{"-root", root, "-survivors", docs, "pkg=" + result}, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"pkg/a.go                          2      2      0        1         1          1    50.00%    50.00%",
		"TOTAL                             2      2      0        1         1          1    50.00%    50.00%",
		"LIVED   pkg/a.go:4 INVERT_LOGICAL@6  if a && b || n > 0 {",
		"LIVED   pkg/a.go:7 CONDITIONALS_BOUNDARY@10  return n < 2",
		"TIMEOUT pkg/a.go:7 ARITHMETIC_BASE@10  return n < 2",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestRunFailsBelowThreshold(t *testing.T) {
	root, result, docs := fixture(t, twoKilledTwoLived, "")
	var out strings.Builder
	err := run([]string{"-root", root, "-survivors", docs, "-threshold", "51", "pkg=" + result}, &out)
	if !errors.Is(err, errBelow) {
		t.Fatalf("want errBelow, got %v", err)
	}
	if !strings.Contains(out.String(), "TOTAL") {
		t.Errorf("the table is printed before failing:\n%s", out.String())
	}
}

func TestRunLeavesDocumentedEquivalentsOutOfAdjustedEfficacy(t *testing.T) {
	docs := "| File | Mutator | Line | Why |\n|---|---|---|---|\n" +
		"| pkg/a.go | INVERT_LOGICAL@6 | `if a && b \\|\\| n > 0 {` | proof one |\n" +
		"| pkg/a.go | CONDITIONALS_BOUNDARY | `return n < 2` | proof two |\n"
	root, result, survivors := fixture(t, twoKilledTwoLived, docs)
	var out strings.Builder
	if err := run([]string{"-root", root, "-survivors", survivors, "-threshold", "100", "pkg=" + result}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got := out.String(); !strings.Contains(got, "2      2      2        1         1          1    50.00%   100.00%") ||
		!strings.Contains(got, "equiv   pkg/a.go:4 INVERT_LOGICAL@6") {
		t.Errorf("equivalents not applied:\n%s", got)
	}
}

func TestRunCountsSurvivorWhoseRowNamesAnotherColumnOrLine(t *testing.T) {
	docs := "| pkg/a.go | INVERT_LOGICAL@11 | `if a && b \\|\\| n > 0 {` | another operator on the line |\n" +
		"| pkg/a.go | CONDITIONALS_BOUNDARY | `return n <= 2` | a line that has since changed |\n" +
		"| other.go | CONDITIONALS_BOUNDARY | `return n < 2` | another file |\n"
	root, result, survivors := fixture(t, twoKilledTwoLived, docs)
	var out strings.Builder
	err := run([]string{"-root", root, "-survivors", survivors, "-threshold", "51", "pkg=" + result}, &out)
	if !errors.Is(err, errBelow) {
		t.Fatalf("want errBelow, got %v\n%s", err, out.String())
	}
}

func TestRunRefusesSurvivorRowWithoutReason(t *testing.T) {
	root, result, survivors := fixture(t, twoKilledTwoLived, "| pkg/a.go | CONDITIONALS_BOUNDARY | `return n < 2` |  |\n")
	if err := run([]string{"-root", root, "-survivors", survivors, "pkg=" + result}, new(strings.Builder)); err == nil ||
		!strings.Contains(err.Error(), "reason") {
		t.Fatalf("want a missing-reason error, got %v", err)
	}
}

func TestRunRefusesSurvivorRowWithBadColumn(t *testing.T) {
	root, result, survivors := fixture(t, twoKilledTwoLived, "| pkg/a.go | CONDITIONALS_BOUNDARY@x | `return n < 2` | why |\n")
	if err := run([]string{"-root", root, "-survivors", survivors, "pkg=" + result}, new(strings.Builder)); err == nil ||
		!strings.Contains(err.Error(), "column") {
		t.Fatalf("want a column error, got %v", err)
	}
}

func TestRunFailsWhenNoMutantWasTested(t *testing.T) {
	root, result, survivors := fixture(t, `{"files":[{"file_name":"a.go","mutations":[
 {"type":"ARITHMETIC_BASE","status":"NOT COVERED","line":7,"column":11}]}]}`, "")
	if err := run([]string{"-root", root, "-survivors", survivors, "pkg=" + result}, new(strings.Builder)); !errors.Is(err, errNothingTested) {
		t.Fatalf("want errNothingTested, got %v", err)
	}
}

func TestRunRefusesBadArguments(t *testing.T) {
	root, result, survivors := fixture(t, twoKilledTwoLived, "")
	cases := map[string][]string{
		"NoResult":        {"-root", root},
		"NotDirEqualJSON": {"-root", root, result},
		"MissingResult":   {"-root", root, "pkg=" + filepath.Join(root, "absent.json")},
		"MissingDocs":     {"-root", root, "-survivors", filepath.Join(root, "absent.md"), "pkg=" + result},
		"NotJSON":         {"-root", root, "pkg=" + survivors},
		"MissingSource":   {"-root", root, "elsewhere=" + result},
		"UnknownFlag":     {"-nope", "pkg=" + result},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			if err := run(args, new(strings.Builder)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// TestEverySurvivorRowMatchesItsLine reads the repository's survivors
// file and fails on a row whose source line is no longer in its file: a
// row matches by line text, so one whose line changed proves nothing and
// would hide nothing, and only misleads a reader (re-prove the mutant on
// the new line, or delete the row).
func TestEverySurvivorRowMatchesItsLine(t *testing.T) {
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := readSurvivors(filepath.Join(root, "docs", "contributing", "mutation-survivors.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 10 {
		t.Fatalf("%d survivor rows read: the table's format changed", len(rows))
	}
	lines := map[string]map[string]bool{}
	for _, r := range rows {
		if lines[r.file] == nil {
			b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(r.file)))
			if err != nil {
				t.Errorf("%s: %v", r.file, err)
				lines[r.file] = map[string]bool{}
				continue
			}
			m := map[string]bool{}
			for _, l := range strings.Split(string(b), "\n") {
				m[strings.TrimSpace(l)] = true
			}
			lines[r.file] = m
		}
		if !lines[r.file][r.code] {
			t.Errorf("%s %s: the line `%s` is no longer in the file", r.file, r.mutator, r.code)
		}
	}
}
