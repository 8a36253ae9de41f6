// Package dropfs is a FUSE passthrough file system that loses, on command,
// everything a power cut would lose: what was written but not fsynced.
//
// The backing directory always holds the synced state. Writes to a file
// are held in memory (4 KiB pages, with the file's size) and reach the
// backing file only when that file is fsynced (fsync or fdatasync); until
// then reads through the mount see them, as they would see the page cache.
// Directory entry changes (create, mkdir, link, symlink, mknod, unlink,
// rmdir, rename) are applied to the backing directory at once and
// journaled; a fsync of any directory makes every journaled change before
// it durable (like ext4's journal, which commits metadata in order; it is
// stricter than ext4 in one way: a file fsync does not commit the entry
// that names the file, only a directory fsync does). An unlinked or
// replaced entry is moved to a trash directory beside the backing
// directory until its removal is durable.
//
// [FS.FailSync] injects a failed write-back with Linux's semantics: the
// next fsync of a file fails with EIO, its unsynced pages stay readable
// (the page cache) but are marked clean, so no later fsync writes them and
// a cut loses them, and every other handle open on the file reports EIO at
// its next fsync, once (errseq, Linux 4.13 and later).
//
// [FS.Cut] is the power cut: every unsynced write and every journaled entry
// change is dropped (the changes are undone in reverse order), so the
// backing directory holds exactly what was synced, and the file system
// answers EIO from then on. [FS.Tear] is a harsher cut that also lands a
// random subset of the unsynced 512-byte sectors inside each file's synced
// size. After either, [FS.Unmount] and [Mount] again: the machine rebooted.
//
// Not modelled: attributes other than the size (mode, owner, times and
// extended attributes are written through at once and survive a cut),
// O_TMPFILE (refused), mmap of unsynced data beyond what FUSE offers, and
// fcntl locks (the kernel keeps them locally).
package dropfs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// ErrNoFUSE is returned by [Mount] when FUSE cannot be mounted here (no
// /dev/fuse, not root, or mount(2) refused).
var ErrNoFUSE = errors.New("dropfs: FUSE cannot be mounted")

const pageSize = 4096

// FS is one mounted dropfs.
type FS struct {
	backing, mountpoint, trash string
	server                     *fuse.Server
	rootNode                   *node

	mu       sync.Mutex
	dead     bool           // after Cut or Tear: every operation fails with EIO
	journal  []nsOp         // entry changes not yet made durable by a directory fsync
	overlays map[*node]bool // nodes holding an overlay
	trashSeq int
	failSync map[string]bool // backing paths whose next fsync fails (FailSync)
	failed   int             // fsyncs failed by FailSync
}

// Mount mounts a dropfs of backing at mountpoint (both existing
// directories). The caller must Unmount it. An error wrapping [ErrNoFUSE]
// means FUSE is not available on this machine.
func Mount(backing, mountpoint string) (*FS, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, err
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoFUSE, err)
	}
	trash, err := os.MkdirTemp(filepath.Dir(backing), ".dropfs-trash-")
	if err != nil {
		return nil, err
	}
	f := &FS{backing: backing, mountpoint: mountpoint, trash: trash, overlays: map[*node]bool{}}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	f.rootNode = &node{LoopbackNode: &fs.LoopbackNode{RootData: root}, fs: f}
	root.RootNode = f.rootNode
	zero := time.Duration(0)
	opts := &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			DirectMount:       true,
			DirectMountStrict: true, // there is no fusermount to fall back to
			AllowOther:        true, // servers run as other users (postgres)
			FsName:            "dropfs",
			Debug:             os.Getenv("DROPFS_DEBUG") != "", // the FUSE traffic on stderr
			Name:              "dropfs",
			// READDIRPLUS would hand the kernel each entry's attributes
			// from the backing file, whose size is the synced one: the
			// kernel would shrink a file with unsynced data under its
			// readers. Plain READDIR leaves attributes to Lookup, which
			// reports the overlay's size.
			DisableReadDirPlus: true,
		},
	}
	server, err := fs.Mount(mountpoint, f.rootNode, opts)
	if err != nil {
		os.RemoveAll(trash)
		return nil, fmt.Errorf("%w: %v", ErrNoFUSE, err)
	}
	f.server = server
	return f, nil
}

