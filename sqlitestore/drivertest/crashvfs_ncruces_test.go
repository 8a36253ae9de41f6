//go:build ncruces

package drivertest

// A SQLite VFS for ncruces/go-sqlite3 that simulates a power cut and
// Linux's fsync failures, in one process, on real files.
//
// The VFS wraps the OS VFS (vfs.Find("os")). Every write and truncation
// goes through to the real file, so the process reads back what it wrote,
// as it reads the page cache. Beside that, the VFS keeps for each file
// (keyed by its path, shared by every handle of that path) a durable
// image: what the disk holds, what a power cut leaves. Writes and
// truncations since the file's last successful Sync are pending; a
// successful Sync applies them to the durable image. PowerCut, called
// once every handle is closed, replaces each real file by its durable
// image (crashDrop), or by the durable image plus a random part of the
// pending writes (crashTear), and deletes the shared-memory (-shm) files,
// which are not durable.
//
// The real Sync is not called: the model holds durability, and a test
// machine loses no power.
//
// Faults the test arms:
//   - ArmCut: the Sync numbered so many from now cuts the power. From then
//     on every write, truncation, Sync and Delete fails with an I/O error
//     and nothing reaches the durable image; reads still work (the
//     process may run on, but nothing it does reaches the disk).
//   - ArmSyncFailure: the next Sync of a file (matching a suffix, or any)
//     so many Syncs from now fails with SQLITE_IOERR_FSYNC, with Linux's
//     semantics: the file's pending writes are dropped without reaching
//     the durable image (Linux marks the failed dirty pages clean), while
//     the real file (the page cache) keeps their bytes. A later Sync
//     succeeds and applies only the writes made after the failure. With
//     errseq set, every other handle of the file open at the failure also
//     sees the error once, at its next Sync (Linux's errseq_t per open
//     file description), after that Sync applied its file's writes.
//
// Simplifications, on purpose:
//   - A file's creation reaches the disk at its first successful Sync (as
//     if the directory were synced then; SQLite syncs the directory of a
//     journal it creates at its first sync).
//   - Delete is durable at once, whether or not SQLite asked for the
//     directory to be synced. On a real disk an unlink not followed by a
//     directory sync can be undone by a power cut: in journal_mode=DELETE
//     with synchronous=FULL (not EXTRA) a deleted rollback journal may
//     come back hot and roll back the commit it ended. With lazyUnlink
//     set, the VFS simulates that: a Delete without a directory sync
//     becomes durable only at the next successful Sync of any file (as
//     ext4's journal commits an unlink with the next fsync that commits
//     metadata) or the next Delete with one; a cut before brings the
//     file back with its durable image.
//   - A failed fsync drops exactly the byte ranges written since the last
//     Sync; Linux drops whole pages (4 KiB) and a later writeback of a
//     page dirtied again carries the page's bytes from the failed write
//     too.
//   - Only main databases, rollback journals, super-journals and WAL files
//     are modelled; temporary files pass through.
//   - Batch atomic writes (F2FS) are not offered (IOCAP_BATCH_ATOMIC is
//     masked), since they would bypass the model.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/util/vfsutil"
	"github.com/ncruces/go-sqlite3/vfs"
)

// crashSector is the granularity of a torn write.
const crashSector = 512

// crashMode is what a power cut leaves of the pending writes.
type crashMode int

const (
	// crashDrop leaves none: every file is its durable image.
	crashDrop crashMode = iota
	// crashTear leaves a random part: each 512-byte sector touched by
	// pending writes holds one of its versions since the last Sync (the
	// durable one, after the first pending write touching it, after the
	// second, ..., the newest), chosen at random and independently of
	// the other sectors, and the file's size is one of the sizes it had
	// since the last Sync. A truncation is metadata, atomic: it zeroes
	// sectors (seen when the file grows again) only if the size left
	// is one the file had at or after it.
	crashTear
)

func (m crashMode) String() string {
	if m == crashTear {
		return "tear"
	}
	return "drop"
}

type crashOpKind uint8

const (
	crashWrite    crashOpKind = iota
	crashTruncate             // to size
	crashAllocate             // grow to size (fallocate)
)

// crashOp is one pending change of a file.
type crashOp struct {
	kind crashOpKind
	off  int64 // crashWrite: the offset; else the size
	data []byte
}

