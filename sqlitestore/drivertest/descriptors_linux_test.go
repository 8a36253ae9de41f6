//go:build linux

package drivertest

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
)

// TestStoreKeepsNoDescriptorOfTheApplication: a Store reads the database
// file through a descriptor on an OS thread with a table of its own
// (unshare(CLONE_FILES), which copies the process's table); the copies of
// the application's descriptors are closed there at once. So a pipe, a
// child's input and a listener that the application closes after New are
// closed, and New and Close leave no thread or descriptor behind. (Found
// by a review: each stayed open until the store's Close.) A failure waits
// out a bound of 30 s; a pass does not wait.
func TestStoreKeepsNoDescriptorOfTheApplication(t *testing.T) {
	const bound = 30 * time.Second
	ctx := context.Background()
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Run("a pipe's reader sees the end of file", func(t *testing.T) {
				db, _ := openMigrated(t, d)
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				w.Close()
				eof := make(chan error, 1)
				go func() { _, err := io.ReadAll(r); eof <- err }()
				select {
				case err := <-eof:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(bound):
					t.Fatal("no end of file after the write end was closed: a copy of it is open")
				}
			})
			t.Run("a child sees the end of its input", func(t *testing.T) {
				db, _ := openMigrated(t, d)
				cmd := exec.Command("cat")
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				stdin.Close()
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(bound):
					cmd.Process.Kill()
					t.Fatal("the child did not exit after its input was closed: a copy of the pipe is open")
				}
			})
			t.Run("a closed listener's port is free", func(t *testing.T) {
				db, _ := openMigrated(t, d)
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				ln.Close()
				again, err := net.Listen("tcp", ln.Addr().String())
				if err != nil {
					t.Fatalf("listening again on the closed listener's port: %v", err)
				}
				again.Close()
			})
			t.Run("New and Close leave no thread or descriptor", func(t *testing.T) {
				db, _ := openMigrated(t, d)
				count := func(dir string) int {
					ents, err := os.ReadDir(dir)
					if err != nil {
						t.Fatal(err)
					}
					n := 0
					for _, e := range ents {
						if link, err := os.Readlink(dir + "/" + e.Name()); err != nil || !strings.Contains(link, "replay.db") {
							continue
						}
						n++
					}
					return n
				}
				threads := func() int {
					ents, err := os.ReadDir("/proc/self/task")
					if err != nil {
						t.Fatal(err)
					}
					return len(ents)
				}
				mustStore(t, db, sqlitestore.Options{SweepInterval: -1}).Close() // the pool's connections opened
				t0, f0 := threads(), count("/proc/self/fd")
				for range 100 {
					s, err := sqlitestore.New(ctx, db, sqlitestore.Options{SweepInterval: -1})
					if err != nil {
						t.Fatal(err)
					}
					s.Close()
				}
				// A thread ends after its goroutine: allow the runtime's own
				// (a few); a leak is one per store.
				if t1, f1 := threads(), count("/proc/self/fd"); t1 > t0+10 || f1 > f0 {
					t.Errorf("after 100 New and Close: threads %d → %d, descriptors of the database %d → %d", t0, t1, f0, f1)
				}
			})
		})
	}
}