// Mountpoint returns the directory the file system is mounted on.
func (f *FS) Mountpoint() string { return f.mountpoint }

// Backing returns the backing directory.
func (f *FS) Backing() string { return f.backing }

// FailSync makes the next fsync of the file at name (relative to the
// mount) fail with EIO as Linux's does after a failed write-back: the
// file's unsynced pages stay readable but are never written by a later
// fsync and are lost at a cut, and each handle open on the file at that
// moment reports EIO once, at its next fsync, after syncing what it can
// (the caller's handle has had its error).
func (f *FS) FailSync(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failSync == nil {
		f.failSync = map[string]bool{}
	}
	f.failSync[filepath.Join(f.backing, name)] = true
}

// FailedSyncs returns how many fsyncs FailSync has failed.
func (f *FS) FailedSyncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// Cut drops every unsynced write and every entry change no directory
// fsync made durable, as a power cut would; afterwards the backing
// directory holds exactly the synced state, and every operation on the
// mount fails with EIO until it is unmounted. Kill the processes using
// the mount first: a write that lands after Cut fails, as on a dead disk.
func (f *FS) Cut() error { return f.cut(nil, nil) }

// Tear is Cut, except that each unsynced 512-byte sector lying inside its
// file's synced size lands on the backing file with probability one half,
// independently of the others: a cut in the middle of the disk's writes,
// in any order. It returns how many sectors landed.
func (f *FS) Tear(rng *rand.Rand) (landed int, err error) {
	err = f.cut(rng, &landed)
	return landed, err
}

func (f *FS) cut(rng *rand.Rand, landed *int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead {
		return nil
	}
	f.dead = true
	var errs []error
	for n := range f.overlays {
		if rng != nil {
			k, err := n.ov.tear(rng)
			*landed += k
			errs = append(errs, err)
		}
		n.ov.close()
		n.ov = nil
	}
	f.overlays = map[*node]bool{}
	for i := len(f.journal) - 1; i >= 0; i-- {
		errs = append(errs, f.journal[i].undo())
	}
	f.journal = nil
	return errors.Join(errs...)
}

// Sync makes everything durable, as a clean shutdown would: every file's
// writes and every entry change.
func (f *FS) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead {
		return syscall.EIO
	}
	var errs []error
	for n := range f.overlays {
		errs = append(errs, n.ov.sync())
		n.releaseIfClean()
	}
	errs = append(errs, f.commit())
	return errors.Join(errs...)
}

// Unmount syncs everything unless the file system was cut, then unmounts
// it. It succeeds while processes still hold files open (a killed server
// whose files the kernel has not closed yet): when a plain unmount is
// refused, the mount is detached lazily and the connection aborted.
func (f *FS) Unmount() error {
	syncErr := f.Sync()
	if errors.Is(syncErr, syscall.EIO) {
		syncErr = nil // cut: nothing left to sync
	}
	var fuseDev uint64
	var st syscall.Stat_t
	if err := syscall.Stat(f.mountpoint, &st); err == nil {
		fuseDev = st.Dev
	}
	err := f.server.Unmount()
	if err != nil {
		f.mu.Lock()
		f.dead = true // nobody may write after this; answer EIO to stragglers
		f.mu.Unlock()
		err = syscall.Unmount(f.mountpoint, syscall.MNT_DETACH)
	}
	done := make(chan struct{})
	go func() { f.server.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		abortConnection(fuseDev)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			err = errors.Join(err, errors.New("dropfs: the FUSE server did not stop after the connection was aborted"))
		}
	}
	f.mu.Lock()
	for n := range f.overlays {
		n.ov.close()
		n.ov = nil
	}
	f.overlays = map[*node]bool{}
	f.mu.Unlock()
	os.RemoveAll(f.trash)
	return errors.Join(syncErr, err)
}

