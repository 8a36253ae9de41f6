package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// repoModules reads the repository's own go.work, as -plan does.
func repoModules(t *testing.T) ([]modInfo, *modfile.WorkFile) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := modules(root)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	return mods, wf
}

func TestPublishedModulesExcludeOnlyToolingBenchAndExamples(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want bool
	}{
		{".", true}, {"mcp", true}, {"pgstore", true}, {"otel", true},
		{"protopage", true}, {"protopage/grpcpage", true}, {"protopage/connectpage", true},
		{"a-new-module", true},
		{"bench", false}, {"examples", false}, {"examples/exchange", false}, {".ci/releasecheck", false}, {".tools", false},
		{"sqlitestore", true}, {"sqlitestore/drivertest", false},
		{"benchmarks", true}, {"examplesx", true},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			if got := published(tc.dir); got != tc.want {
				t.Fatalf("published(%q) = %v, want %v", tc.dir, got, tc.want)
			}
		})
	}
}

// TestPlanBumpsAndTagsEveryPublishedModuleOfGoWork runs -plan on this
// repository's go.work: every published module is bumped and tagged once,
// each after the modules of ours it requires; bench and examples/exchange
// are bumped and tidied but never tagged; go.work's replaces move too.
func TestPlanBumpsAndTagsEveryPublishedModuleOfGoWork(t *testing.T) {
	mods, wf := repoModules(t)
	var b strings.Builder
	if err := plan(&b, mods, wf, "v9.8.7"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	tagLine := map[string]int{}
	for i, l := range lines {
		if t, ok := strings.CutPrefix(l, "git tag "); ok {
			tagLine[t] = i
		}
	}
	want := []string{"v9.8.7", "mcp/v9.8.7", "mcpgo/v9.8.7", "otel/v9.8.7", "pgstore/v9.8.7", "protopage/v9.8.7",
		"protopage/connectpage/v9.8.7", "protopage/grpcpage/v9.8.7", "redisstore/v9.8.7", "sqlitestore/v9.8.7",
		"sqlitestore/cmd/ctoken-sqlite/v9.8.7"}
	for _, tg := range want {
		if _, ok := tagLine[tg]; !ok {
			t.Errorf("no tag %s in the plan", tg)
		}
	}
	if len(tagLine) != len(want) {
		t.Errorf("%d tags, want %d: %v", len(tagLine), len(want), tagLine)
	}
	for _, m := range mods {
		bump := "(cd " + m.dir + " && go mod edit "
		if m.dir != "." && !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, bump) }) {
			t.Errorf("%s is not bumped", m.dir)
		}
		for _, r := range m.file.Require {
			if r.Mod.Path == rootPath || strings.HasPrefix(r.Mod.Path, rootPath+"/") {
				if !strings.Contains(out, "-require "+r.Mod.Path+"@v9.8.7") {
					t.Errorf("%s: its requirement on %s is not bumped", m.dir, r.Mod.Path)
				}
				// Tagged after what it requires (published modules only).
				if published(m.dir) {
					dep := strings.TrimPrefix(strings.TrimPrefix(r.Mod.Path, rootPath), "/")
					depTag := "v9.8.7"
					if dep != "" {
						depTag = dep + "/v9.8.7"
					}
					if tagLine[tag(m.dir, "v9.8.7")] <= tagLine[depTag] {
						t.Errorf("%s is tagged before %s, which it requires", m.dir, depTag)
					}
				}
			}
		}
	}
	for _, r := range wf.Replace {
		if strings.HasPrefix(r.Old.Path, rootPath) && r.Old.Version != "" &&
			!strings.Contains(out, "-replace "+r.Old.Path+"@v9.8.7=") {
			t.Errorf("go.work's replace of %s is not moved", r.Old.Path)
		}
	}
	for _, unpub := range []string{"bench", "examples/exchange"} {
		if _, ok := tagLine[unpub+"/v9.8.7"]; ok {
			t.Errorf("%s is tagged", unpub)
		}
		if !strings.Contains(out, "(cd "+unpub+" && GOWORK=off go mod tidy") {
			t.Errorf("%s's go.sum is not recorded", unpub)
		}
	}
}

func TestPlanRefusesWhatIsNotAReleaseVersion(t *testing.T) {
	mods, wf := repoModules(t)
	for _, v := range []string{"", "1.2.3", "v1.2", "v1.2.3-rc.1", "v1.2.3+meta", "latest"} {
		t.Run(v, func(t *testing.T) {
			if err := plan(&strings.Builder{}, mods, wf, v); err == nil {
				t.Fatalf("plan(%q) succeeded", v)
			}
		})
	}
}

func TestLayersRefuseACycle(t *testing.T) {
	parse := func(path, req string) modInfo {
		f, err := modfile.Parse("go.mod", []byte("module "+path+"\nrequire "+req+" v1.0.0\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		return modInfo{dir: strings.TrimPrefix(path, rootPath+"/"), path: path, file: f}
	}
	a, b := parse(rootPath+"/a", rootPath+"/b"), parse(rootPath+"/b", rootPath+"/a")
	if _, err := layers([]modInfo{a, b}); err == nil {
		t.Fatal("a cycle got a tagging order")
	}
}

// TestReleasingListsEveryPublishedModule holds RELEASING.md's module table
// to go.work: one row per published module, with its directory and tag.
func TestReleasingListsEveryPublishedModule(t *testing.T) {
	mods, _ := repoModules(t)
	data, err := os.ReadFile("../../RELEASING.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "| `github.com/ctoken/ctoken") {
			rows = append(rows, l)
		}
	}
	var want []string
	for _, m := range mods {
		if !published(m.dir) {
			continue
		}
		dir := "."
		if m.dir != "." {
			dir = m.dir + "/"
		}
		want = append(want, "| `"+m.path+"` | `"+dir+"` | `"+tag(m.dir, "vX.Y.Z")+"` |")
	}
	slices.Sort(rows)
	slices.Sort(want)
	if !slices.Equal(rows, want) {
		t.Fatalf("RELEASING.md lists\n%s\nbut go.work publishes\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
}