// crashNode is one path's durable image and pending changes, shared by
// every handle open on the path.
type crashNode struct {
	path    string
	mainDB  bool
	exists  bool // the file's creation is durable
	durable []byte
	pending []crashOp
	errSeq  int // fsync failures of the file, for errseq
}

// apply makes the pending changes durable.
func (n *crashNode) apply() {
	for _, op := range n.pending {
		n.durable = op.applyTo(n.durable)
	}
	n.pending = nil
	n.exists = true
}

func (op crashOp) applyTo(b []byte) []byte {
	switch op.kind {
	case crashWrite:
		if end := op.off + int64(len(op.data)); end > int64(len(b)) {
			b = append(b, make([]byte, end-int64(len(b)))...)
		}
		copy(b[op.off:], op.data)
	case crashTruncate:
		if op.off < int64(len(b)) {
			b = b[:op.off]
		} else {
			b = append(b, make([]byte, op.off-int64(len(b)))...)
		}
	case crashAllocate:
		if op.off > int64(len(b)) {
			b = append(b, make([]byte, op.off-int64(len(b)))...)
		}
	}
	return b
}

// image is what a power cut leaves of the file: its contents, and whether
// it exists.
func (n *crashNode) image(mode crashMode, r *rand.Rand) ([]byte, bool) {
	if mode == crashDrop || len(n.pending) == 0 {
		return slices.Clone(n.durable), n.exists
	}
	exists := n.exists || r.IntN(2) == 0
	if !exists {
		return nil, false
	}
	// The sizes the file had since the last Sync; the cut leaves one.
	sizes := []int64{int64(len(n.durable))}
	maxSize := sizes[0]
	for _, op := range n.pending {
		s := sizes[len(sizes)-1]
		switch op.kind {
		case crashWrite:
			s = max(s, op.off+int64(len(op.data)))
		case crashTruncate:
			s = op.off
		case crashAllocate:
			s = max(s, op.off)
		}
		sizes = append(sizes, s)
		maxSize = max(maxSize, s)
	}
	// The cut leaves the size after the first k pending changes: the
	// file's metadata (its size, the blocks it holds) as the file system
	// committed it, atomically.
	k := r.IntN(len(sizes))
	size := sizes[k]
	// The pending changes touching each sector, in order.
	touch := map[int64][]int{}
	for i, op := range n.pending {
		switch op.kind {
		case crashWrite:
			for s := op.off / crashSector; s*crashSector < op.off+int64(len(op.data)); s++ {
				touch[s] = append(touch[s], i)
			}
		case crashTruncate:
			// A truncation writes no data: it changes the size and frees
			// the blocks past it, in one metadata update. If that update
			// is not among the k the disk holds, the file still has its
			// blocks with their contents, untouched. SQLite relies on
			// this (https://www.sqlite.org/atomiccommit.html, "Hardware
			// Assumptions"): in journal_mode=TRUNCATE the truncation of
			// the journal is the commit, and a journal zeroed in part
			// inside its old size, its header kept, rolls back part of a
			// commit whose database writes were synced.
			if i >= k {
				break
			}
			for s := op.off / crashSector; s*crashSector < maxSize; s++ {
				touch[s] = append(touch[s], i)
			}
		}
	}
	out := make([]byte, size)
	copy(out, n.durable)
	for s, ops := range touch {
		lo := s * crashSector
		if lo >= size {
			continue
		}
		sec := make([]byte, crashSector)
		if lo < int64(len(n.durable)) {
			copy(sec, n.durable[lo:])
		}
		for _, i := range ops[:r.IntN(len(ops)+1)] {
			op := n.pending[i]
			switch op.kind {
			case crashWrite:
				from, to := max(op.off, lo), min(op.off+int64(len(op.data)), lo+crashSector)
				copy(sec[from-lo:to-lo], op.data[from-op.off:to-op.off])
			case crashTruncate:
				if op.off < lo+crashSector {
					clear(sec[max(op.off-lo, 0):])
				}
			}
		}
		copy(out[lo:min(lo+crashSector, size)], sec)
	}
	return out, true
}