// abortConnection aborts the FUSE connection of the mount whose st_dev is
// dev, through the fusectl file system (mounted here if it is not yet).
func abortConnection(dev uint64) {
	if dev == 0 {
		return
	}
	const ctl = "/sys/fs/fuse/connections"
	abort := filepath.Join(ctl, fmt.Sprint(unix.Minor(dev)), "abort")
	if _, err := os.Stat(abort); err != nil {
		syscall.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	os.WriteFile(abort, []byte("1"), 0o200)
}

// commit makes every journaled entry change durable. f.mu is held.
func (f *FS) commit() error {
	var errs []error
	for _, op := range f.journal {
		if op.kind == opRemoved {
			errs = append(errs, os.RemoveAll(op.b))
		}
	}
	f.journal = nil
	return errors.Join(errs...)
}

// trashPath returns a fresh name in the trash directory. f.mu is held.
func (f *FS) trashPath() string {
	f.trashSeq++
	return filepath.Join(f.trash, fmt.Sprint(f.trashSeq))
}

// nsOp is one journaled entry change, with what undoes it. Paths are in
// the backing directory.
type nsOp struct {
	kind int
	a, b string
}

const (
	opCreated   = iota // a was created (file, directory, link, node)
	opRemoved          // a was moved to the trash at b
	opRenamed          // a was renamed to b
	opExchanged        // a and b were exchanged
)

func (op nsOp) undo() error {
	switch op.kind {
	case opCreated:
		return os.RemoveAll(op.a)
	case opRemoved, opRenamed:
		return os.Rename(op.b, op.a)
	case opExchanged:
		return unix.Renameat2(unix.AT_FDCWD, op.a, unix.AT_FDCWD, op.b, unix.RENAME_EXCHANGE)
	}
	return nil
}

// overlay is a file's unsynced state: its size, the pages written since
// the last fsync, and floor, below which the backing file's bytes are
// still the file's (a truncation hides what lies above it). lost holds
// the pages a failed fsync marked clean: read as written, never synced
// (until written again), dropped by a cut; errSeq counts those failures,
// for each handle's report (handle.seen).
type overlay struct {
	fd      int   // the backing file, read and write
	synced  int64 // the backing file's size
	size    int64
	floor   int64
	pages   map[int64]*[pageSize]byte
	lost    map[int64]*[pageSize]byte
	errSeq  int
	handles int
}

func newOverlay(path string) (*overlay, error) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return &overlay{fd: fd, synced: st.Size, size: st.Size, floor: st.Size, pages: map[int64]*[pageSize]byte{}, lost: map[int64]*[pageSize]byte{}}, nil
}

func (o *overlay) close() {
	if o.fd >= 0 {
		syscall.Close(o.fd)
		o.fd = -1
	}
}

func (o *overlay) dirty() bool {
	return len(o.pages) > 0 || o.size != o.synced || o.floor != o.synced
}

// page returns page p for a write: a lost page is written whole again,
// as a page the kernel holds; another is loaded from the backing file
// below floor.
func (o *overlay) page(p int64) (*[pageSize]byte, error) {
	if pg, ok := o.pages[p]; ok {
		return pg, nil
	}
	if pg, ok := o.lost[p]; ok {
		delete(o.lost, p)
		o.pages[p] = pg
		return pg, nil
	}
	pg := new([pageSize]byte)
	if err := o.readBacking(pg[:], p*pageSize); err != nil {
		return nil, err
	}
	o.pages[p] = pg
	return pg, nil
}

// readBacking fills buf with the backing file's bytes at off below floor
// (zeros above it and past the backing file's end).
func (o *overlay) readBacking(buf []byte, off int64) error {
	clear(buf)
	n := min(int64(len(buf)), o.floor-off)
	for done := int64(0); done < n; {
		r, err := syscall.Pread(o.fd, buf[done:n], off+done)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if r == 0 {
			break
		}
		done += int64(r)
	}
	return nil
}

