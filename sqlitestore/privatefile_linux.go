package sqlitestore

import (
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// writebackLooks says whether a check's fsync of the database file
// reports write-backs that failed in other connections (Linux's errseq).
const writebackLooks = true

// Closing any descriptor of a file releases every POSIX advisory lock its
// owner holds on the file (fcntl(2)), and the owner is the file
// descriptor table, which a process's threads share: a descriptor the
// store opened and closed would release the locks of the process's SQLite
// connections on the database (the SHARED lock each keeps in WAL mode, a
// writer's locks in the rollback journal modes;
// https://sqlite.org/howtocorrupt.html, 2.2). So the store opens the
// database file on an OS thread of its own whose table is its own
// (unshare(CLONE_FILES)): closing it there releases no lock but that
// table's, which holds none. The thread ends with the file (its goroutine
// exits locked to it, and the Go runtime then ends the thread).
//
// unshare copies the whole table: every file, pipe and socket open at
// that moment would stay open in the copy, for the file's life (a pipe's
// reader would see no end of file, a child no end of its input, a port
// stay bound). So the thread closes its copies at once (closeInherited),
// which releases nothing of the process's: a POSIX lock belongs to the
// table that took it, and the other descriptors are references the
// process's table still holds. It keeps the Go runtime's epoll and the
// eventfd that wakes it, which runtime code on the thread uses (a stop of
// the world polls the one, a wake of the poller writes the other): the
// epoll is the one a pipe the caller opened for the purpose is registered
// in, by its number and its inode (/proc's fdinfo: a stale registration
// of a closed number in another epoll names another inode), and its
// eventfd the one registered there without EPOLLET (the runtime registers
// every other descriptor edge-triggered). Should that look find none, it
// keeps every anonymous inode (eventpoll, eventfd, inotify, ...: no file,
// pipe or socket). It keeps 0-2 too: a goroutine dump (SIGQUIT) or a
// fatal error the runtime prints from the thread goes to the process's
// standard error as it was at New (a standard stream the application
// redirects later stays open on the thread until the file is closed).
//
// The thread is never the process's main thread: the runtime parks that
// one rather than end it, and /proc/self/fd would then list the private
// table.

// privateFile is a file opened read-only on such a thread. Its methods are
// safe for concurrent use.
type privateFile struct {
	calls chan func(fd int)
	quit  chan struct{} // closed by Close or release
	done  chan struct{} // closed once the file is closed and its thread ends
	once  sync.Once
}

// openPrivate opens path read-only on a thread of its own (see above).
// Without /proc it fails.
func openPrivate(path string) (*privateFile, error) {
	probeR, probeW, err := os.Pipe() // registered with the runtime's netpoller
	if err != nil {
		return nil, err
	}
	defer probeW.Close() // on this thread: the process's table
	defer probeR.Close()
	probe, probeIno := -1, uint64(0)
	if rc, err := probeR.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			var st syscall.Stat_t
			if syscall.Fstat(int(fd), &st) == nil {
				probe, probeIno = int(fd), st.Ino
			}
		})
	}
	p := &privateFile{calls: make(chan func(fd int)), quit: make(chan struct{}), done: make(chan struct{})}
	opened := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked but on the main thread: the thread ends with the goroutine
		if syscall.Gettid() == syscall.Getpid() {
			// The main thread: hand over to a goroutine that cannot run on
			// it while this one holds it.
			started := make(chan struct{})
			go func() {
				runtime.LockOSThread()
				close(started)
				p.serve(path, probe, probeIno, opened)
			}()
			<-started
			runtime.UnlockOSThread()
			return
		}
		p.serve(path, probe, probeIno, opened)
	}()
	if err := <-opened; err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return p, nil
}