// crashStats counts what the VFS did.
type crashStats struct {
	Syncs         int       // Sync calls that ran (not refused after a cut)
	FailedSyncs   int       // fsync failures injected (the errseq repeats included)
	ErrseqRepeats int       // of those, errseq repeats
	LastFailure   time.Time // when the last fsync failure was injected
}

// crashVFS is the VFS; see the top of the file.
type crashVFS struct {
	name       string
	vfs.VFS    // the OS VFS; its Access and FullPathname serve as they are
	errseq     bool
	lazyUnlink bool

	mu          sync.Mutex
	nodes       map[string]*crashNode
	unlinked    map[string]*crashNode // deletions not yet durable (lazyUnlink)
	open        int
	dead        bool
	cutLeft     int // Syncs to let through before the cut; -1: not armed
	cutKeep     bool
	failLeft    int // matching Syncs to let through before the failure; -1: not armed
	failMatch   string
	failCommits int
	events      []string
	stats       crashStats
}

var crashVFSSeq atomic.Int64

// newCrashVFS registers a crash VFS under a unique name for the test's
// life.
func newCrashVFS(t testing.TB) *crashVFS {
	v := &crashVFS{
		name:     fmt.Sprintf("ctoken-crash-%d", crashVFSSeq.Add(1)),
		VFS:      vfs.Find("os"),
		nodes:    map[string]*crashNode{},
		unlinked: map[string]*crashNode{},
		cutLeft:  -1,
		failLeft: -1,
	}
	vfs.Register(v.name, v)
	t.Cleanup(func() { vfs.Unregister(v.name) })
	return v
}

// DSN is d's data source name for path through the VFS.
func (v *crashVFS) DSN(d Driver, path string, pragmas []Pragma) string {
	return d.DSN(path, pragmas) + "&vfs=" + v.name
}

func (v *crashVFS) event(format string, args ...any) {
	v.events = append(v.events, fmt.Sprintf(format, args...))
}

// ArmCut makes the Sync after the next after Syncs cut the power. keep
// says whether that Sync's writes reach the disk before the power goes
// (the Sync still fails: the process never learns it).
func (v *crashVFS) ArmCut(after int, keep bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.cutLeft, v.cutKeep = after, keep
}

func (v *crashVFS) CutNow() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.dead {
		v.dead = true
		v.event("power cut at once after %d syncs", v.stats.Syncs)
	}
}

// ArmSyncFailure makes the Sync of a file whose path ends with suffix (""
// for any file) after the next after such Syncs fail, with Linux's
// semantics (see the top of the file). With minCommits > 0 the failure
// waits, past those Syncs, for one whose pending writes hold at least
// minCommits WAL commit frames (2: the frames of a commit made with
// synchronous=NORMAL, which SQLite counts as committed, and those of the
// commit whose fsync fails).
func (v *crashVFS) ArmSyncFailure(suffix string, after, minCommits int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.failLeft, v.failMatch, v.failCommits = after, suffix, minCommits
}

func (v *crashVFS) Dead() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.dead
}

func (v *crashVFS) Stats() crashStats {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.stats
}

// Events returns what happened (cuts, failures) and forgets it.
func (v *crashVFS) Events() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.events
	v.events = nil
	return e
}

// crashCut is what a PowerCut did.
type crashCut struct {
	Files         int   // files put back to their image
	Removed       int   // files whose creation never reached the disk
	PendingOps    int   // pending changes at the cut
	PendingBytes  int64 // their bytes
	ChangedFiles  int   // files whose image differs from the real file
	ChangedSector int   // 512-byte sectors that differ (or exist on one side only)
	Resurrected   int   // deleted files back (lazyUnlink)
}

func (c crashCut) String() string {
	s := fmt.Sprintf("%d files (%d removed), %d pending changes of %d bytes, %d files / %d sectors differ from the page cache",
		c.Files, c.Removed, c.PendingOps, c.PendingBytes, c.ChangedFiles, c.ChangedSector)
	if c.Resurrected > 0 {
		s += fmt.Sprintf(", %d deleted files back", c.Resurrected)
	}
	return s
}