func (o *overlay) read(buf []byte, off int64) (int, error) {
	if off >= o.size {
		return 0, nil
	}
	buf = buf[:min(int64(len(buf)), o.size-off)]
	for done := 0; done < len(buf); {
		pos := off + int64(done)
		p, in := pos/pageSize, pos%pageSize
		n := min(len(buf)-done, int(pageSize-in))
		if pg, ok := o.pages[p]; ok {
			copy(buf[done:done+n], pg[in:])
		} else if pg, ok := o.lost[p]; ok {
			copy(buf[done:done+n], pg[in:])
		} else if err := o.readBacking(buf[done:done+n], pos); err != nil {
			return done, err
		}
		done += n
	}
	return len(buf), nil
}

func (o *overlay) write(data []byte, off int64) error {
	for done := 0; done < len(data); {
		pos := off + int64(done)
		p, in := pos/pageSize, pos%pageSize
		pg, err := o.page(p)
		if err != nil {
			return err
		}
		done += copy(pg[in:], data[done:])
	}
	o.size = max(o.size, off+int64(len(data)))
	return nil
}

func (o *overlay) truncate(size int64) {
	if size < o.size {
		for _, pages := range []map[int64]*[pageSize]byte{o.pages, o.lost} {
			for p := range pages {
				if p*pageSize >= size {
					delete(pages, p)
				}
			}
			if in := size % pageSize; in != 0 {
				if pg, ok := pages[size/pageSize]; ok {
					clear(pg[in:])
				}
			}
		}
	}
	o.floor = min(o.floor, size)
	o.size = size
}

// sync writes the overlay to the backing file: what fsync makes durable.
// The backing file is not fsynced itself: the backing directory is the
// "disk", and no test cuts its power.
func (o *overlay) sync() error {
	if !o.dirty() {
		return nil
	}
	if err := syscall.Ftruncate(o.fd, o.floor); err != nil {
		return err
	}
	for p, pg := range o.pages {
		end := min(int64(pageSize), o.size-p*pageSize)
		if end <= 0 {
			continue
		}
		if _, err := syscall.Pwrite(o.fd, pg[:end], p*pageSize); err != nil {
			return err
		}
	}
	if err := syscall.Ftruncate(o.fd, o.size); err != nil {
		return err
	}
	clear(o.pages)
	o.floor, o.synced = o.size, o.size
	return nil
}

// tear lands a random half of the unsynced sectors that lie inside the
// backing file's size below floor, in random order, and returns how many
// landed.
func (o *overlay) tear(rng *rand.Rand) (int, error) {
	type sector struct {
		off  int64
		data []byte
	}
	var all []sector
	ps := make([]int64, 0, len(o.pages))
	for p := range o.pages {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	for _, p := range ps {
		for s := int64(0); s < pageSize; s += 512 {
			off := p*pageSize + s
			if off+512 <= o.floor && rng.IntN(2) == 0 {
				all = append(all, sector{off, o.pages[p][s : s+512]})
			}
		}
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for i, s := range all {
		if _, err := syscall.Pwrite(o.fd, s.data, s.off); err != nil {
			return i, err
		}
	}
	return len(all), nil
}

// node is a loopback node whose file data goes through an overlay and
// whose entry changes are journaled.
type node struct {
	*fs.LoopbackNode
	fs *FS
	ov *overlay // nil: the backing file is the file; guarded by fs.mu
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeStatxer        = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.FileReader         = (*handle)(nil)
	_ fs.FileWriter         = (*handle)(nil)
	_ fs.FileFsyncer        = (*handle)(nil)
	_ fs.FileReleaser       = (*handle)(nil)
	_ fs.FileGetattrer      = (*handle)(nil)
	_ fs.FileAllocater      = (*handle)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileReleasedirer   = (*dirHandle)(nil)
	_ fs.FileSeekdirer      = (*dirHandle)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if ln, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: ln, fs: n.fs}
	}
	return ops
}

// path is the node's path in the backing directory.
func (n *node) path() string {
	return filepath.Join(n.fs.backing, n.Path(n.fs.rootNode.EmbeddedInode()))
}

