package sqlitestore

import (
	"os"
	"sync"
	"sync/atomic"
)

// held keeps open, for the life of the process, each database file a
// Store fsyncs to find failed write-backs (repair.go): one descriptor per file,
// whatever the number of stores, never closed, as litestream keeps its
// own. Closing any descriptor of a file releases every POSIX advisory
// lock the process holds on it (fcntl(2)), the locks of its SQLite
// connections included (https://sqlite.org/howtocorrupt.html, 2.2); and
// Linux reports a failed write-back of a file at the next fsync of every
// descriptor that was open when it happened (errseq, since 4.13), so only
// a descriptor opened before the failure sees it. The cost: one
// descriptor per database file a Store was built on, and a deleted
// database file's space is freed only when the process exits.
var held struct {
	sync.Mutex
	files []*heldFile
}

// heldFile is a database file held open for the process's life, for
// reading: fsync needs no more, and a descriptor open for writing would
// keep its file system from being remounted read-only.
type heldFile struct {
	info os.FileInfo
	f    *os.File
	// failures counts the failed write-backs an fsync of f reported:
	// each Store on the file compares it with the count it last acted on,
	// since only the first fsync after a failure reports it.
	failures atomic.Int64
	// syncErr is an fsync error other than a failed write-back (a file
	// system without fsync), after which the file is not synced again.
	syncMu  sync.Mutex
	syncErr error
}

// openHeld opens path for reading, or returns the file already held for
// it. The caller must not close it.
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
		info = fi // the file opened, should the path have changed since
	}
	h := &heldFile{info: info, f: f}
	held.files = append(held.files, h)
	return h, nil
}
