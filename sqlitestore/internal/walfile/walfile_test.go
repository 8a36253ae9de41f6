package walfile

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"testing"
)

// walOf builds a WAL file of pages of size bytes: one frame per entry of
// pgnos, a commit where commit[i] is set, salts and checksums as SQLite
// writes them (little-endian words).
func walOf(size int, pgnos []uint32, commit []bool) []byte {
	be := binary.BigEndian
	hdr := make([]byte, headerSize)
	be.PutUint32(hdr[0:], walMagic)
	be.PutUint32(hdr[4:], walVersion)
	be.PutUint32(hdr[8:], uint32(size))
	be.PutUint32(hdr[16:], 0x01020304)
	be.PutUint32(hdr[20:], 0x05060708)
	s1, s2 := checksum(false, 0, 0, hdr[:24])
	be.PutUint32(hdr[24:], s1)
	be.PutUint32(hdr[28:], s2)
	out := hdr
	for i, pgno := range pgnos {
		fh := make([]byte, frameHead)
		be.PutUint32(fh[0:], pgno)
		if commit[i] {
			be.PutUint32(fh[4:], 10)
		}
		copy(fh[8:16], hdr[16:24])
		page := bytes.Repeat([]byte{byte(i + 1)}, size)
		s1, s2 = checksum(false, s1, s2, fh[:8])
		s1, s2 = checksum(false, s1, s2, page)
		be.PutUint32(fh[16:], s1)
		be.PutUint32(fh[20:], s2)
		out = append(append(out, fh...), page...)
	}
	return out
}

// TestCommitted: the frames SQLite's recovery reads, up to the last
// commit, ending at the first frame of another salt or a bad checksum
// whatever follows it (an unfinished transaction's frames, a torn tail,
// stale frames); a header that is not a WAL's is ErrDamaged.
func TestCommitted(t *testing.T) {
	frame := int64(frameHead + 512)
	at := func(i int) int64 { return headerSize + int64(i)*frame + frameHead }
	withHeader := func(w []byte, edit func([]byte)) []byte {
		edit(w)
		s1, s2 := checksum(false, 0, 0, w[:24])
		binary.BigEndian.PutUint32(w[24:], s1)
		binary.BigEndian.PutUint32(w[28:], s2)
		return w
	}
	// flip flips the low bit of w's bytes at offs.
	flip := func(w []byte, offs ...int64) []byte {
		for _, off := range offs {
			w[off] ^= 1
		}
		return w
	}
	const damaged, other = "damaged", "another error"
	tests := []struct {
		name string
		wal  []byte
		want map[uint32]int64
		err  string
	}{
		{"empty file", nil, nil, ""},
		{"header alone", walOf(512, nil, nil), map[uint32]int64{}, ""},
		{"a commit", walOf(512, []uint32{1, 2}, []bool{false, true}), map[uint32]int64{1: at(0), 2: at(1)}, ""},
		{"the last image of a page", walOf(512, []uint32{2, 2, 3}, []bool{true, false, true}), map[uint32]int64{2: at(1), 3: at(2)}, ""},
		{"frames after the last commit", walOf(512, []uint32{1, 2, 3}, []bool{true, false, false}), map[uint32]int64{1: at(0)}, ""},
		{"a torn frame ends the log", walOf(512, []uint32{1, 2}, []bool{true, true})[:headerSize+2*frame-1], map[uint32]int64{1: at(0)}, ""},
		{"a bad checksum of the last frame ends the log", flip(walOf(512, []uint32{1, 2}, []bool{true, true}), at(1)+7),
			map[uint32]int64{1: at(0)}, ""},
		{"another salt of the last frame ends the log", flip(walOf(512, []uint32{1, 2}, []bool{true, true}), headerSize+frame+8),
			map[uint32]int64{1: at(0)}, ""},
		{"stale frames of another generation after the log", // another salt
			flip(walOf(512, []uint32{1, 2, 3}, []bool{true, true, true}), headerSize+frame+8, headerSize+2*frame+8),
			map[uint32]int64{1: at(0)}, ""},
		{"an unfinished transaction's frames after a later, shorter one", func() []byte {
			// Killed with frames 2 to 4 of a transaction written; the
			// next program wrote one transaction of two frames over them.
			killed := walOf(512, []uint32{1, 2, 3, 4}, []bool{true, false, false, false})
			w := walOf(512, []uint32{1, 5}, []bool{true, true})
			return append(w, killed[len(w):]...)
		}(), map[uint32]int64{1: at(0), 5: at(1)}, ""},
		// SQLite rewrites a page of the open transaction in its frame and
		// fixes the checksums after it at the commit: killed before.
		{"a frame rewritten in place before its transaction's commit",
			flip(walOf(512, []uint32{1, 2, 3, 4}, []bool{true, false, false, true}), at(1)+7), map[uint32]int64{1: at(0)}, ""},
		{"a bad checksum of the first frame ends the log", flip(walOf(512, []uint32{1, 2}, []bool{false, true}), at(0)+100),
			map[uint32]int64{}, ""},
		{"another salt of the first frame ends the log", flip(walOf(512, []uint32{1, 2}, []bool{true, true}), headerSize+8),
			map[uint32]int64{}, ""},
		{"shorter than a header: damaged", walOf(512, nil, nil)[:20], nil, damaged},
		{"a bad header checksum: damaged", flip(walOf(512, []uint32{1}, []bool{true}), 25), nil, damaged},
		{"another magic: damaged", func() []byte {
			w := walOf(512, []uint32{1}, []bool{true})
			w[0] ^= 0x80
			return w
		}(), nil, damaged},
		{"a page size not a power of two: damaged", withHeader(walOf(512, []uint32{1}, []bool{true}), func(w []byte) {
			binary.BigEndian.PutUint32(w[8:], 1000)
		}), nil, damaged},
		{"a page size over 64 KiB: damaged", withHeader(walOf(512, []uint32{1}, []bool{true}), func(w []byte) {
			binary.BigEndian.PutUint32(w[8:], 1<<17)
		}), nil, damaged},
		{"another version with a valid checksum: refused", withHeader(walOf(512, nil, nil), func(w []byte) {
			binary.BigEndian.PutUint32(w[4:], walVersion+1)
		}), nil, other},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, got, err := Committed(bytes.NewReader(tc.wal))
			switch {
			case tc.err == "" && err != nil,
				tc.err == damaged && !errors.Is(err, ErrDamaged),
				tc.err == other && (err == nil || errors.Is(err, ErrDamaged)):
				t.Fatalf("err = %v; want %s", err, cmp.Or(tc.err, "none"))
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("got %v; want %v", got, tc.want)
			}
		})
	}
}