func (n *node) child(name string) string { return filepath.Join(n.path(), name) }

// overlay returns the node's overlay, creating it. fs.mu is held.
func (n *node) overlay() (*overlay, error) { return n.overlayAt("") }

// overlayAt is overlay for a node whose backing path is p (a node not yet
// in the tree has none of its own); "" means the node's path.
func (n *node) overlayAt(p string) (*overlay, error) {
	if n.ov == nil {
		if p == "" {
			p = n.path()
		}
		ov, err := newOverlay(p)
		if err != nil {
			return nil, err
		}
		n.ov = ov
		n.fs.overlays[n] = true
	}
	return n.ov, nil
}

// releaseIfClean drops an overlay that holds nothing and serves no handle.
// fs.mu is held.
func (n *node) releaseIfClean() {
	if n.ov != nil && n.ov.handles == 0 && !n.ov.dirty() && len(n.ov.lost) == 0 {
		n.ov.close()
		n.ov = nil
		delete(n.fs.overlays, n)
	}
}

// lock takes fs.mu and reports EIO after a cut.
func (n *node) lock() syscall.Errno {
	n.fs.mu.Lock()
	if n.fs.dead {
		n.fs.mu.Unlock()
		return syscall.EIO
	}
	return 0
}

func (n *node) unlock() { n.fs.mu.Unlock() }

// patchSize sets the size an attribute reply carries to the overlay's.
// fs.mu is held.
func patchSize(ch *fs.Inode, a *fuse.Attr) {
	if cn, ok := ch.Operations().(*node); ok && cn.ov != nil {
		a.Size = uint64(cn.ov.size)
		a.Blocks = (a.Size + 511) / 512
	}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.lock(); e != 0 {
		return nil, e
	}
	defer n.unlock()
	ch, e := n.LoopbackNode.Lookup(ctx, name, out)
	if e == 0 {
		patchSize(ch, &out.Attr)
	}
	return ch, e
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if e := n.lock(); e != 0 {
		return e
	}
	defer n.unlock()
	return n.getattr(ctx, f, out)
}

func (n *node) getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	var err error
	if _, ok := f.(*handle); ok && n.ov != nil {
		err = syscall.Fstat(n.ov.fd, &st) // an unlinked file has no path
	} else if n.EmbeddedInode() == n.fs.rootNode.EmbeddedInode() {
		err = syscall.Stat(n.path(), &st)
	} else {
		err = syscall.Lstat(n.path(), &st)
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	patchSize(n.EmbeddedInode(), &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.lock(); e != 0 {
		return e
	}
	defer n.unlock()
	if sz, ok := in.GetSize(); ok {
		ov, err := n.overlay()
		if err != nil {
			return fs.ToErrno(err)
		}
		ov.truncate(int64(sz))
		n.releaseIfClean()
		in.Valid &^= fuse.FATTR_SIZE
	}
	if in.Valid&^(fuse.FATTR_FH|fuse.FATTR_LOCKOWNER) != 0 {
		var discard fuse.AttrOut
		if e := n.LoopbackNode.Setattr(ctx, nil, in, &discard); e != 0 {
			return e
		}
	}
	return n.getattr(ctx, f, out)
}

// Statx is refused (ENOSYS), so the kernel asks Getattr, which knows the
// overlay's size.
func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return syscall.ENOSYS
}

// Tmpfile is refused: an O_TMPFILE file has no entry to journal.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// CopyFileRange is refused, so the kernel copies through Read and Write.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, len uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if e := n.lock(); e != 0 {
		return nil, 0, e
	}
	defer n.unlock()
	return n.open(flags, "")
}

