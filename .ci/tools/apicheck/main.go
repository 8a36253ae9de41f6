// Command apicheck keeps the exported API of every published package of
// the repository in checked-in files, so that an API change is a diff a
// reviewer sees (RELEASING.md, "Reviewing an API change"), as the Go
// project's api/ files do for the standard library.
//
//	cd .ci/tools && go run ./apicheck -w      # regenerate the api/ files
//	cd .ci/tools && go run ./apicheck         # compare; exit 1 on a difference
//	cd .ci/tools && go run ./apicheck -count  # the root package's counts
//
// The test of this package (go test ./apicheck, which .ci/run runs) fails
// when the files and the code disagree, naming each added and removed line.
//
// # Which packages are published
//
// A module is published when its directory holds a go.mod and no element
// of its path is testdata, vendor, bench, examples or drivertest (the
// test-only sqlitestore/drivertest), nor starts with "." or "_" (so
// .ci/releasecheck and .ci/tools are not): the root module, mcp, mcpgo,
// otel, pgstore, redisstore, sqlitestore, protopage and its grpcpage and
// connectpage. In a published module, every package go list ./... reports
// (which leaves out testdata and directories starting with "." or "_") is
// published except a main package (cmd/ctoken, the examples' servers) and
// one with an element internal, testdata, examples, cmd or bench in its
// path below the module. The test-helper packages observe/observetest and
// replay/replaytest are published: a user's tests import them, as they
// import net/http/httptest.
//
// # The files
//
// One file per published module: api/ctoken.txt for the root module and
// api/<module directory>.txt for a nested one (api/mcp.txt,
// api/protopage/grpcpage.txt). Each holds one line per exported
// identifier, sorted, in the form of Go's api/go1.txt:
//
//	pkg github.com/ctoken/ctoken, const MaxCursorBytes = 512
//	pkg github.com/ctoken/ctoken, const MaxCursorBytes untyped int
//	pkg github.com/ctoken/ctoken, func NewKeyring([]uint8, ...[]uint8) (*Keyring, error)
//	pkg github.com/ctoken/ctoken, method (*CursorIssuer) Verify(string, CursorScope) (CursorPayload, error)
//	pkg github.com/ctoken/ctoken, type CursorConfig struct
//	pkg github.com/ctoken/ctoken, type CursorConfig struct, Seal bool
//	pkg github.com/ctoken/ctoken, var ErrConfig error
//
// A constant has two lines, its value and its type. A struct has a line
// per exported or embedded field; an interface has a summary line naming
// its methods (and "unexported methods" when it has some, so it cannot be
// implemented elsewhere) and a line per exported method. A type's methods
// are those of its method sets, promoted ones included, each with the
// receiver T or *T of the smallest method set holding it. Parameter names
// are left out (renaming one is no API change); byte and rune are spelled
// uint8 and int32, aliases are resolved (any stays any), the package's own
// types are unqualified and another package's are qualified by its name,
// or by its import path when that name is the package's own.
//
// Types come from each package's export data, compiled by the go command in
// the package's own module (in the repository's go.work), so signatures are
// exact. The output depends only on the code: the same tree gives the same
// files.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"tools/internal/reporoot"
)

func main() {
	write := flag.Bool("w", false, "regenerate the api/ files")
	count := flag.Bool("count", false, "print the counts of the root package (or of the import paths given as arguments)")
	rootFlag := flag.String("root", "", "the repository root (default: found from the working directory)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./apicheck [-root DIR] [-w | -count [import path...]]")
		flag.PrintDefaults()
	}
	flag.Parse()
	root := *rootFlag
	if root == "" {
		r, err := reporoot.Find()
		if err != nil {
			fail(err)
		}
		root = r
	}
	mods, err := Modules(root)
	if err != nil {
		fail(err)
	}
	switch {
	case *count:
		paths := flag.Args()
		if len(paths) == 0 {
			paths = []string{reporoot.ModulePath}
		}
		if err := printCounts(root, mods, paths); err != nil {
			fail(err)
		}
	case *write:
		files, err := Generate(root, mods)
		if err == nil {
			err = Write(root, files)
		}
		if err != nil {
			fail(err)
		}
	default:
		report, err := Check(root, mods, true)
		if err != nil {
			fail(err)
		}
		if report != "" {
			fmt.Fprint(os.Stderr, report)
			os.Exit(1)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}

// UpdateCommand regenerates the API files.
const UpdateCommand = "cd .ci/tools && go run ./apicheck -w"

// Check regenerates the API files of the modules mods under root and
// compares them with the checked-in ones. It returns "" when they agree,
// else a report naming each file that differs and each added and removed
// line, how to update the files and that the change needs review. With
// all, a checked-in file of no module in mods is reported as removed.
func Check(root string, mods []string, all bool) (string, error) {
	files, err := Generate(root, mods)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	if all {
		existing, err := Existing(root)
		if err != nil {
			return "", err
		}
		for _, n := range existing {
			if _, ok := files[n]; !ok {
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		var want []byte
		if w, err := os.ReadFile(root + "/" + n); err == nil {
			want = w
		} else if !os.IsNotExist(err) {
			return "", err
		}
		added, removed := Diff(Parse(want), Parse(files[n]))
		if len(added)+len(removed) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s: the exported API differs from the file (%d added, %d removed):\n", n, len(added), len(removed))
		for _, l := range added {
			fmt.Fprintf(&b, "\tadded: %s\n", l)
		}
		for _, l := range removed {
			fmt.Fprintf(&b, "\tremoved: %s\n", l)
		}
	}
	if b.Len() == 0 {
		return "", nil
	}
	fmt.Fprintf(&b, "An API change needs review (RELEASING.md, \"Reviewing an API change\"): "+
		"regenerate the files with\n\t%s\nand commit them with the change.\n", UpdateCommand)
	return b.String(), nil
}
