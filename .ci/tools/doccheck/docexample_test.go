package doccheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPackageDocsOpenWithCode holds every published package to
// [DocExampleProblems]: a code block a doc says is an Example's body is
// that body, and the packages of [OpenWithCode] open with one.
func TestPackageDocsOpenWithCode(t *testing.T) {
	statSources(t)
	pkgs, err := Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, p := range pkgs {
		dirs = append(dirs, p.Dir)
	}
	for _, want := range OpenWithCode {
		if !slices.Contains(dirs, want) {
			t.Fatalf("Packages found %v, not %s", dirs, want)
		}
	}
	for _, p := range pkgs {
		t.Run(p.Dir, func(t *testing.T) {
			for _, problem := range DocExampleProblems(p, slices.Contains(OpenWithCode, p.Dir)) {
				t.Errorf("%s (package %s): %s", p.Dir, p.Name, problem)
			}
		})
	}
}

// TestDocExampleProblemsRefusesCodeThatIsNotTheExample writes one package
// per case and pins each rejection of [DocExampleProblems], and the docs it
// accepts.
func TestDocExampleProblemsRefusesCodeThatIsNotTheExample(t *testing.T) {
	const example = "package p_test\n\nimport \"fmt\"\n\nfunc ExampleGreet() {\n\tname := \"Ada\"\n\n\tfmt.Println(\"hello\", name)\n\t// Output: hello Ada\n}\n"
	// tagged is built only with a tag go test is not given; ExampleSilent
	// has no output comment; ExampleLower's is lower case, which go test
	// reads.
	const tagged = "//go:build never\n\npackage p_test\n\nimport \"fmt\"\n\nfunc ExampleTagged() {\n\tfmt.Println(\"hello\")\n\t// Output: hello\n}\n"
	const example2 = "\nfunc ExampleSilent() {\n\tfmt.Println(\"hello\")\n}\n\nfunc ExampleLower() {\n\tfmt.Println(\"hello\")\n\t// output: hello\n}\n"
	const opening = "// Package p greets.\n//\n// Greet someone (ExampleGreet):\n//\n//\tname := \"Ada\"\n//\n//\tfmt.Println(\"hello\", name)\n//\n// # Details\n//\n// More.\npackage p\n"
	cases := []struct {
		name  string
		doc   string
		opens bool
		want  string // a substring of the one problem, "" for none
	}{
		{"the Example's body before the first heading", opening, true, ""},
		{"the same in a package that need not open with code", opening, false, ""},
		{"no code block", "// Package p greets.\npackage p\n", true, "does not open with code"},
		{"no code block, not required", "// Package p greets.\npackage p\n", false, ""},
		{"the block only after a heading",
			"// Package p greets.\n//\n// # Details\n//\n// Greet someone (ExampleGreet):\n//\n//\tname := \"Ada\"\n//\n//\tfmt.Println(\"hello\", name)\npackage p\n",
			true, "does not open with code"},
		{"a block that drifted from the Example",
			"// Package p greets.\n//\n// Greet someone (ExampleGreet):\n//\n//\tname := \"Bob\"\n//\n//\tfmt.Println(\"hello\", name)\npackage p\n",
			false, "is not that Example's body"},
		{"a block naming an Example no test declares",
			"// Package p greets.\n//\n// Greet someone (ExampleWave):\n//\n//\tfmt.Println(\"hello\")\npackage p\n",
			false, "ExampleWave, which is not an Example go test runs"},
		{"a block naming an Example in a file go test does not build",
			"// Package p greets.\n//\n// Greet someone (ExampleTagged):\n//\n//\tfmt.Println(\"hello\")\npackage p\n",
			false, "ExampleTagged, which is not an Example go test runs"},
		{"a block naming an Example without an output comment (compiled, never run)",
			"// Package p greets.\n//\n// Greet someone (ExampleSilent):\n//\n//\tfmt.Println(\"hello\")\npackage p\n",
			false, "ExampleSilent, which is not an Example go test runs"},
		{"an Example whose output comment is lower case",
			"// Package p greets.\n//\n// Greet someone (ExampleLower):\n//\n//\tfmt.Println(\"hello\")\npackage p\n",
			false, ""},
		{"a block without an introducing Example is not checked",
			"// Package p greets.\n//\n// The wire format:\n//\n//\tp1.<base64>\npackage p\n",
			false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, src := range map[string]string{"p.go": tc.doc + "\nfunc Greet() {}\n", "p_test.go": example + example2, "tagged_test.go": tagged} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			pkgs, err := Packages(dir)
			if err != nil || len(pkgs) != 1 {
				t.Fatalf("Packages: %d, %v", len(pkgs), err)
			}
			problems := DocExampleProblems(pkgs[0], tc.opens)
			switch {
			case tc.want == "" && len(problems) != 0:
				t.Errorf("refused: %q", problems)
			case tc.want != "" && (len(problems) != 1 || !strings.Contains(problems[0], tc.want)):
				t.Errorf("problems %q, want one containing %q", problems, tc.want)
			}
		})
	}
}