// PowerCut waits until every handle of the VFS is closed (the store and
// the *sql.DB closed), cuts the power if not yet cut, and replaces every
// file by what the disk holds (see crashMode); the shared-memory files are
// deleted. The VFS then serves again, as after a reboot, with nothing
// pending.
func (v *crashVFS) PowerCut(mode crashMode, r *rand.Rand) (crashCut, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		v.mu.Lock()
		if v.open == 0 {
			break
		}
		open := v.open
		v.mu.Unlock()
		if time.Now().After(deadline) {
			return crashCut{}, fmt.Errorf("%d files of the VFS still open 10 s after the store and the database were closed", open)
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer v.mu.Unlock()
	if !v.dead {
		v.event("power cut at PowerCut after %d syncs", v.stats.Syncs)
	}
	v.dead = true
	var c crashCut
	for _, path := range slices.Sorted(maps.Keys(v.nodes)) {
		n := v.nodes[path]
		c.Files++
		c.PendingOps += len(n.pending)
		for _, op := range n.pending {
			c.PendingBytes += int64(len(op.data))
		}
		img, exists := n.image(mode, r)
		real, rerr := os.ReadFile(path)
		if rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return c, rerr
		}
		if d := crashDiffSectors(real, img, rerr == nil, exists); d > 0 {
			c.ChangedFiles++
			c.ChangedSector += d
		}
		if exists {
			// In place (os.WriteFile truncates the file, no new one):
			// it keeps its identity (inode), as after a real power cut.
			if err := os.WriteFile(path, img, 0o644); err != nil {
				return c, err
			}
			n.durable, n.exists, n.pending = img, true, nil
		} else {
			c.Removed++
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return c, err
			}
			delete(v.nodes, path)
		}
		if n.mainDB {
			if err := os.Remove(path + "-shm"); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return c, err
			}
		}
	}
	// Deletions the disk never got: the files come back.
	for _, path := range slices.Sorted(maps.Keys(v.unlinked)) {
		if v.nodes[path] != nil {
			continue // never: a file made again at path and synced cleared unlinked
		}
		n := v.unlinked[path]
		if err := os.WriteFile(path, n.durable, 0o644); err != nil {
			return c, err
		}
		n.pending = nil
		v.nodes[path] = n
		c.Resurrected++
	}
	clear(v.unlinked)
	v.dead, v.cutLeft, v.failLeft = false, -1, -1
	return c, nil
}

// crashDiffSectors counts the 512-byte sectors where a and b differ.
func crashDiffSectors(a, b []byte, aExists, bExists bool) int {
	if aExists != bExists {
		return max(len(a), len(b), 1)/crashSector + 1
	}
	n := 0
	for lo := 0; lo < max(len(a), len(b)); lo += crashSector {
		sa := a[min(lo, len(a)):min(lo+crashSector, len(a))]
		sb := b[min(lo, len(b)):min(lo+crashSector, len(b))]
		if string(sa) != string(sb) {
			n++
		}
	}
	return n
}

// The vfs.VFS methods.

func (v *crashVFS) Open(name string, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	f, flags, err := vfsutil.WrapOpen(v.VFS, name, flags)
	if err != nil || name == "" {
		return f, flags, err
	}
	return v.wrap(f, name, flags), flags, nil
}

func (v *crashVFS) OpenFilename(name *vfs.Filename, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	f, flags, err := vfsutil.WrapOpenFilename(v.VFS, name, flags)
	if err != nil || name == nil || name.String() == "" {
		return f, flags, err
	}
	return v.wrap(f, name.String(), flags), flags, nil
}

const crashModelled = vfs.OPEN_MAIN_DB | vfs.OPEN_MAIN_JOURNAL | vfs.OPEN_SUPER_JOURNAL | vfs.OPEN_WAL

func (v *crashVFS) wrap(f vfs.File, path string, flags vfs.OpenFlag) vfs.File {
	if flags&crashModelled == 0 || flags&vfs.OPEN_DELETEONCLOSE != 0 {
		return f
	}
	path = filepath.Clean(path)
	v.mu.Lock()
	defer v.mu.Unlock()
	n := v.nodes[path]
	if n == nil {
		n = &crashNode{path: path}
		// A file first met on the disk is durable as it is; a file made
		// now is durable at its first Sync.
		if b, err := os.ReadFile(path); err == nil {
			n.durable, n.exists = b, true
			// Made by this open (empty, through OPEN_CREATE): not durable
			// until synced.
			if len(b) == 0 && flags&vfs.OPEN_CREATE != 0 {
				n.exists = false
			}
		}
		v.nodes[path] = n
	}
	n.mainDB = n.mainDB || flags&vfs.OPEN_MAIN_DB != 0
	v.open++
	return &crashFile{File: f, v: v, node: n, seenErr: n.errSeq}
}

