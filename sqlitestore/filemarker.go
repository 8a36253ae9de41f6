package sqlitestore

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ctoken/ctoken/sqlitestore/internal/walfile"
)

// An older copy written over the database file in place (cp backup.db
// replay.db: the same inode) is not seen through SQL: SQLite reads the
// pages the WAL holds from the WAL, keeps the rest in each connection's
// cache, and in WAL mode does not advance the file header's change
// counter. The loss shows later, when a checkpoint copies the WAL over
// the old pages and the WAL restarts, or after a restart: rows that
// were only in the file are gone.
//
// So the store also reads the marker row from the database file itself,
// not through the WAL (fileMarker). A checkpoint that copied the whole
// WAL left the file's marker at least at the sequence the store had
// committed before it (guard.fileSeq); the file's marker never goes back
// but by such a copy. The store reads it before each of its checkpoints
// (a checkpoint would make the loss permanent: the read refuses, and the
// checkpoint is not run) and at each check. A page read while another
// process's checkpoint writes may be torn, so one reading behind is
// confirmed by a second at the next look before the store refuses; the
// checkpoint waits until then. A copy that holds the store's latest
// checkpointed advance is not found (see the package documentation).

// fileMarker reads the marker row's token and sequence of table from the
// database file at path, without the WAL: the table's root page from the
// file's own schema (a VACUUM moves it), then the smallest entry of its
// b-tree. ok is false when the file's pages do not lead to a whole marker
// row (a page torn by a concurrent write, an unusual layout).
func fileMarker(path, table string) (token string, seq int64, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, false
	}
	defer f.Close()
	var hdr [100]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return "", 0, false
	}
	size := int(binary.BigEndian.Uint16(hdr[16:]))
	if size == 1 {
		size = 65536
	}
	info, err := f.Stat()
	if err != nil || size < 512 {
		return "", 0, false
	}
	maxPage := uint32(min(info.Size()/int64(size), 1<<31))
	page := func(pgno uint32) ([]byte, bool) {
		b := make([]byte, size)
		n, err := f.ReadAt(b, int64(pgno-1)*int64(size))
		return b, n == size && (err == nil || err == io.EOF)
	}
	usable := size - int(hdr[20])
	schema, ok := walfile.TableRows(1, usable, maxPage, page)
	if !ok {
		return "", 0, false
	}
	var root uint32
	for _, r := range schema {
		// type, name, tbl_name, rootpage, sql
		cols, _, ok := walfile.Record(r)
		if ok && len(cols) >= 4 && string(cols[0].Bytes) == "table" && strings.EqualFold(string(cols[1].Bytes), table) && cols[3].IsInt {
			root = uint32(cols[3].Int)
		}
	}
	payload, ok := walfile.FirstEntry(root, usable, maxPage, page)
	if !ok {
		return "", 0, false
	}
	cols, total, ok := walfile.Record(payload)
	// key, state, token, until, fingerprint, result, seq (schema.go)
	if !ok || total != 7 || len(cols) != 7 || string(cols[0].Bytes) != "\x00\x00" ||
		!cols[1].Text || string(cols[1].Bytes) != "m" || !cols[2].Text || !cols[6].IsInt {
		return "", 0, false
	}
	return string(cols[2].Bytes), cols[6].Int, true
}

// fileBehind compares the marker in the database file with the sequence
// the store's last complete checkpoint left there, and refuses every
// call (ErrForgotten) when the file holds an older one twice in a row.
// It reports whether the file may be behind: the caller runs no
// checkpoint then. The caller holds writeMu.
func (s *Store) fileBehind() bool {
	g := &s.guard
	want := g.fileSeq
	if !s.wal || want == 0 {
		return false
	}
	token, seq, ok := fileMarker(s.path, unquote(s.table))
	if !ok || token != g.incarnation || seq >= want {
		g.fileStale = false
		return false
	}
	if !g.fileStale {
		g.fileStale = true
		return true
	}
	what := fmt.Sprintf("the database file held an older state than the store's last checkpoint left in it (sequence %d, at least %d before): an older copy was written over it in place, and rows claimed since the copy are gone from it", seq, want)
	g.refuse(fmt.Errorf("%w: %s: run Rearm once you have decided", ErrForgotten, what))
	// Kept for New: once a checkpoint (the last connection's close runs
	// one) has copied the WAL over the old pages, the file shows nothing.
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := writeSidecar(sidecarFile(s.path, s.table), sidecar{Incarnation: g.incarnation, Seq: g.seq.Load(), Lost: what}, false); err != nil {
		s.log.Error("sqlitestore: recording the loss in the sidecar failed: a New after a restart may serve the file as if nothing was lost", "path", sidecarFile(s.path, s.table), "err", err)
	}
	return true
}
