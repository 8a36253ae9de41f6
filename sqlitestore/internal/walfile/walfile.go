// Package walfile reads SQLite's WAL file format
// (https://www.sqlite.org/fileformat2.html#walformat) as SQLite's recovery
// does, and the index b-tree pages in it.
package walfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
)

// A 32-byte header, then frames of a 24-byte header and a page each.
const (
	walMagic   = 0x377f0682 // the low bit: checksums of big-endian words
	walVersion = 3007000
	headerSize = 32
	frameHead  = 24
)

// ErrDamaged is Committed's error for a file whose header is not a WAL's.
// A frame is not judged: SQLite's recovery ends the log at the first frame
// of another salt or checksum, and so does Committed, whatever follows it.
// Frames of the log's salts follow that break in routine cases: an
// unfinished transaction's, after a later one wrote fewer frames over
// them, or one whose frames SQLite rewrote in place before its commit
// rewrote their checksums; they cannot be told from a changed byte.
var ErrDamaged = errors.New("walfile: the WAL is damaged")

// Committed reads a WAL's valid frames up to the last commit and returns
// the page size, the database's pages after that commit, and each page's
// offset of its last committed image: what SQLite's recovery reads. An
// empty file has none.
func Committed(f io.ReaderAt) (size int, pages uint32, last map[uint32]int64, err error) {
	var hdr [headerSize]byte
	if n, err := f.ReadAt(hdr[:], 0); err != nil {
		switch {
		case err == io.EOF && n == 0:
			return 0, 0, nil, nil
		case err == io.EOF:
			return 0, 0, nil, ErrDamaged
		}
		return 0, 0, nil, err
	}
	be := binary.BigEndian
	magic := be.Uint32(hdr[0:])
	size = int(be.Uint32(hdr[8:]))
	if magic&^1 != walMagic || size < 512 || size > 65536 || size&(size-1) != 0 {
		return 0, 0, nil, ErrDamaged
	}
	bigEndian := magic&1 == 1
	s1, s2 := checksum(bigEndian, 0, 0, hdr[:24])
	if s1 != be.Uint32(hdr[24:]) || s2 != be.Uint32(hdr[28:]) {
		return 0, 0, nil, ErrDamaged
	}
	if be.Uint32(hdr[4:]) != walVersion {
		return 0, 0, nil, errors.New("a WAL file of an unknown version")
	}
	type frame struct {
		pgno uint32
		off  int64
	}
	var pending []frame
	last = map[uint32]int64{}
	buf := make([]byte, frameHead+size)
	off := int64(headerSize)
	for ; ; off += int64(len(buf)) {
		if _, err := f.ReadAt(buf, off); err != nil {
			if err == io.EOF {
				return size, pages, last, nil // a torn tail, or none
			}
			return 0, 0, nil, err
		}
		pgno, commit := be.Uint32(buf[0:]), be.Uint32(buf[4:])
		if pgno == 0 || !bytes.Equal(buf[8:16], hdr[16:24]) {
			return size, pages, last, nil
		}
		s1, s2 = checksum(bigEndian, s1, s2, buf[:8])
		s1, s2 = checksum(bigEndian, s1, s2, buf[frameHead:])
		if s1 != be.Uint32(buf[16:]) || s2 != be.Uint32(buf[20:]) {
			return size, pages, last, nil
		}
		pending = append(pending, frame{pgno, off + frameHead})
		if commit != 0 {
			for _, fr := range pending {
				last[fr.pgno] = fr.off
			}
			pending, pages = pending[:0], commit
		}
	}
}

// checksum continues SQLite's WAL checksum (s1, s2) over b.
func checksum(bigEndian bool, s1, s2 uint32, b []byte) (uint32, uint32) {
	var order binary.ByteOrder = binary.LittleEndian
	if bigEndian {
		order = binary.BigEndian
	}
	for i := 0; i+8 <= len(b); i += 8 {
		s1 += order.Uint32(b[i:]) + s2
		s2 += order.Uint32(b[i+4:]) + s1
	}
	return s1, s2
}
