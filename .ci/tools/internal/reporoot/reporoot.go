// Package reporoot finds the repository the tools check: the nearest
// directory, from the working directory up, whose go.mod declares the
// library's root module. The tools module lives inside the repository
// (under .ci/tools), so its tests find the code they check from wherever
// `go test` runs them.
package reporoot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// ModulePath is the module path of the library's root module.
const ModulePath = "github.com/ctoken/ctoken"

// Find returns the absolute path of the nearest directory at or above the
// working directory whose go.mod declares [ModulePath].
func Find() (string, error) { return From(".") }

// From returns the absolute path of the nearest directory at or above dir
// whose go.mod declares [ModulePath]. A go.mod of another module on the way
// (the tools module's own) is passed over.
func From(dir string) (string, error) {
	start, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for dir = start; ; {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(b) == ModulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod declaring " + ModulePath + " at or above " + start)
		}
		dir = parent
	}
}

// modulePath returns the path on the module line of a go.mod, or "".
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}
