package walfile

import (
	"bytes"
	"encoding/binary"
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

func TestCommitted(t *testing.T) {
	frame := int64(frameHead + 512)
	at := func(i int) int64 { return headerSize + int64(i)*frame + frameHead }
	tests := []struct {
		name   string
		wal    []byte
		want   map[uint32]int64
		errors bool
	}{
		{"empty file", nil, nil, false},
		{"header alone", walOf(512, nil, nil), map[uint32]int64{}, false},
		{"a commit", walOf(512, []uint32{1, 2}, []bool{false, true}), map[uint32]int64{1: at(0), 2: at(1)}, false},
		{"the last image of a page", walOf(512, []uint32{2, 2, 3}, []bool{true, false, true}), map[uint32]int64{2: at(1), 3: at(2)}, false},
		{"frames after the last commit", walOf(512, []uint32{1, 2, 3}, []bool{true, false, false}), map[uint32]int64{1: at(0)}, false},
		{"a torn frame ends the log", walOf(512, []uint32{1, 2}, []bool{true, true})[:headerSize+2*frame-1], map[uint32]int64{1: at(0)}, false},
		{"a bad checksum ends the log", func() []byte {
			w := walOf(512, []uint32{1, 2, 3}, []bool{true, true, true})
			w[at(1)+7] ^= 1
			return w
		}(), map[uint32]int64{1: at(0)}, false},
		{"another salt ends the log", func() []byte {
			w := walOf(512, []uint32{1, 2}, []bool{true, true})
			w[headerSize+frame+8] ^= 1
			return w
		}(), map[uint32]int64{1: at(0)}, false},
		{"a bad header checksum: no log", func() []byte {
			w := walOf(512, []uint32{1}, []bool{true})
			w[25] ^= 1
			return w
		}(), nil, false},
		{"another magic: no log", func() []byte {
			w := walOf(512, []uint32{1}, []bool{true})
			w[0] ^= 0x80
			return w
		}(), nil, false},
		{"a page size not a power of two: no log", func() []byte {
			w := walOf(512, []uint32{1}, []bool{true})
			binary.BigEndian.PutUint32(w[8:], 1000)
			return w
		}(), nil, false},
		{"another version with a valid checksum: refused", func() []byte {
			w := walOf(512, nil, nil)
			binary.BigEndian.PutUint32(w[4:], walVersion+1)
			s1, s2 := checksum(false, 0, 0, w[:24])
			binary.BigEndian.PutUint32(w[24:], s1)
			binary.BigEndian.PutUint32(w[28:], s2)
			return w
		}(), nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, got, err := Committed(bytes.NewReader(tc.wal))
			if (err != nil) != tc.errors {
				t.Fatalf("err = %v; want an error: %v", err, tc.errors)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v; want %v", got, tc.want)
			}
			for p, off := range tc.want {
				if got[p] != off {
					t.Fatalf("got %v; want %v", got, tc.want)
				}
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
		if err != nil {
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
// panic, every payload
// inside the page, and every column inside its record.
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
			cols, total, ok := Record(e)
			if !ok {
				continue
			}
			if len(cols) > total {
				t.Fatalf("%d columns read of %d", len(cols), total)
			}
			for _, c := range cols {
				if len(c.Bytes) > len(e) {
					t.Fatalf("a column of %d bytes in a record of %d", len(c.Bytes), len(e))
				}
			}
		}
	})
}

func TestRecord(t *testing.T) {
	tests := []struct {
		name  string
		rec   []byte
		want  []Value
		total int
		ok    bool
	}{
		{"null, ints of every width, 0 and 1", []byte{10, 0, 1, 2, 3, 4, 5, 6, 8, 9,
			0xff,
			0x01, 0x00,
			0xff, 0xff, 0xfe,
			0x00, 0x00, 0x00, 0x07,
			0x80, 0, 0, 0, 0, 0,
			0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			[]Value{{Null: true}, {IsInt: true, Int: -1}, {IsInt: true, Int: 256}, {IsInt: true, Int: -2}, {IsInt: true, Int: 7},
				{IsInt: true, Int: -1 << 47}, {IsInt: true, Int: 1<<63 - 1}, {IsInt: true, Int: 0}, {IsInt: true, Int: 1}}, 9, true},
		{"blob and text", []byte{3, 16, 17, 1, 2, 'x', 'y'}, []Value{{Bytes: []byte{1, 2}}, {Text: true, Bytes: []byte("xy")}}, 2, true},
		{"a column past the payload: on overflow pages", []byte{3, 1, 20, 5}, []Value{{IsInt: true, Int: 5}}, 2, true},
		{"a reserved type", []byte{2, 10}, nil, 0, false},
		{"a header longer than the payload", []byte{9, 1}, nil, 0, false},
		{"an empty payload", nil, nil, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cols, total, ok := Record(tc.rec)
			if ok != tc.ok || total != tc.total || len(cols) != len(tc.want) {
				t.Fatalf("Record = %+v, %d, %v; want %+v, %d, %v", cols, total, ok, tc.want, tc.total, tc.ok)
			}
			for i := range cols {
				if cols[i].Null != tc.want[i].Null || cols[i].IsInt != tc.want[i].IsInt || cols[i].Int != tc.want[i].Int ||
					cols[i].Text != tc.want[i].Text || !bytes.Equal(cols[i].Bytes, tc.want[i].Bytes) {
					t.Fatalf("column %d = %+v; want %+v", i, cols[i], tc.want[i])
				}
			}
		})
	}
}
