//go:build linux || darwin || freebsd

package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
)

// heldWAL reads the WAL index (the -shm file) of the database at path:
// when a read transaction of another process holds the WAL, so that no
// checkpoint can copy it whole and the WAL grows by every commit, it says
// so with the WAL's frames and how many of them are copied; else "". Call
// it with no connection of this process open on the file: closing a
// descriptor of it releases every POSIX lock the process holds on it,
// SQLite's included. A
// reader holds the WAL when it holds one of SQLite's read locks (a POSIX
// or OFD lock on the index, which F_GETLK sees in another process) on a
// snapshot older than the WAL's last frame. The index is in the byte
// order of the machine that wrote it: little-endian here.
func heldWAL(path string) string {
	f, err := os.OpenFile(path+"-shm", os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	var b [128]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		return ""
	}
	le := binary.LittleEndian
	if le.Uint32(b[0:]) != 3007000 { // WAL_MAX_VERSION: not an index SQLite wrote here
		return ""
	}
	frames, copied := le.Uint32(b[16:]), le.Uint32(b[96:])
	if copied >= frames {
		return ""
	}
	for i := range 5 { // WAL_NREADER read locks, at bytes 123 to 127
		if i > 0 && le.Uint32(b[100+4*i:]) >= frames {
			continue // a snapshot of the whole WAL holds nothing back
		}
		lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: int64(123 + i), Len: 1}
		if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err == nil && lk.Type != syscall.F_UNLCK {
			return fmt.Sprintf("a read transaction of another process holds the WAL (an unclosed *sql.Rows or transaction, litestream, a backup, a sqlite3 shell): the WAL holds %d frames, %d copied into the database file; until the read ends the WAL grows by every commit, and a repair after an I/O error waits for it where the disk lacks room for the whole file", frames, copied)
		}
	}
	return ""
}
