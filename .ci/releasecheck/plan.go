package main

import (
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// published reports whether the module in dir (slash path relative to the
// repository root, as go.work names it) is tagged and published: every
// module go.work uses except tooling under dot directories (.ci/*), the
// peer benchmarks (bench), the examples (examples/*) and the test-only
// driver suites (*/drivertest: sqlitestore's). A new module is
// published unless it is added here, so a release cannot forget it.
func published(dir string) bool {
	switch {
	case dir == ".":
		return true
	case strings.HasPrefix(dir, "."), dir == "bench", dir == "examples", strings.HasPrefix(dir, "examples/"),
		strings.HasSuffix(dir, "/drivertest"):
		return false
	}
	return true
}

// tag is the git tag of the module in dir at version.
func tag(dir, version string) string {
	if dir == "." {
		return version
	}
	return dir + "/" + version
}

// layers orders the published modules for tagging: layer 0 requires no
// module of this repository, and each later layer only modules of earlier
// layers, so every module's requirements are tagged (and their checksums
// can be recorded) before it is tagged. A requirement cycle is an error.
func layers(mods []modInfo) ([][]modInfo, error) {
	ours := map[string]bool{}
	for _, m := range mods {
		ours[m.path] = true
	}
	done := map[string]bool{}
	var out [][]modInfo
	left := mods
	for len(left) > 0 {
		var layer, rest []modInfo
		for _, m := range left {
			ready := true
			for _, r := range m.file.Require {
				if ours[r.Mod.Path] && !done[r.Mod.Path] {
					ready = false
				}
			}
			if ready {
				layer = append(layer, m)
			} else {
				rest = append(rest, m)
			}
		}
		if len(layer) == 0 {
			return nil, errors.New("the modules of this repository require each other in a cycle: no tagging order")
		}
		for _, m := range layer {
			done[m.path] = true
		}
		out, left = append(out, layer), rest
	}
	return out, nil
}

// plan writes the commands that release every module go.work uses at
// version: the requirement bump (every module, published or not, and
// go.work's replaces), then the tags, layer by layer, each later layer after
// recording its requirements' checksums. mods is [modules]' list and work
// the go.work file.
func plan(w io.Writer, mods []modInfo, work *modfile.WorkFile, version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version || semver.Prerelease(version) != "" {
		return fmt.Errorf("-plan %q: want a release version vX.Y.Z", version)
	}
	ours := map[string]string{} // module path -> dir
	var pub []modInfo
	for _, m := range mods {
		ours[m.path] = m.dir
		if published(m.dir) {
			pub = append(pub, m)
		}
	}
	fmt.Fprintf(w, "# Release %s: the published modules of go.work (bench, examples/* and .ci/* are not published)\n", version)
	for _, m := range pub {
		fmt.Fprintf(w, "#   %-48s tag %s\n", m.path, tag(m.dir, version))
	}
	fmt.Fprintf(w, "\n# Step 2: bump every requirement on a module of this repository, and go.work's replaces; commit; run the release check.\n")
	for _, m := range mods {
		var reqs []string
		for _, r := range m.file.Require {
			if _, ok := ours[r.Mod.Path]; ok && r.Mod.Version != version {
				reqs = append(reqs, "-require "+r.Mod.Path+"@"+version)
			}
		}
		if len(reqs) > 0 {
			fmt.Fprintf(w, "(cd %s && go mod edit %s)\n", m.dir, strings.Join(reqs, " "))
		}
	}
	var repl []string
	for _, r := range work.Replace {
		dir, ok := ours[r.Old.Path]
		if !ok || r.Old.Version == "" || r.Old.Version == version {
			continue
		}
		repl = append(repl, fmt.Sprintf("-dropreplace %s@%s -replace %s@%s=./%s", r.Old.Path, r.Old.Version, r.Old.Path, version, strings.TrimPrefix(path.Clean(dir), ".")))
	}
	sort.Strings(repl)
	if len(repl) > 0 {
		fmt.Fprintf(w, "go work edit %s\n", strings.Join(repl, " "))
	}
	fmt.Fprintf(w, "git commit -am 'release %s: require %s'\nbash .ci/release-check.sh\n", version, version)
	ls, err := layers(pub)
	if err != nil {
		return err
	}
	step := 3
	tidy := func(ms []modInfo, what string) {
		fmt.Fprintf(w, "\n# Step %d: record the checksums of the tags just pushed in %s; each must build outside the workspace; commit.\n", step, what)
		step++
		for _, m := range ms {
			fmt.Fprintf(w, "(cd %s && GOWORK=off go mod tidy && GOWORK=off go build ./...)\n", m.dir)
		}
		fmt.Fprintf(w, "git commit -am 'release %s: go.sum of %s'\n", version, what)
	}
	for i, layer := range ls {
		var tags, dirs []string
		for _, m := range layer {
			tags = append(tags, tag(m.dir, version))
			dirs = append(dirs, m.dir)
		}
		if i > 0 {
			tidy(layer, strings.Join(dirs, " "))
		}
		fmt.Fprintf(w, "\n# Step %d: tag %s\n", step, strings.Join(dirs, " "))
		step++
		for _, t := range tags {
			fmt.Fprintf(w, "git tag %s\n", t)
		}
		fmt.Fprintf(w, "git push origin %s\n", strings.Join(tags, " "))
	}
	var unpub []modInfo
	var udirs []string
	for _, m := range mods {
		if !published(m.dir) && len(m.file.Require) > 0 && requiresOurs(m, ours) {
			unpub = append(unpub, m)
			udirs = append(udirs, m.dir)
		}
	}
	if len(unpub) > 0 {
		tidy(unpub, "the untagged modules "+strings.Join(udirs, " "))
	}
	return nil
}

// requiresOurs reports whether m requires a module of this repository.
func requiresOurs(m modInfo, ours map[string]string) bool {
	for _, r := range m.file.Require {
		if _, ok := ours[r.Mod.Path]; ok {
			return true
		}
	}
	return false
}
