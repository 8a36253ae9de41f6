//go:build linux

package drivertest

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
			t.Run("an inotify and an eventfd closed after New are closed", func(t *testing.T) {
				db, _ := openMigrated(t, d)
				ino, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
				if err != nil {
					t.Fatal(err)
				}
				efd, _, errno := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC, 0)
				if errno != 0 {
					t.Fatal(errno)
				}
				mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				syscall.Close(ino)
				syscall.Close(int(efd))
				// No thread's table may hold an inotify any more; the
				// store's thread keeps one eventfd, the Go runtime's.
				for task, links := range threadTables(t) {
					for _, l := range links {
						if l == "anon_inode:inotify" {
							t.Errorf("thread %s still holds the closed inotify: %q", task, links)
						}
					}
				}
			})
			t.Run("the main thread keeps the process's table", func(t *testing.T) {
				// The runtime parks the main thread rather than end it: a
				// store's thread there would leave /proc/self/fd listing
				// its private table for good.
				db, path := openMigrated(t, d)
				main := "/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/fd"
				for range 100 {
					s, err := sqlitestore.New(ctx, db, sqlitestore.Options{SweepInterval: -1})
					if err != nil {
						t.Fatal(err)
					}
					s.Close()
				}
				if links := threadTables(t)[strconv.Itoa(os.Getpid())]; !slices.ContainsFunc(links, func(l string) bool { return strings.Contains(l, path) }) {
					t.Fatalf("after 100 New and Close, the main thread's table (%s) holds no descriptor of the database the pool has open: %q", main, links)
				}
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

// threadTables returns, per thread of the process, the targets of its
// descriptor table's links.
func threadTables(t *testing.T) map[string][]string {
	t.Helper()
	tables := map[string][]string{}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		dir := "/proc/self/task/" + task.Name() + "/fd"
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue // the thread ended
		}
		for _, e := range ents {
			if l, err := os.Readlink(dir + "/" + e.Name()); err == nil {
				tables[task.Name()] = append(tables[task.Name()], l)
			}
		}
	}
	return tables
}