// serve runs on the locked thread: it makes the thread's table its own,
// opens path and runs the calls until quit.
func (p *privateFile) serve(path string, probe int, probeIno uint64, opened chan<- error) {
	defer close(p.done)
	if err := syscall.Unshare(syscall.CLONE_FILES); err != nil {
		opened <- err
		return
	}
	if err := closeInherited(probe, probeIno); err != nil {
		opened <- err
		return
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	opened <- err
	if err != nil {
		return
	}
	defer syscall.Close(fd)
	for {
		select {
		case call := <-p.calls:
			call(fd)
		case <-p.quit:
			return
		}
	}
}

// epollET is EPOLLET as fdinfo prints the events (syscall's is negative).
const epollET = 1 << 31

// closeInherited closes, in the calling thread's own descriptor table,
// every copy unshare made but 0-2, the runtime's epoll (the one the probe,
// descriptor probe of inode probeIno, is registered in) and its eventfd
// (see above).
func closeInherited(probe int, probeIno uint64) error {
	dir := "/proc/thread-self" // this thread's table (Linux 3.17)
	if _, err := os.Stat(dir); err != nil {
		dir = "/proc/self/task/" + strconv.Itoa(syscall.Gettid())
	}
	ents, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return err
	}
	link := func(fd int) string {
		l, _ := os.Readlink(dir + "/fd/" + strconv.Itoa(fd))
		return l
	}
	var fds []int
	keep := map[int]bool{}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds = append(fds, fd)
		if link(fd) != "anon_inode:[eventpoll]" {
			continue
		}
		// "tfd: %d events: %x data: %llx pos:%lli ino:%lx sdev:%x"
		// (fs/eventpoll.c).
		info, _ := os.ReadFile(dir + "/fdinfo/" + e.Name())
		type reg struct {
			fd     int
			events uint64
			ino    uint64
		}
		var regs []reg
		for _, line := range strings.Split(string(info), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 || f[0] != "tfd:" || f[2] != "events:" || !strings.HasPrefix(f[7], "ino:") {
				continue
			}
			t, err1 := strconv.Atoi(f[1])
			ev, err2 := strconv.ParseUint(f[3], 16, 64)
			ino, err3 := strconv.ParseUint(strings.TrimPrefix(f[7], "ino:"), 16, 64)
			if err1 == nil && err2 == nil && err3 == nil {
				regs = append(regs, reg{t, ev, ino})
			}
		}
		if !slices.ContainsFunc(regs, func(r reg) bool { return r.fd == probe && r.ino == probeIno }) {
			continue // the application's
		}
		keep[fd] = true
		for _, r := range regs {
			if r.events&epollET == 0 && link(r.fd) == "anon_inode:[eventfd]" {
				keep[r.fd] = true
			}
		}
	}
	found := len(keep) >= 2
	for _, fd := range fds {
		if fd <= 2 || keep[fd] || !found && strings.HasPrefix(link(fd), "anon_inode:") {
			continue
		}
		syscall.Close(fd) // ReadDir's own is gone already: EBADF
	}
	return nil
}

// do runs fn with the descriptor, on the file's thread, after any call
// in progress; after Close or release it returns os.ErrClosed.
func (p *privateFile) do(fn func(fd int) error) error {
	var err error
	ran := make(chan struct{})
	select {
	case p.calls <- func(fd int) { err = fn(fd); close(ran) }:
	case <-p.quit:
		return os.ErrClosed
	}
	<-ran
	return err
}

// ReadAt reads len(b) bytes at off (io.ReaderAt).
func (p *privateFile) ReadAt(b []byte, off int64) (int, error) {
	var n int
	err := p.do(func(fd int) error {
		for n < len(b) {
			k, err := syscall.Pread(fd, b[n:], off+int64(n))
			switch {
			case err == syscall.EINTR:
				continue
			case err != nil:
				return err
			case k == 0:
				return io.EOF
			}
			n += k
		}
		return nil
	})
	return n, err
}

// Size returns the file's size.
func (p *privateFile) Size() (int64, error) {
	var st syscall.Stat_t
	err := p.do(func(fd int) error { return syscall.Fstat(fd, &st) })
	return st.Size, err
}

// Sync fsyncs the file: on Linux it reports a write-back of the file that
// failed since the descriptor was opened or last reported one (errseq).
func (p *privateFile) Sync() error {
	return p.do(func(fd int) error { return syscall.Fsync(fd) })
}

// Close closes the file and ends its thread, after the call in progress,
// if any.
func (p *privateFile) Close() {
	p.release()
	<-p.done
}

// release is Close without the wait: the file is closed once the call in
// progress returns (an fsync that hangs on a dead disk keeps it).
func (p *privateFile) release() {
	p.once.Do(func() { close(p.quit) })
}
