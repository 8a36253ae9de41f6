package walfile

import (
	"encoding/binary"
	"errors"
)

// The b-tree page and record formats, as far as an index b-tree (a WITHOUT
// ROWID table's rows) needs: https://www.sqlite.org/fileformat2.html.
const (
	indexInterior = 0x02
	indexLeaf     = 0x0a
)

var errMalformed = errors.New("walfile: malformed page")

// IndexEntries returns the payloads of the entries on page pgno of an
// index b-tree (nil for another page), without their overflow. usable is
// the page size less reserved bytes.
func IndexEntries(page []byte, pgno uint32, usable int) (payloads [][]byte, err error) {
	off := 0
	if pgno == 1 {
		off = 100 // the database header
	}
	if len(page) < off+12 || usable < 480 || usable > len(page) {
		return nil, errMalformed
	}
	kind := page[off]
	if kind != indexInterior && kind != indexLeaf {
		return nil, nil
	}
	be := binary.BigEndian
	cells := int(be.Uint16(page[off+3:]))
	ptrs := off + 8
	if kind == indexInterior {
		ptrs = off + 12
	}
	if ptrs+2*cells > usable {
		return nil, errMalformed
	}
	maxLocal := (usable-12)*64/255 - 23
	minLocal := (usable-12)*32/255 - 23
	for i := range cells {
		c := int(be.Uint16(page[ptrs+2*i:]))
		if kind == indexInterior {
			c += 4 // the left child's page number
		}
		if c <= ptrs || c >= usable {
			return nil, errMalformed
		}
		size, n := sqliteVarint(page[c:usable])
		if n == 0 {
			return nil, errMalformed
		}
		c += n
		local := int(size)
		if size > uint64(maxLocal) {
			k := minLocal + int((size-uint64(minLocal))%uint64(usable-4))
			local = minLocal
			if k <= maxLocal {
				local = k
			}
		}
		if c+local > usable {
			return nil, errMalformed
		}
		payloads = append(payloads, page[c:c+local])
	}
	return payloads, nil
}

// Value is one column of a record: Null, an Int, or Bytes (TEXT if Text).
// A float is neither. A Cut column's bytes run past the page onto
// overflow pages: Bytes holds those on the page and Int is 0.
type Value struct {
	Null, Text, IsInt, Cut bool
	Int                    int64
	Bytes                  []byte
}

// Record decodes a record's columns, every one its header lists, as far as
// payload holds them (those past it Cut); ok is false for a malformed
// header.
func Record(payload []byte) (cols []Value, ok bool) {
	hsize, hn := sqliteVarint(payload)
	if hn == 0 || hsize < uint64(hn) || hsize > uint64(len(payload)) {
		return nil, false
	}
	var types []uint64
	for p := hn; p < int(hsize); {
		t, tn := sqliteVarint(payload[p:hsize])
		if tn == 0 {
			return nil, false
		}
		types, p = append(types, t), p+tn
	}
	body := payload[hsize:]
	for _, t := range types {
		var v Value
		var size int
		switch {
		case t == 0:
			v.Null = true
		case t >= 1 && t <= 6:
			size = [...]int{0, 1, 2, 3, 4, 6, 8}[t]
			v.IsInt = true
		case t == 7:
			size = 8
		case t == 8, t == 9:
			v.IsInt, v.Int = true, int64(t-8)
		case t >= 12:
			size = int((t - 12) / 2)
			v.Text = t%2 == 1
		default:
			return nil, false // 10 and 11 are reserved
		}
		if size > len(body) {
			v.Cut = true
			if t >= 12 {
				v.Bytes = body
			}
			cols, body = append(cols, v), body[len(body):]
			continue
		}
		switch {
		case t >= 1 && t <= 6:
			var x int64
			for _, b := range body[:size] {
				x = x<<8 | int64(b)
			}
			shift := 64 - 8*size
			v.Int = x << shift >> shift // sign-extended
		case t >= 12:
			v.Bytes = body[:size]
		}
		cols, body = append(cols, v), body[size:]
	}
	return cols, true
}

// sqliteVarint reads SQLite's varint and its length, 0 when b ends first.
func sqliteVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < 9; i++ {
		if i >= len(b) {
			return 0, 0
		}
		if i == 8 {
			return v<<8 | uint64(b[i]), 9
		}
		v = v<<7 | uint64(b[i]&0x7f)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

// Free returns the pages on the freelist of the database whose page 1 and
// trunk pages image returns (nil when it has none of the page), as far as
// it has the trunks, and of those only the pages in reports: a page freed
// stays as it was last written, which the database no longer reads. The
// map holds no more pages than in does.
func Free(image func(pgno uint32) []byte, in func(pgno uint32) bool) map[uint32]bool {
	be := binary.BigEndian
	free := map[uint32]bool{}
	p1 := image(1)
	if len(p1) < 100 {
		return free
	}
	for trunk := be.Uint32(p1[32:]); trunk != 0 && !free[trunk]; {
		b := image(trunk)
		if len(b) < 8 {
			break
		}
		free[trunk] = true
		n := int(be.Uint32(b[4:]))
		if n > (len(b)-8)/4 {
			break
		}
		for i := range n {
			if leaf := be.Uint32(b[8+4*i:]); in(leaf) {
				free[leaf] = true
			}
		}
		trunk = be.Uint32(b[0:])
	}
	return free
}