// FuzzCommitted: any bytes read without a panic, and every offset
// returned is a whole page inside the file, at a frame's page.
func FuzzCommitted(f *testing.F) {
	f.Add(walOf(512, []uint32{1, 2, 2}, []bool{false, true, true}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		size, _, last, err := Committed(bytes.NewReader(b))
		if err != nil && !errors.Is(err, ErrDamaged) {
			return
		}
		for pgno, off := range last {
			if pgno == 0 || off+int64(size) > int64(len(b)) || (off-headerSize-frameHead)%int64(frameHead+size) != 0 {
				t.Fatalf("page %d at %d of size %d in a file of %d bytes", pgno, off, size, len(b))
			}
		}
	})
}

// FuzzIndexEntries: any page, with any reserved bytes, read without a
// panic, every payload inside the page, and every column inside its
// record.
func FuzzIndexEntries(f *testing.F) {
	leaf := make([]byte, 512)
	leaf[0], leaf[4], leaf[5], leaf[6] = indexLeaf, 1, 1, 0xf0 // one cell at 496
	copy(leaf[496:], []byte{6, 3, 0x11, 1, 'a', 'b'})
	f.Add(leaf, uint32(2), uint16(0))
	f.Add([]byte{indexInterior, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0}, uint32(3), uint16(8))
	f.Fuzz(func(t *testing.T, page []byte, pgno uint32, reserved uint16) {
		usable := len(page) - int(reserved)
		entries, err := IndexEntries(page, pgno, usable)
		if err != nil {
			return
		}
		for _, e := range entries {
			cols, ok := Record(e)
			if !ok {
				continue
			}
			for _, c := range cols {
				if len(c.Bytes) > len(e) {
					t.Fatalf("a column of %d bytes in a record of %d", len(c.Bytes), len(e))
				}
			}
		}
	})
}

// TestRecord: every column the header lists, those past the payload (on
// overflow pages) Cut with the bytes the payload holds.
func TestRecord(t *testing.T) {
	tests := []struct {
		name string
		rec  []byte
		want []Value
		ok   bool
	}{
		{"null, ints of every width, 0 and 1", []byte{10, 0, 1, 2, 3, 4, 5, 6, 8, 9,
			0xff,
			0x01, 0x00,
			0xff, 0xff, 0xfe,
			0x00, 0x00, 0x00, 0x07,
			0x80, 0, 0, 0, 0, 0,
			0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			[]Value{{Null: true}, {IsInt: true, Int: -1}, {IsInt: true, Int: 256}, {IsInt: true, Int: -2}, {IsInt: true, Int: 7},
				{IsInt: true, Int: -1 << 47}, {IsInt: true, Int: 1<<63 - 1}, {IsInt: true, Int: 0}, {IsInt: true, Int: 1}}, true},
		{"blob and text", []byte{3, 16, 17, 1, 2, 'x', 'y'}, []Value{{Bytes: []byte{1, 2}}, {Text: true, Bytes: []byte("xy")}}, true},
		{"a column past the payload: on overflow pages", []byte{3, 1, 20, 5}, []Value{{IsInt: true, Int: 5}, {Cut: true, Bytes: []byte{}}}, true},
		{"a text cut short, and the integer after it", []byte{3, 29, 1, 'a', 'b'}, []Value{{Text: true, Cut: true, Bytes: []byte("ab")}, {IsInt: true, Cut: true}}, true},
		{"a reserved type", []byte{2, 10}, nil, false},
		{"a header longer than the payload", []byte{9, 1}, nil, false},
		{"an empty payload", nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cols, ok := Record(tc.rec)
			if ok != tc.ok || len(cols) != len(tc.want) {
				t.Fatalf("Record = %+v, %v; want %+v, %v", cols, ok, tc.want, tc.ok)
			}
			for i := range cols {
				// DeepEqual: a nil Bytes is not an empty one.
				if !reflect.DeepEqual(cols[i], tc.want[i]) {
					t.Fatalf("column %d = %+v; want %+v", i, cols[i], tc.want[i])
				}
			}
		})
	}
}

