package doccheck

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestUserPagesNameTestsOnlyInTestedByLists fails on every test name that
// a page of [TestedByPages] cites outside its "Tested by" lists, at its
// file and line.
func TestUserPagesNameTestsOnlyInTestedByLists(t *testing.T) {
	cited := 0
	for _, f := range TestedByPages {
		md, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		cited += len(Citations(f, md))
		for _, n := range Inline(f, md) {
			t.Error(n)
		}
	}
	if cited < 100 {
		t.Fatalf("the converted pages cite %d test names: the extraction is broken", cited)
	}
}

// TestEveryUserPageIsATestedByPage fails on a page under docs/ (other
// than the contributors' docs/contributing/) that is not on
// [TestedByPages]: a new page is held to the rule from its first commit,
// not exempt until someone adds it to the list.
func TestEveryUserPageIsATestedByPage(t *testing.T) {
	listed := map[string]bool{}
	for _, f := range TestedByPages {
		listed[f] = true
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md found: the test is broken")
	}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		if rel = filepath.ToSlash(rel); !listed[rel] {
			t.Errorf("%s is a user page but not on TestedByPages (.ci/tools/doccheck/testedby.go): add it", rel)
		}
	}
}

// TestInlineRefusesNamesOutsideTestedByLists pins what counts as a
// "Tested by" list and what is prose.
func TestInlineRefusesNamesOutsideTestedByLists(t *testing.T) {
	for _, tc := range []struct {
		name   string
		md     string
		inline []int // the lines of the names reported
	}{
		{
			name:   "a name in the prose fails",
			md:     "# Page\n\nA cursor is refused (`TestCursorVerify`).\n",
			inline: []int{3},
		},
		{
			name: "a Tested by paragraph passes",
			md:   "# Page\n\nA cursor is refused.\n\nTested by: `TestCursorVerify`,\n`TestStateRoundTrip/expired`.\n",
		},
		{
			name: "a Tested by: line and the list after it pass",
			md:   "Tested by:\n\n- expiry: `TestA`;\n- scope:\n  `TestB`;\n\n- replay: `TestC`.\n",
		},
		{
			name:   "a paragraph after the list is prose again",
			md:     "Tested by:\n\n- expiry: `TestA`.\n\nThen `TestB` in the prose.\n",
			inline: []int{5},
		},
		{
			name:   "the next list item after a Tested by paragraph in an item is prose",
			md:     "- A cursor is refused.\n\n  Tested by: `TestA`.\n- A state is refused (`TestB`).\n",
			inline: []int{4},
		},
		{
			name:   "a list after a Tested by paragraph with names is prose",
			md:     "Tested by: `TestA`.\n\n- and `TestB`\n",
			inline: []int{3},
		},
		{
			name:   "a heading ends the list",
			md:     "Tested by:\n- `TestA`\n## Next\n- `TestB`\n",
			inline: []int{4},
		},
		{
			name:   "Tested by in the middle of a paragraph is prose",
			md:     "It holds.\nTested by: `TestA`.\n",
			inline: []int{2},
		},
		{
			name: "names in fenced code are not citations",
			md:   "```sh\ngo test -run TestA ./...\n```\n",
		},
		{
			name:   "a name in a table fails",
			md:     "| case | test |\n|---|---|\n| expiry | `TestA` |\n",
			inline: []int{3},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			for _, n := range Inline("x.md", []byte(tc.md)) {
				got = append(got, n.Line)
				if s := n.String(); !strings.HasPrefix(s, "x.md:") || !strings.Contains(s, n.Name) || !strings.Contains(s, "Tested by:") {
					t.Errorf("String() = %q: want file:line, the name and the fix", s)
				}
			}
			if !reflect.DeepEqual(got, tc.inline) {
				t.Errorf("Inline lines = %v, want %v", got, tc.inline)
			}
		})
	}
}
