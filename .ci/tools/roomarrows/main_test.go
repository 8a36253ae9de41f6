package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The counts on a room of three files: c.go names a.go's type, a.go
// names b.go's function and b.go names a.go's: one arrow of the cycle
// runs back up in any order, and the path from Start stays in the
// declarations it reaches.
func TestCounts(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"go.mod": "module room\n\ngo 1.24\n",
		"a.go":   "package room\n\ntype T struct{ n int }\n\nfunc Start() int { return helper() }\n\nfunc (t T) M() int { return t.n }\n",
		"b.go":   "package room\n\nfunc helper() int { return T{}.M() }\n\nfunc unused() {}\n",
		"c.go":   "package room\n\nvar _ T\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	arrows := r.arrows()
	if len(arrows) != 3 {
		t.Fatalf("arrows %v; want a->b, b->a, c->a", arrows)
	}
	order := bestOrder(r.files, arrows)
	if n := len(backUp(order, arrows)); n != 1 {
		t.Fatalf("order %v leaves %d arrows back up; want 1", order, n)
	}
	if n := len(backUp([]string{"a.go", "b.go", "c.go"}, arrows)); n != 2 {
		t.Fatalf("alphabetical order leaves %d arrows back up; want 2 (b->a, c->a)", n)
	}
	for _, tc := range []struct {
		funcs        bool
		stays, files int
	}{
		{false, 4, 2}, // Start, helper, T, T.M
		{true, 3, 2},  // Start, helper, T.M
	} {
		stays, files, err := r.path("Start", tc.funcs)
		if err != nil || stays != tc.stays || files != tc.files {
			t.Fatalf("path from Start (funcs %v) = %d stays in %d files, %v; want %d in %d", tc.funcs, stays, files, err, tc.stays, tc.files)
		}
	}
	if _, _, err := r.path("Missing", false); err == nil {
		t.Fatal("path from a missing declaration: no error")
	}
}
