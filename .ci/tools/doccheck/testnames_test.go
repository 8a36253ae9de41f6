package doccheck

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// citingMarkdown returns every .md file of the repository, relative to
// root, but CHANGELOG.md: the changelog records history, and an entry may
// name a test that was since renamed or removed. .git and node_modules (the
// webhook senders' npm packages) are skipped.
func citingMarkdown(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel != "CHANGELOG.md" {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDocsCiteOnlyExistingTests fails on every backticked test, example,
// fuzz target or benchmark name in the repository's Markdown (CHANGELOG.md
// excepted) that no _test.go of the repository declares, at its file and
// line.
func TestDocsCiteOnlyExistingTests(t *testing.T) {
	funcs, subs, err := ReadTests(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(funcs) < 100 {
		t.Fatalf("found %d test functions under %s: the scan is broken", len(funcs), root)
	}
	var cites []Citation
	for _, f := range citingMarkdown(t) {
		md, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		cites = append(cites, Citations(f, md)...)
	}
	if len(cites) < 50 {
		t.Fatalf("found %d cited test names: the extraction is broken", len(cites))
	}
	for _, c := range Missing(cites, funcs) {
		t.Error(c)
	}
	t.Logf("%d citations of %d test functions checked", len(cites), len(funcs))
	n := 0
	for _, c := range cites {
		if c.Sub != "" {
			n++
		}
	}
	// The docs cite top-level tests (issue 83): the few subtests left
	// (the rows of docs/contributing/mutation-survivors.md, each naming
	// the case that pins a line) still show the extraction works.
	if n < 5 {
		t.Fatalf("found %d cited subtests: the extraction is broken", n)
	}
	for _, c := range MissingSubtests(cites, subs) {
		t.Errorf("%s:%d: `%s/%s` cited, but no _test.go of the repository names a subtest %q", c.File, c.Line, c.Name, c.Sub, c.Sub)
	}
	t.Logf("%d subtest citations checked", n)
}

// TestCitationsFindInlineTestNamesAndMissingReportsUnknownOnes pins what
// counts as a citation and when one is stale.
func TestCitationsFindInlineTestNamesAndMissingReportsUnknownOnes(t *testing.T) {
	funcs := map[string]string{
		"TestCursorVerify":        "cursor_test.go",
		"TestStateRoundTrip":      "state_test.go",
		"ExampleNewCursorIssuer":  "example_test.go",
		"FuzzCursorDecode":        "fuzz_test.go",
		"BenchmarkCursorIssue":    "bench_test.go",
		"TestStateRejectsExpired": "state_test.go",
	}
	type cite struct {
		line   int
		name   string
		prefix bool
	}
	for _, tc := range []struct {
		name    string
		md      string
		cites   []cite
		missing []string
	}{
		{
			name:  "a name present",
			md:    "Pinned by `TestCursorVerify`.\n",
			cites: []cite{{1, "TestCursorVerify", false}},
		},
		{
			name:    "a missing name",
			md:      "text\n\nPinned by `TestVerifyRejectsForeignSession`.\n",
			cites:   []cite{{3, "TestVerifyRejectsForeignSession", false}},
			missing: []string{"TestVerifyRejectsForeignSession"},
		},
		{
			name:  "a subtest: its top-level test is checked",
			md:    "`TestCursorVerify/expired cursor` and `TestStateRoundTrip/`\n",
			cites: []cite{{1, "TestCursorVerify", false}, {1, "TestStateRoundTrip", false}},
		},
		{
			name:    "a subtest of a missing test",
			md:      "`TestGone/sub`\n",
			cites:   []cite{{1, "TestGone", false}},
			missing: []string{"TestGone"},
		},
		{
			name:  "a name in a fenced code block is not a citation",
			md:    "```go\nfunc TestMine(t *testing.T) {}\n```\n~~~sh\ngo test -run `TestAlsoMine`\n~~~\n`ExampleNewCursorIssuer`\n",
			cites: []cite{{7, "ExampleNewCursorIssuer", false}},
		},
		{
			name:    "names in a command, a pattern and a double-backtick span",
			md:      "`go test -run '^(TestCursorVerify|FuzzGone)$' ./...`\n``BenchmarkCursorIssue` ``\n",
			cites:   []cite{{1, "TestCursorVerify", false}, {1, "FuzzGone", false}, {2, "BenchmarkCursorIssue", false}},
			missing: []string{"FuzzGone"},
		},
		{
			name:    "a span across lines reports the name's own line",
			md:      "see `go test\n-run TestNone`\n",
			cites:   []cite{{2, "TestNone", false}},
			missing: []string{"TestNone"},
		},
		{
			name:    "a prefix pattern needs one function starting with it",
			md:      "`TestStateRejects*`, `TestStateGone.*`\n",
			cites:   []cite{{1, "TestStateRejects", true}, {1, "TestStateGone", true}},
			missing: []string{"TestStateGone"},
		},
		{
			name: "words that are not test names",
			md:   "`Test`, `Testing`, `testing.Benchmark`, `Fuzzy`, `Examples`, `MyTestX`, plain TestOutsideBackticks\n",
		},
		{
			name:  "an unclosed backtick is literal",
			md:    "a ` stray\n\n`TestCursorVerify`\n",
			cites: []cite{{3, "TestCursorVerify", false}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := Citations("x.md", []byte(tc.md))
			var got []cite
			for _, c := range cs {
				if c.File != "x.md" {
					t.Errorf("citation %+v: file %q", c, c.File)
				}
				got = append(got, cite{c.Line, c.Name, c.Prefix})
			}
			if !reflect.DeepEqual(got, tc.cites) {
				t.Errorf("Citations = %v, want %v", got, tc.cites)
			}
			var missing []string
			for _, c := range Missing(cs, funcs) {
				missing = append(missing, c.Name)
				if !strings.HasPrefix(c.String(), "x.md:") || !strings.Contains(c.String(), c.Name) {
					t.Errorf("String() = %q: want file:line and the name", c)
				}
			}
			if !reflect.DeepEqual(missing, tc.missing) {
				t.Errorf("Missing = %v, want %v", missing, tc.missing)
			}
		})
	}
}

func TestTestFuncsReadsTopLevelTestFunctions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a_test.go", "package a\n\nfunc TestA(t *T) {}\nfunc ExampleA() {}\nfunc FuzzA(f *F) {}\nfunc BenchmarkA(b *B) {}\nfunc helper() {}\ntype T struct{}\ntype F struct{}\ntype B struct{}\nfunc (T) TestMethod() {}\n")
	write("sub/b_test.go", "package b\n\nfunc TestB(t *T) {}\n")
	write("a.go", "package a\n\nfunc TestNotInATestFile() {}\n")
	write("testdata/c_test.go", "package c\n\nfunc TestInTestdata() {}\n")
	funcs, err := TestFuncs(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(maps.Keys(funcs))
	want := []string{"BenchmarkA", "ExampleA", "FuzzA", "TestA", "TestB"}
	if !slices.Equal(names, want) {
		t.Errorf("TestFuncs = %v, want %v", names, want)
	}
	write("bad_test.go", "package a\n\nfunc {")
	if _, err := TestFuncs(dir); err == nil {
		t.Error("TestFuncs accepted a _test.go that does not parse")
	}
}

func TestSubtestNamesReadLiteralsFormatsAndStarts(t *testing.T) {
	dir := t.TempDir()
	src := "package a\n\nvar cases = []struct{ name string }{{\"refuses a forged cursor\"}}\n" +
		"var f = fmt.Sprintf(\"claimers=%d\", 8)\nvar any = fmt.Sprintf(\"%s/%d\", x, y)\n" +
		"var g = \"handler status \" + text\nvar short = \"a \" + b\n"
	if err := os.WriteFile(filepath.Join(dir, "a_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range Citations("x.md", []byte("`TestX/sub name/deeper`, `go test -run 'TestY/a_b'`, `TestZ/<driver>`, `TestW`\n")) {
		got = append(got, c.Sub)
	}
	if want := []string{"sub name", "", "", ""}; !reflect.DeepEqual(got, want) {
		t.Errorf("Citations' Sub = %q, want %q (a whole span's first subtest only)", got, want)
	}
	_, subs, err := ReadTests(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sub  string
		want bool
	}{
		{"refuses a forged cursor", true},
		{"refuses_a_forged_cursor", true}, // go test's spelling
		{"claimers=64", true},
		{"handler status Not Found", true},
		// The names refused here are built, not literals: this file is
		// itself read by TestDocsCiteOnlyExistingTests.
		{"no" + "such" + "case", false},
		{"any" + "thing", false}, // "%s/%d" has too little text to name a subtest
		{"a " + "b", false},      // "a " is too short a start
	} {
		if got := subs.Has(tc.sub); got != tc.want {
			t.Errorf("Has(%q) = %v, want %v", tc.sub, got, tc.want)
		}
	}
}
