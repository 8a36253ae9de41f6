//go:build linux

package sqlitestore

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCloseInheritedKeepsOnlyTheRuntimes pins which copies the file's
// thread keeps (privatefile_linux.go): the Go runtime's epoll and its
// wake-up eventfd, identified by the probe pipe's registration (number and
// inode), and nothing of the application's that looks like them. (Found
// by a review: both cases kept the application's descriptors open.)
func TestCloseInheritedKeepsOnlyTheRuntimes(t *testing.T) {
	t.Run("an application's eventfd in the runtime's epoll", appEventfdInTheRuntimesEpoll)
	t.Run("a stale registration of the probe's number in another epoll", staleRegistrationOfTheProbesNumber)
}

// privateTable finds the table of the thread that holds path and little else.
func privateTable(t *testing.T, path string) (string, []string) {
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		dir := "/proc/self/task/" + task.Name() + "/fd"
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) > 8 {
			continue
		}
		var links []string
		has := false
		for _, e := range ents {
			l, _ := os.Readlink(dir + "/" + e.Name())
			links = append(links, e.Name()+"->"+l)
			if l == path {
				has = true
			}
		}
		if has {
			return task.Name(), links
		}
	}
	t.Fatal("no private table found")
	return "", nil
}

func tmpDB(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "x.db")
	os.WriteFile(p, []byte("x"), 0o600)
	return p
}

// appEventfdInTheRuntimesEpoll: an application's nonblocking eventfd wrapped in
// os.NewFile is registered in the runtime's epoll (edge-triggered); its
// copy is closed, the runtime's own eventfd kept.
func appEventfdInTheRuntimesEpoll(t *testing.T) {
	path := tmpDB(t)
	efd, _, errno := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if errno != 0 {
		t.Fatal(errno)
	}
	f := os.NewFile(efd, "app-eventfd") // pollable: registered in netpoll
	p, err := openPrivate(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f.Close()
	tid, links := privateTable(t, path)
	n := strings.Count(strings.Join(links, " "), "[eventfd]")
	t.Logf("thread %s table: %q", tid, links)
	if n > 1 {
		t.Errorf("private table keeps %d eventfds: the application's (closed in the process) is still open there", n)
	}
}

// staleRegistrationOfTheProbesNumber: an application's epoll that still lists a
// closed descriptor number (its file alive through a dup), which the probe
// then reuses, is not taken for the runtime's: the inode differs.
func staleRegistrationOfTheProbesNumber(t *testing.T) {
	path := tmpDB(t)
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	efd, _, _ := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC, 0)
	syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, int(efd), &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(efd)})
	var pp [2]int
	if err := syscall.Pipe2(pp[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, pp[0], &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(pp[0])})
	dup, _ := syscall.Dup(pp[0])
	stale := pp[0]
	syscall.Close(stale) // E still lists tfd: stale (the file lives on via dup)
	p, err := openPrivate(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	syscall.Close(ep)
	syscall.Close(int(efd))
	syscall.Close(dup)
	syscall.Close(pp[1])
	tid, links := privateTable(t, path)
	t.Logf("stale tfd %d; thread %s table: %q", stale, tid, links)
	if n := strings.Count(strings.Join(links, " "), "[eventpoll]"); n > 1 {
		t.Errorf("private table keeps %d epolls: the application's (closed in the process) is still open there", n)
	}
}