// open returns a handle on the node's overlay; p as for overlayAt. fs.mu
// is held.
func (n *node) open(flags uint32, p string) (fs.FileHandle, uint32, syscall.Errno) {
	ov, err := n.overlayAt(p)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	ov.handles++
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		ov.truncate(0)
	}
	return &handle{n: n, append: flags&syscall.O_APPEND != 0, seen: ov.errSeq}, 0, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if e := n.lock(); e != 0 {
		return nil, nil, 0, e
	}
	defer n.unlock()
	p := n.child(name)
	fd, err := syscall.Open(p, syscall.O_CREAT|syscall.O_EXCL|syscall.O_RDWR|syscall.O_CLOEXEC, mode)
	switch {
	case err == syscall.EEXIST && flags&syscall.O_EXCL == 0:
		// created meanwhile by someone else: an open
	case err != nil:
		return nil, nil, 0, fs.ToErrno(err)
	default:
		syscall.Close(fd)
		n.fs.journal = append(n.fs.journal, nsOp{kind: opCreated, a: p})
		if caller, ok := fuse.FromContext(ctx); ok && os.Getuid() == 0 {
			syscall.Lchown(p, int(caller.Uid), int(caller.Gid))
		}
	}
	ch, e := n.LoopbackNode.Lookup(ctx, name, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	cn, ok := ch.Operations().(*node)
	if !ok {
		return nil, nil, 0, syscall.EIO
	}
	h, fl, e := cn.open(flags, p)
	if e != 0 {
		return nil, nil, 0, e
	}
	patchSize(ch, &out.Attr)
	return ch, h, fl, 0
}

// created journals a new entry made by the loopback.
func (n *node) created(name string, ch *fs.Inode, e syscall.Errno) (*fs.Inode, syscall.Errno) {
	if e == 0 {
		n.fs.journal = append(n.fs.journal, nsOp{kind: opCreated, a: n.child(name)})
	}
	return ch, e
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.lock(); e != 0 {
		return nil, e
	}
	defer n.unlock()
	ch, e := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	return n.created(name, ch, e)
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.lock(); e != 0 {
		return nil, e
	}
	defer n.unlock()
	ch, e := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	return n.created(name, ch, e)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.lock(); e != 0 {
		return nil, e
	}
	defer n.unlock()
	ch, e := n.LoopbackNode.Symlink(ctx, target, name, out)
	return n.created(name, ch, e)
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.lock(); e != 0 {
		return nil, e
	}
	defer n.unlock()
	tn, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	ch, e := n.LoopbackNode.Link(ctx, tn.LoopbackNode, name, out)
	if e == 0 {
		patchSize(ch, &out.Attr)
	}
	return n.created(name, ch, e)
}

// remove moves the entry at p to the trash and journals it. fs.mu is held.
func (n *node) remove(p string) syscall.Errno {
	t := n.fs.trashPath()
	if err := os.Rename(p, t); err != nil {
		return fs.ToErrno(err)
	}
	n.fs.journal = append(n.fs.journal, nsOp{kind: opRemoved, a: p, b: t})
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if e := n.lock(); e != 0 {
		return e
	}
	defer n.unlock()
	p := n.child(name)
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return syscall.EISDIR
	}
	return n.remove(p)
}

// emptyDir reports whether p is an empty directory, or the error rmdir(2)
// would give.
func emptyDir(p string) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return syscall.ENOTDIR
	}
	d, err := os.Open(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer d.Close()
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return syscall.ENOTEMPTY
	}
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if e := n.lock(); e != 0 {
		return e
	}
	defer n.unlock()
	p := n.child(name)
	if e := emptyDir(p); e != 0 {
		return e
	}
	return n.remove(p)
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if e := n.lock(); e != 0 {
		return e
	}
	defer n.unlock()
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	a, b := n.child(name), np.child(newName)
	if flags&unix.RENAME_EXCHANGE != 0 {
		if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
			return fs.ToErrno(err)
		}
		n.fs.journal = append(n.fs.journal, nsOp{kind: opExchanged, a: a, b: b})
		return 0
	}
	var sa, sb syscall.Stat_t
	if err := syscall.Lstat(a, &sa); err != nil {
		return fs.ToErrno(err)
	}
	if err := syscall.Lstat(b, &sb); err == nil {
		if flags&unix.RENAME_NOREPLACE != 0 {
			return syscall.EEXIST
		}
		if sa.Ino == sb.Ino && sa.Dev == sb.Dev {
			return 0 // two links to one file: rename(2) does nothing
		}
		aDir, bDir := sa.Mode&syscall.S_IFMT == syscall.S_IFDIR, sb.Mode&syscall.S_IFMT == syscall.S_IFDIR
		switch {
		case aDir && !bDir:
			return syscall.ENOTDIR
		case !aDir && bDir:
			return syscall.EISDIR
		case bDir:
			if e := emptyDir(b); e != 0 {
				return e
			}
		}
		if e := n.remove(b); e != 0 {
			return e
		}
	} else if !errors.Is(err, syscall.ENOENT) {
		return fs.ToErrno(err)
	}
	if err := os.Rename(a, b); err != nil {
		return fs.ToErrno(err)
	}
	n.fs.journal = append(n.fs.journal, nsOp{kind: opRenamed, a: a, b: b})
	return 0
}

