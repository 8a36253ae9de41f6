// Package binarycheck keeps compiled programs out of the repository. A
// binary `go build` leaves in a main package's directory is easy to commit
// with `git add .`: it bloats every clone for ever and is code no reviewer
// can read. TestNoTrackedFileIsABinary fails on every file `git ls-files`
// lists whose first bytes are an executable's header ([Kind]), naming the
// file; TestGitignoreIgnoresEveryMainPackagesBinary fails when .gitignore
// does not ignore the binary `go build` would leave in a main package's
// directory (named after the directory, or with .exe on Windows).
package binarycheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// HeaderLen is how many leading bytes [Kind] needs to recognise a header.
const HeaderLen = 64

// Kind names the executable format whose header head (a file's first
// bytes, up to [HeaderLen]) starts with, or returns "" for anything else:
//
//   - ELF: 0x7f 'E' 'L' 'F';
//   - Mach-O: FEEDFACE, FEEDFACF (32- and 64-bit) and their byte-swapped
//     CEFAEDFE, CFFAEDFE;
//   - Mach-O universal ("fat"): CAFEBABE, CAFEBABF (CAFEBABE also opens a
//     Java class file, a compiled binary too);
//   - PE and DOS executables: "MZ" followed, within the 64-byte DOS header,
//     by a NUL byte (every real header has them; a text file starting with
//     the letters "MZ" has none).
func Kind(head []byte) string {
	if len(head) > HeaderLen {
		head = head[:HeaderLen]
	}
	if bytes.HasPrefix(head, []byte("\x7fELF")) {
		return "ELF"
	}
	if len(head) >= 4 {
		switch string(head[:4]) {
		case "\xfe\xed\xfa\xce", "\xfe\xed\xfa\xcf", "\xce\xfa\xed\xfe", "\xcf\xfa\xed\xfe":
			return "Mach-O"
		case "\xca\xfe\xba\xbe", "\xca\xfe\xba\xbf":
			return "Mach-O universal"
		}
	}
	if bytes.HasPrefix(head, []byte("MZ")) && bytes.IndexByte(head[2:], 0) >= 0 {
		return "PE (MZ)"
	}
	return ""
}

// A Finding is a tracked file with an executable's header.
type Finding struct {
	Path string // relative to the repository root, slash-separated
	Kind string // as [Kind] names it
}

// String describes the finding and how to remove the binary from git.
func (f Finding) String() string {
	return fmt.Sprintf("%s: a committed %s binary: git rm --cached it (and ignore it in .gitignore)", f.Path, f.Kind)
}

// Tracked returns the files of the git work tree at root that git tracks
// and whose first bytes are an executable's header. Files listed but
// missing from the work tree, symbolic links and other non-regular files
// are passed over.
func Tracked(root string) ([]Finding, error) {
	out, err := git(root, "ls-files", "-z")
	if err != nil {
		return nil, err
	}
	var findings []Finding
	for _, p := range strings.Split(strings.TrimSuffix(out, "\x00"), "\x00") {
		if p == "" {
			continue
		}
		kind, err := fileKind(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if kind != "" {
			findings = append(findings, Finding{Path: p, Kind: kind})
		}
	}
	return findings, nil
}

// fileKind returns [Kind] of the first bytes of the regular file at path,
// or "" when there is none.
func fileKind(path string) (string, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil // deleted in the work tree, not yet in the index
	}
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, HeaderLen)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	return Kind(head[:n]), nil
}

// skipped are the directory names [MainPackageDirs] does not enter.
var skipped = []string{".git", "node_modules", "vendor"}

// MainPackageDirs returns the directories under root (relative,
// slash-separated, sorted) holding a non-test Go file of package main,
// outside .git, node_modules and vendor. A file excluded from every build
// by a `//go:build ignore` line (a generator run with go run) does not
// count.
func MainPackageDirs(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && slices.Contains(skipped, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		main, err := isMain(p)
		if err != nil || !main {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		if rel = filepath.ToSlash(rel); !slices.Contains(dirs, rel) {
			dirs = append(dirs, rel)
		}
		return nil
	})
	slices.Sort(dirs)
	return dirs, err
}

// isMain reports whether the Go file at path declares package main and
// carries no `//go:build ignore` line before its package clause.
func isMain(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "//go:build ") && slices.Contains(strings.Fields(line), "ignore") {
			return false, nil
		}
		if rest, ok := strings.CutPrefix(line, "package "); ok {
			return strings.Fields(rest)[0] == "main", nil
		}
	}
	return false, sc.Err()
}

// BuildOutputs returns the paths (relative to the repository root) of
// the binaries `go build` leaves when run in the main package directory
// dir: the directory's name, and the same with .exe for Windows. (Every
// main package here is named after its directory's last element, which
// is what go build names the binary after.)
func BuildOutputs(dir string) []string {
	bin := dir + "/" + filepath.Base(filepath.FromSlash(dir))
	return []string{bin, bin + ".exe"}
}

// Unignored returns those of paths (relative to root, slash-separated)
// that the repository's ignore rules (.gitignore and the rest git reads)
// do not ignore, whether or not the files exist or are tracked.
func Unignored(root string, paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	out, err := gitIn(root, strings.Join(paths, "\x00")+"\x00", "check-ignore", "--no-index", "-z", "--stdin")
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) { // 1: none ignored
		return nil, err
	}
	ignored := map[string]bool{}
	for _, p := range strings.Split(out, "\x00") {
		ignored[p] = true
	}
	var not []string
	for _, p := range paths {
		if !ignored[p] {
			not = append(not, p)
		}
	}
	return not, nil
}

// git runs git with args in root and returns its standard output.
func git(root string, args ...string) (string, error) { return gitIn(root, "", args...) }

// gitIn is git with stdin as its standard input.
func gitIn(root, stdin string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}