func (v *crashVFS) Delete(name string, syncDir bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dead {
		return sqlite3.IOERR_DELETE
	}
	err := v.VFS.Delete(name, syncDir)
	if err == nil {
		// Durable at once, unless lazyUnlink: see the top of the file.
		path := filepath.Clean(name)
		if n := v.nodes[path]; n != nil && n.exists && v.lazyUnlink && !syncDir {
			v.unlinked[path] = n
		}
		if syncDir {
			clear(v.unlinked)
		}
		delete(v.nodes, path)
	}
	return err
}

// crashFile is one handle of a modelled file.
type crashFile struct {
	vfs.File
	v       *crashVFS
	node    *crashNode
	seenErr int // node.errSeq when this handle last saw an fsync error
	closed  bool
}

func (f *crashFile) Close() error {
	f.v.mu.Lock()
	if !f.closed {
		f.closed = true
		f.v.open--
	}
	f.v.mu.Unlock()
	return f.File.Close()
}

func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if f.v.dead {
		return 0, sqlite3.IOERR_WRITE
	}
	n, err := f.File.WriteAt(p, off)
	if n > 0 {
		f.node.pending = append(f.node.pending, crashOp{kind: crashWrite, off: off, data: slices.Clone(p[:n])})
	}
	return n, err
}

func (f *crashFile) Truncate(size int64) error {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if f.v.dead {
		return sqlite3.IOERR_TRUNCATE
	}
	err := f.File.Truncate(size)
	if err == nil {
		f.node.pending = append(f.node.pending, crashOp{kind: crashTruncate, off: size})
	}
	return err
}

func (f *crashFile) Sync(flags vfs.SyncFlag) error {
	v := f.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dead {
		return sqlite3.IOERR_FSYNC
	}
	n := f.node
	v.stats.Syncs++
	if v.cutLeft >= 0 {
		if v.cutLeft == 0 {
			v.cutLeft = -1
			v.dead = true
			if v.cutKeep {
				n.apply()
			}
			v.event("power cut at sync %d (%s, its writes kept: %v)", v.stats.Syncs, filepath.Base(n.path), v.cutKeep)
			return sqlite3.IOERR_FSYNC
		}
		v.cutLeft--
	}
	if v.failLeft >= 0 && strings.HasSuffix(n.path, v.failMatch) {
		if v.failLeft == 0 && crashCommitFrames(n.pending) >= v.failCommits {
			v.failLeft = -1
			var b int64
			for _, op := range n.pending {
				b += int64(len(op.data))
			}
			v.stats.FailedSyncs++
			v.stats.LastFailure = time.Now()
			commits := ""
			if strings.HasSuffix(n.path, "-wal") {
				commits = fmt.Sprintf(", %d WAL commit frames among them", crashCommitFrames(n.pending))
			}
			v.event("fsync failure at sync %d (%s): %d pending changes of %d bytes dropped%s, kept in the page cache", v.stats.Syncs, filepath.Base(n.path), len(n.pending), b, commits)
			n.pending = nil
			n.errSeq++
			f.seenErr = n.errSeq
			return sqlite3.IOERR_FSYNC
		}
		v.failLeft = max(v.failLeft-1, 0)
	}
	n.apply()
	clear(v.unlinked)
	if v.errseq && f.seenErr < n.errSeq {
		// Linux reports a writeback error once to every open file
		// description that was open when it happened.
		f.seenErr = n.errSeq
		v.stats.FailedSyncs++
		v.stats.ErrseqRepeats++
		v.event("fsync error reported again (errseq) at sync %d (%s), its writes applied", v.stats.Syncs, filepath.Base(n.path))
		return sqlite3.IOERR_FSYNC
	}
	return nil
}

// crashCommitFrames counts the commit frames among a WAL's pending
// writes: a frame header (24 bytes, written on its own) whose second
// field, the database's size after a commit, is not 0. More than one
// means a failed fsync dropped frames of a commit SQLite had already
// counted as done (one with synchronous=NORMAL).
func crashCommitFrames(ops []crashOp) int {
	n := 0
	for _, op := range ops {
		if op.kind == crashWrite && len(op.data) == 24 && binary.BigEndian.Uint32(op.data[4:8]) != 0 {
			n++
		}
	}
	return n
}

