package sqlitestore

import (
	"io"
	"os"
	"runtime"
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

// privateFile is a file opened read-only on such a thread. Its methods are
// safe for concurrent use.
type privateFile struct {
	calls chan func(fd int)
	done  chan struct{}
}

// openPrivate opens path read-only on a thread of its own (see above).
func openPrivate(path string) (*privateFile, error) {
	p := &privateFile{calls: make(chan func(fd int)), done: make(chan struct{})}
	opened := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		defer close(p.done)
		if err := syscall.Unshare(syscall.CLONE_FILES); err != nil {
			opened <- err
			return
		}
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		opened <- err
		if err != nil {
			return
		}
		defer syscall.Close(fd)
		for call := range p.calls {
			call(fd)
		}
	}()
	if err := <-opened; err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return p, nil
}

// do runs fn with the descriptor, on the file's thread. It must not be
// called after Close.
func (p *privateFile) do(fn func(fd int) error) error {
	var err error
	ran := make(chan struct{})
	p.calls <- func(fd int) { err = fn(fd); close(ran) }
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

// Close closes the file and ends its thread.
func (p *privateFile) Close() {
	close(p.calls)
	<-p.done
}