// TestFree: the freelist is read from page 1's first trunk through the
// trunks image has, each trunk and its leaves the WAL has free; a trunk
// image lacks, a leaf count past the page and a cycle of trunks end the
// walk.
func TestFree(t *testing.T) {
	be := binary.BigEndian
	trunk := func(next uint32, leaves ...uint32) []byte {
		b := make([]byte, 512)
		be.PutUint32(b[0:], next)
		be.PutUint32(b[4:], uint32(len(leaves)))
		for i, l := range leaves {
			be.PutUint32(b[8+4*i:], l)
		}
		return b
	}
	page1 := func(first uint32) []byte {
		b := make([]byte, 512)
		be.PutUint32(b[32:], first)
		return b
	}
	tooMany := trunk(0, 9)
	be.PutUint32(tooMany[4:], 200)
	for _, tc := range []struct {
		name  string
		pages map[uint32][]byte
		want  []uint32
	}{
		{"no page 1", map[uint32][]byte{3: trunk(0, 4)}, nil},
		{"an empty freelist", map[uint32][]byte{1: page1(0)}, nil},
		{"two trunks", map[uint32][]byte{1: page1(3), 3: trunk(6, 4, 5), 6: trunk(0, 7)}, []uint32{3, 4, 5, 6, 7}},
		{"a trunk missing ends the walk", map[uint32][]byte{1: page1(3), 3: trunk(6, 4)}, []uint32{3, 4}},
		{"a leaf count past the page ends the walk", map[uint32][]byte{1: page1(3), 3: trunk(8, 4), 8: tooMany}, []uint32{3, 4, 8}},
		{"a cycle of trunks ends the walk", map[uint32][]byte{1: page1(3), 3: trunk(6, 4), 6: trunk(3, 5)}, []uint32{3, 4, 5, 6}},
		{"a leaf the WAL lacks is left out", map[uint32][]byte{1: page1(3), 3: trunk(0, 4, 99)}, []uint32{3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := func(pgno uint32) bool { return pgno != 99 }
			free := Free(func(pgno uint32) []byte { return tc.pages[pgno] }, in)
			if len(free) != len(tc.want) || slices.ContainsFunc(tc.want, func(p uint32) bool { return !free[p] }) {
				t.Fatalf("Free = %v; want %v", free, tc.want)
			}
		})
	}
}

// TestFreeMemoryIsBoundedByTheWALsFrames: a hostile WAL of 1000 trunk pages
// of 64 KiB, each listing 16 382 leaves the WAL has no image of (16
// million in all), gives a map of the trunks alone.
func TestFreeMemoryIsBoundedByTheWALsFrames(t *testing.T) {
	const size, trunks = 65536, 1000
	be := binary.BigEndian
	p1 := make([]byte, size)
	be.PutUint32(p1[32:], 2)
	b := make([]byte, size)
	n := (size - 8) / 4
	be.PutUint32(b[4:], uint32(n))
	image := func(pgno uint32) []byte {
		if pgno == 1 {
			return p1
		}
		if pgno < 2 || pgno >= 2+trunks {
			return nil
		}
		be.PutUint32(b[0:], (pgno+1)%(2+trunks))
		for i := range n {
			be.PutUint32(b[8+4*i:], 1_000_000+pgno*uint32(n)+uint32(i))
		}
		return b
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	free := Free(image, func(pgno uint32) bool { return pgno < 2+trunks })
	runtime.ReadMemStats(&m1)
	if len(free) != trunks {
		t.Fatalf("Free = %d pages; want the %d trunks", len(free), trunks)
	}
	if grew := m1.TotalAlloc - m0.TotalAlloc; grew > 8<<20 {
		t.Fatalf("Free allocated %d MB for %d pages", grew>>20, len(free))
	}
}