func (f *crashFile) DeviceCharacteristics() vfs.DeviceCharacteristic {
	return f.File.DeviceCharacteristics() &^ vfs.IOCAP_BATCH_ATOMIC
}

// The optional interfaces, forwarded to the OS file (when it lacks one,
// the vfsutil helper answers as if the wrapper lacked it too). Batch
// atomic writes are left out on purpose.

var (
	_ vfs.FileLockState          = (*crashFile)(nil)
	_ vfs.FilePersistWAL         = (*crashFile)(nil)
	_ vfs.FilePowersafeOverwrite = (*crashFile)(nil)
	_ vfs.FileChunkSize          = (*crashFile)(nil)
	_ vfs.FileSizeHint           = (*crashFile)(nil)
	_ vfs.FileHasMoved           = (*crashFile)(nil)
	_ vfs.FileOverwrite          = (*crashFile)(nil)
	_ vfs.FileSync               = (*crashFile)(nil)
	_ vfs.FileCommitPhaseTwo     = (*crashFile)(nil)
	_ vfs.FileCheckpoint         = (*crashFile)(nil)
	_ vfs.FilePragma             = (*crashFile)(nil)
	_ vfs.FileBusyHandler        = (*crashFile)(nil)
	_ vfs.FileSharedMemory       = (*crashFile)(nil)
	_ vfs.FileMemoryMapper       = (*crashFile)(nil)
	_ vfs.VFSFilename            = (*crashVFS)(nil)
)

func (f *crashFile) LockState() vfs.LockLevel       { return vfsutil.WrapLockState(f.File) }
func (f *crashFile) PersistWAL() bool               { return vfsutil.WrapPersistWAL(f.File) }
func (f *crashFile) SetPersistWAL(keep bool)        { vfsutil.WrapSetPersistWAL(f.File, keep) }
func (f *crashFile) PowersafeOverwrite() bool       { return vfsutil.WrapPowersafeOverwrite(f.File) }
func (f *crashFile) SetPowersafeOverwrite(ps bool)  { vfsutil.WrapSetPowersafeOverwrite(f.File, ps) }
func (f *crashFile) ChunkSize(size int)             { vfsutil.WrapChunkSize(f.File, size) }
func (f *crashFile) HasMoved() (bool, error)        { return vfsutil.WrapHasMoved(f.File) }
func (f *crashFile) Overwrite() error               { return vfsutil.WrapOverwrite(f.File) }
func (f *crashFile) SyncSuper(super string) error   { return vfsutil.WrapSyncSuper(f.File, super) }
func (f *crashFile) CommitPhaseTwo() error          { return vfsutil.WrapCommitPhaseTwo(f.File) }
func (f *crashFile) CheckpointStart()               { vfsutil.WrapCheckpointStart(f.File) }
func (f *crashFile) CheckpointDone()                { vfsutil.WrapCheckpointDone(f.File) }
func (f *crashFile) BusyHandler(h func() bool)      { vfsutil.WrapBusyHandler(f.File, h) }
func (f *crashFile) SharedMemory() vfs.SharedMemory { return vfsutil.WrapSharedMemory(f.File) }
func (f *crashFile) MemoryMapper() vfs.MemoryMapper { return vfsutil.WrapMemoryMapper(f.File) }
func (f *crashFile) Pragma(name, value string) (string, error) {
	return vfsutil.WrapPragma(f.File, name, value)
}

// SizeHint preallocates (fallocate): a pending growth of the file.
func (f *crashFile) SizeHint(size int64) error {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if f.v.dead {
		return sqlite3.IOERR_WRITE
	}
	err := vfsutil.WrapSizeHint(f.File, size)
	if err == nil {
		f.node.pending = append(f.node.pending, crashOp{kind: crashAllocate, off: size})
	}
	return err
}

// SetDB forwards SQLITE_FCNTL_PDB, when the OS file takes it.
func (f *crashFile) SetDB(db any) {
	if s, ok := f.File.(interface{ SetDB(any) }); ok {
		s.SetDB(db)
	}
}