// Fsync of a file lands its overlay on the backing file; of a directory,
// it makes every journaled entry change durable.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if e := n.lock(); e != 0 {
		return e
	}
	defer n.unlock()
	if n.IsDir() {
		return fs.ToErrno(n.fs.commit())
	}
	if n.ov == nil {
		return 0
	}
	h, _ := f.(*handle)
	if p := n.path(); n.fs.failSync[p] {
		delete(n.fs.failSync, p)
		n.fs.failed++
		for pg, data := range n.ov.pages {
			n.ov.lost[pg] = data
		}
		clear(n.ov.pages)
		n.ov.errSeq++
		if h != nil {
			h.seen = n.ov.errSeq
		}
		return syscall.EIO
	}
	err := n.ov.sync()
	if err == nil && h != nil && h.seen < n.ov.errSeq {
		h.seen = n.ov.errSeq
		err = syscall.EIO
	}
	n.releaseIfClean()
	return fs.ToErrno(err)
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if e := n.lock(); e != 0 {
		return nil, 0, e
	}
	defer n.unlock()
	h, fl, e := n.LoopbackNode.OpendirHandle(ctx, flags)
	if e != 0 {
		return nil, 0, e
	}
	return &dirHandle{FileHandle: h, n: n}, fl, 0
}

// handle is an open file: every read and write goes to the node's overlay.
type handle struct {
	n      *node
	append bool
	seen   int // the overlay's errSeq this handle has reported; under fs.mu
}

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if e := h.n.lock(); e != 0 {
		return nil, e
	}
	defer h.n.unlock()
	r, err := h.n.ov.read(buf, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(buf[:r]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if e := h.n.lock(); e != 0 {
		return 0, e
	}
	defer h.n.unlock()
	if h.append {
		off = h.n.ov.size
	}
	if err := h.n.ov.write(data, off); err != nil {
		return 0, fs.ToErrno(err)
	}
	return uint32(len(data)), 0
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.n.Fsync(ctx, h, flags)
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	if e := h.n.lock(); e != 0 {
		return e
	}
	defer h.n.unlock()
	return h.n.getattr(ctx, h, out)
}

// Allocate extends the file with zeros (mode 0); other modes are refused.
func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if mode != 0 {
		return syscall.EOPNOTSUPP
	}
	if e := h.n.lock(); e != 0 {
		return e
	}
	defer h.n.unlock()
	if end := int64(off + size); end > h.n.ov.size {
		h.n.ov.truncate(end)
	}
	return 0
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.n.fs.mu.Lock()
	defer h.n.fs.mu.Unlock()
	if h.n.ov != nil {
		h.n.ov.handles--
		h.n.releaseIfClean()
	}
	return 0
}

// dirHandle is the loopback's directory stream with fsync journaled.
type dirHandle struct {
	fs.FileHandle
	n *node
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.Fsync(ctx, nil, flags)
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.FileHandle.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.FileHandle.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.FileHandle.(fs.FileReleasedirer).Releasedir(ctx, flags)
}
