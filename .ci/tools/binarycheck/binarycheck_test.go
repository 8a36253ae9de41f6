package binarycheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"tools/internal/reporoot"
)

// repo returns the repository root, skipping when git cannot read it (a
// source tarball): CI runs on a clone, where these tests always run.
func repo(t *testing.T) string {
	t.Helper()
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on PATH")
	}
	if _, err := git(root, "rev-parse", "--git-dir"); err != nil {
		t.Skipf("%s is not a git work tree: %v", root, err)
	}
	return root
}

// TestNoTrackedFileIsABinary fails on every file git tracks that starts
// with an ELF, Mach-O or PE header, naming it.
func TestNoTrackedFileIsABinary(t *testing.T) {
	findings, err := Tracked(repo(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Error(f)
	}
}

// TestGitignoreIgnoresEveryMainPackagesBinary fails on each main package
// whose `go build` output (in its directory, named after it, .exe too)
// .gitignore does not ignore.
func TestGitignoreIgnoresEveryMainPackagesBinary(t *testing.T) {
	root := repo(t)
	dirs, err := MainPackageDirs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cmd/ctoken", "examples/quickstart", ".ci/tools/apicheck"} {
		if !slices.Contains(dirs, want) {
			t.Fatalf("MainPackageDirs found %v, not %s: the walk is broken", dirs, want)
		}
	}
	var outputs []string
	for _, d := range dirs {
		outputs = append(outputs, BuildOutputs(d)...)
	}
	not, err := Unignored(root, outputs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range not {
		t.Errorf("%s: the binary go build leaves there is not ignored: add it to .gitignore", p)
	}
}

// TestKindRecognisesEachExecutableHeader pins the headers [Kind] names
// and the near misses it does not.
func TestKindRecognisesEachExecutableHeader(t *testing.T) {
	dosHeader := append([]byte("MZ\x90\x00\x03\x00\x00\x00"), make([]byte, 56)...)
	for _, tc := range []struct {
		name string
		head string
		want string
	}{
		{"ELF", "\x7fELF\x02\x01\x01\x00", "ELF"},
		{"Mach-O 32-bit", "\xfe\xed\xfa\xce\x00\x00\x00\x07", "Mach-O"},
		{"Mach-O 64-bit", "\xfe\xed\xfa\xcf\x01\x00\x00\x07", "Mach-O"},
		{"Mach-O 32-bit byte-swapped", "\xce\xfa\xed\xfe\x07\x00\x00\x00", "Mach-O"},
		{"Mach-O 64-bit byte-swapped (arm64, amd64 on disk)", "\xcf\xfa\xed\xfe\x0c\x00\x00\x01", "Mach-O"},
		{"Mach-O universal", "\xca\xfe\xba\xbe\x00\x00\x00\x02", "Mach-O universal"},
		{"Mach-O universal 64", "\xca\xfe\xba\xbf\x00\x00\x00\x02", "Mach-O universal"},
		{"PE", string(dosHeader), "PE (MZ)"},
		{"text starting with MZ", "MZ is a postal code in this fixture, and nothing else at all.\n", ""},
		{"ELF without its DEL byte", "ELF binaries are described here", ""},
		{"shell script", "#!/bin/sh\necho hi\n", ""},
		{"Go source", "package main\n", ""},
		{"short file", "\x7fEL", ""},
		{"empty file", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Kind([]byte(tc.head)); got != tc.want {
				t.Errorf("Kind(%q) = %q, want %q", tc.head, got, tc.want)
			}
		})
	}
}

// TestTrackedNamesOnlyTrackedBinaries runs [Tracked] on a scratch
// repository: a binary in the index is named, with its kind; the same
// bytes untracked, a text file and a tracked file deleted from the work
// tree are not.
func TestTrackedNamesOnlyTrackedBinaries(t *testing.T) {
	repo(t) // git is there
	root := t.TempDir()
	if _, err := git(root, "init", "-q"); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	elf := "\x7fELF\x02\x01\x01\x00" + string(make([]byte, 120))
	write("cmd/tool/tool", elf)
	write("cmd/tool/main.go", "package main\n\nfunc main() {}\n")
	write("gone.exe", "MZ\x90\x00"+string(make([]byte, 60)))
	if _, err := git(root, "add", "cmd/tool/tool", "cmd/tool/main.go", "gone.exe"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "gone.exe")); err != nil {
		t.Fatal(err)
	}
	write("untracked/tool", elf)

	got, err := Tracked(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Finding{{Path: "cmd/tool/tool", Kind: "ELF"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Tracked = %v, want %v", got, want)
	}

	dirs, err := MainPackageDirs(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cmd/tool"}; !reflect.DeepEqual(dirs, want) {
		t.Fatalf("MainPackageDirs = %v, want %v", dirs, want)
	}
	write(".gitignore", "/cmd/tool/tool\n")
	not, err := Unignored(root, BuildOutputs("cmd/tool"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cmd/tool/tool.exe"}; !reflect.DeepEqual(not, want) {
		t.Fatalf("Unignored = %v, want %v", not, want)
	}
}
