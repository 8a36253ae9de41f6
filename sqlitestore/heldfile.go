package sqlitestore

import (
	"os"
	"sync"
	"sync/atomic"
)

// held keeps one descriptor per database file open for the process's
// life, as litestream does: closing one would release SQLite's POSIX locks
// on the file, and only a descriptor open before a failed write-back sees
// it. The cost: a deleted database file's space is freed at exit.
var held struct {
	sync.Mutex
	files []*heldFile
}

// heldFile is a held database file, open for reading (fsync needs no more).
type heldFile struct {
	info os.FileInfo
	f    *os.File
	// failures counts failed write-backs: only the first fsync after one
	// reports it, so each Store compares the count with what it acted on.
	failures atomic.Int64
	syncMu   sync.Mutex
	syncErr  error // another fsync error: f is not synced again
}

// openHeld opens path, or returns the file already held; never closed.
func openHeld(path string) (*heldFile, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	held.Lock()
	defer held.Unlock()
	for _, h := range held.files {
		if os.SameFile(h.info, info) {
			return h, nil
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err == nil {
		info = fi // the file opened, should the path have changed
	}
	h := &heldFile{info: info, f: f}
	held.files = append(held.files, h)
	return h, nil
}
