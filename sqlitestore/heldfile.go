package sqlitestore

import (
	"io"
	"os"
	"sync"
)

// held keeps open, for the life of the process, each database file the
// package opened to read past SQLite. Closing any descriptor of a file
// releases every POSIX advisory lock the process holds on it (fcntl(2)),
// the locks of its SQLite connections included: the SHARED lock each
// connection keeps on the file in WAL mode, and a writer's locks in the
// rollback journal modes (https://sqlite.org/howtocorrupt.html, 2.2).
// SQLite's own VFS keeps such descriptors open for the same reason. One
// descriptor per file is opened, at most, whatever the number of stores.
var held struct {
	sync.Mutex
	files []heldFile
}

type heldFile struct {
	info os.FileInfo
	f    *os.File
}

// openHeld opens path for reading, or returns the descriptor already held
// for that file. The caller must not close it. Reads through it
// (ReadAt) are safe for concurrent use.
func openHeld(path string) (*os.File, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	held.Lock()
	defer held.Unlock()
	for _, h := range held.files {
		if os.SameFile(h.info, info) {
			return h.f, nil
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err == nil {
		info = fi // the file opened, should the path have changed since
	}
	held.files = append(held.files, heldFile{info, f})
	return f, nil
}

// keptFile is the database file opened to read past SQLite where a thread
// of its own is not to be had (privateFile): it stays open for the life of
// the process (openHeld).
type keptFile struct{ f *os.File }

func openKept(path string) (*keptFile, error) {
	f, err := openHeld(path)
	if err != nil {
		return nil, err
	}
	return &keptFile{f}, nil
}

func (k *keptFile) ReadAt(b []byte, off int64) (int, error) { return k.f.ReadAt(b, off) }

func (k *keptFile) Size() (int64, error) {
	info, err := k.f.Stat()
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}

// Close does nothing: closing the descriptor would release the process's
// locks on the file (see held).
func (k *keptFile) Close() {}

// pageReader reads the database file past SQLite (walLost).
type pageReader interface {
	io.ReaderAt
	Size() (int64, error)
	Close()
}

// openPages opens path to read it past SQLite: on a thread of its own
// where it can (privateFile), else kept open for the process's life.
func openPages(path string) (pageReader, error) {
	if p, err := openPrivate(path); err == nil {
		return p, nil
	}
	return openKept(path)
}
