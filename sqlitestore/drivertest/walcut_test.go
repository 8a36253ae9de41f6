package drivertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/ctoken/ctoken/sqlitestore/internal/walfile"
)

// TestCheckpointCutShortThenWALDeleted: a kill or a power cut during a
// checkpoint leaves the database file with the WAL's pages written in
// ascending page order up to some page. Cut right after the marker's page
// (so the file's sequence equals the WAL's last), with claims on higher
// pages not yet written, then the WAL deleted: New refuses, or serves with
// none of the acknowledged claims accepted again (an equal sequence proves
// nothing). The same for a table listed after another store's in the
// file, and when the one page left unwritten holds claims the database
// had before beside acknowledged ones (the page is the table's).
func TestCheckpointCutShortThenWALDeleted(t *testing.T) {
	for _, d := range Drivers() {
		for _, tc := range []struct {
			table string
			mixed bool
		}{{"ctoken_replay", false}, {"later_table", false}, {"later_table", true}} {
			name := d.Name + "/" + tc.table
			if tc.mixed {
				name += ", one page of earlier and acknowledged claims unwritten"
			}
			t.Run(name, func(t *testing.T) { checkpointCutShort(t, d, tc.table, tc.mixed) })
		}
	}
}

// checkpointCutShort cuts the checkpoint after the marker's page, or,
// mixed, writes every page but one that holds both claims of "old" IDs
// and acknowledged ones.
func checkpointCutShort(t *testing.T, d Driver, table string, mixed bool) {
	ctx := context.Background()
	path := faultDB(t, d)
	db := d.OpenWith(t, path, With("wal_autocheckpoint", "0"))
	must(t, sqlitestore.Migrate(ctx, db, table))
	s := mustStore(t, db, sqlitestore.Options{Table: table, RecheckInterval: time.Hour, SweepInterval: -1})
	checkpoint := func() { must(t, checkpointTruncate(db)) }
	id := func(prefix string, i int) string {
		return fmt.Sprintf("%s-%x", prefix, sha256.Sum256([]byte{byte(i), byte(i >> 8)}))
	}
	checkpoint()
	for i := range 3000 {
		claimAll(t, s, []string{id("old", i)}, time.Now().Add(time.Hour))
	}
	checkpoint()
	// As a sweep does: half the rows go, the pages keep room.
	mustExec(t, context.Background(), db, `DELETE FROM `+table+` WHERE state = 'c' AND random() % 2 = 0`)
	checkpoint()
	var acked []string
	for i := range 60 {
		claimAll(t, s, []string{id("c", i)}, time.Now().Add(time.Hour))
		acked = append(acked, id("c", i))
	}
	np, link := walDeletedCopy(t, path, table)

	// The checkpoint, cut right after the marker's page.
	markerPage, best := uint32(0), int64(-1)
	mixedPage, mostAcked := uint32(0), 0
	old, ack := map[uint32]int{}, map[uint32]int{}
	walStoreRows(t, link, func(pgno uint32, cols []walfile.Value) {
		if string(cols[1].Bytes) == "m" && cols[6].Int > best {
			best, markerPage = cols[6].Int, pgno
		}
		switch {
		case bytes.Contains(cols[0].Bytes, []byte("old-")):
			old[pgno]++
		case bytes.Contains(cols[0].Bytes, []byte("c-")):
			ack[pgno]++
		}
	})
	for pgno, n := range ack {
		if old[pgno] > 0 && n > mostAcked {
			mixedPage, mostAcked = pgno, n
		}
	}
	if mixed && mixedPage == 0 {
		t.Skip("no page holds both earlier and acknowledged claims: no cut to make")
	}
	higher := writeWALPages(t, np, link, func(pgno uint32) bool {
		return !mixed && pgno > markerPage || mixed && pgno == mixedPage
	})
	if higher == 0 {
		t.Skip("the claims landed below the marker's page: no cut to make")
	}

	s2, err := sqlitestore.New(ctx, d.Open(t, np), sqlitestore.Options{Table: table, SweepInterval: -1})
	if err != nil {
		if !errors.Is(err, sqlitestore.ErrForgotten) && !errors.Is(err, sqlitestore.ErrUnavailable) {
			t.Fatalf("New = %v; want a refusal", err)
		}
		t.Logf("%d WAL pages not written; New: %v", higher, err)
		return
	}
	defer s2.Close()
	for _, id := range acked {
		if first, _ := s2.Claim(ctx, id, time.Now().Add(time.Hour)); first {
			t.Fatalf("Claim(%s), acknowledged before the cut, is first again (New served)", id)
		}
	}
}

// heldInWAL makes a file of faultDB's and a store on it that neither
// checkpoints nor advances its sequence, the WAL copied into the file:
// what the store writes next stays in the WAL alone.
func heldInWAL(t *testing.T) (path string, db *sql.DB, s *sqlitestore.Store) {
	t.Helper()
	path = faultDB(t, driver)
	db = driver.OpenWith(t, path, With("wal_autocheckpoint", "0"))
	s = mustStore(t, db, sqlitestore.Options{RecheckInterval: time.Hour, SweepInterval: -1})
	must(t, checkpointTruncate(db))
	return path, db, s
}

// checkpointTruncate copies db's WAL into the file and empties it; a
// reader holding it back (busy) is an error.
func checkpointTruncate(db *sql.DB) error {
	var busy, frames, done int
	if err := db.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &done); err != nil || busy != 0 {
		return fmt.Errorf("checkpoint: busy %d, %v", busy, err)
	}
	return nil
}

// walDeletedCopy copies the database at path and the sidecars of tables
// ("" or ctoken_replay for the default) into a directory of its own, as a
// crash then `rm replay.db-wal` leave them: the WAL only at the first
// table's link. It returns the copy's path and that link.
func walDeletedCopy(t *testing.T, path string, tables ...string) (np, link string) {
	t.Helper()
	dir := t.TempDir()
	np = filepath.Join(dir, filepath.Base(path))
	writeFile(t, np, readFile(t, path))
	for i, table := range tables {
		side := sidecarOf(path)
		if table != "" && table != "ctoken_replay" {
			side += "." + table
		}
		writeFile(t, filepath.Join(dir, filepath.Base(side)), readFile(t, side))
		if i > 0 {
			continue
		}
		links, err := filepath.Glob(side + ".wal-*")
		if err != nil || len(links) != 1 {
			t.Fatalf("links: %v, %v", links, err)
		}
		link = filepath.Join(dir, filepath.Base(links[0]))
		writeFile(t, link, readFile(t, path+"-wal"))
	}
	return np, link
}

// walPages reads the WAL at link: its bytes, its page size, and the
// offset of each page's last committed image (walfile.Committed).
func walPages(t *testing.T, link string) (wal []byte, size int, last map[uint32]int64) {
	t.Helper()
	wal = readFile(t, link)
	size, _, last, err := walfile.Committed(bytes.NewReader(wal))
	must(t, err)
	return wal, size, last
}

// walStoreRows calls fn with each store row on the committed pages of the
// WAL at link: seven columns, the first four on the page or not.
func walStoreRows(t *testing.T, link string, fn func(pgno uint32, cols []walfile.Value)) {
	t.Helper()
	wal, size, last := walPages(t, link)
	for pgno, off := range last {
		entries, _ := walfile.IndexEntries(wal[off:off+int64(size)], pgno, size)
		for _, e := range entries {
			if cols, ok := walfile.Record(e); ok && len(cols) == 7 {
				fn(pgno, cols)
			}
		}
	}
}

// writeWALPages writes the committed pages of the WAL at link into the
// database file at np, as a checkpoint does, but those cut reports: it
// returns how many those are.
func writeWALPages(t *testing.T, np, link string, cut func(pgno uint32) bool) int {
	t.Helper()
	wal, size, last := walPages(t, link)
	out, err := os.OpenFile(np, os.O_RDWR, 0)
	must(t, err)
	defer out.Close()
	n := 0
	for pgno, off := range last {
		if cut(pgno) {
			n++
			continue
		}
		_, err := out.WriteAt(wal[off:off+int64(size)], int64(pgno-1)*int64(size))
		must(t, err)
	}
	must(t, out.Close())
	return n
}

// TestCheckpointCutShortOfLongKeyRecordsIsRefused: Idempotency-Key records
// with IDs of about 500 bytes (under MaxIDBytes) and a result go on
// overflow pages, their key not on the page the WAL shows; a checkpoint
// that leaves the leaf holding most of them unwritten, then the WAL
// deleted, is refused, since such a row cannot be found in the table.
func TestCheckpointCutShortOfLongKeyRecordsIsRefused(t *testing.T) {
	ctx := context.Background()
	path, db, s := heldInWAL(t)
	long := func(i int) string { return fmt.Sprintf("zz%03d-", i) + strings.Repeat("x", 494) }
	// Low pages an app table frees, so the records' overflow pages are
	// taken below the store's leaves, as in any file that was sweeping.
	for i := range 2000 {
		mustExec(t, context.Background(), db, `INSERT INTO effects (id) VALUES (?)`, fmt.Sprintf("%0200d", i))
	}
	must(t, checkpointTruncate(db))
	claimAll(t, s, idList("old-", 300), time.Now().Add(time.Hour))
	must(t, checkpointTruncate(db))
	mustExec(t, context.Background(), db, `DELETE FROM effects`)
	must(t, checkpointTruncate(db))
	fp := bytes.Repeat([]byte{1}, 32)
	var tokens []string
	for i := range 40 {
		r, err := s.AcquireRecord(ctx, long(i), time.Hour, fp)
		if err != nil || r.State != replay.LeaseAcquired {
			t.Fatalf("AcquireRecord = %+v, %v", r, err)
		}
		tokens = append(tokens, r.Token)
	}
	must(t, checkpointTruncate(db)) // the leases' rows, keys on their pages, in the file
	result := bytes.Repeat([]byte{'r'}, 2000)
	for i := range 40 {
		must(t, s.ConfirmRecord(ctx, long(i), tokens[i], time.Now().Add(time.Hour), fp, result))
	}
	np, link := walDeletedCopy(t, path, "")
	cutRows := map[uint32]int{}
	walStoreRows(t, link, func(pgno uint32, cols []walfile.Value) {
		if cols[3].Cut {
			cutRows[pgno]++
		}
	})
	cut := uint32(0)
	for pgno, n := range cutRows {
		if pgno > 2 && (cut == 0 || n > cutRows[cut]) {
			cut = pgno
		}
	}
	if cut == 0 {
		t.Fatal("no record went on overflow pages with its key")
	}
	writeWALPages(t, np, link, func(pgno uint32) bool { return pgno == cut })
	wantForgotten(t, driver.Open(t, np), sqlitestore.Options{SweepInterval: -1}, nil, fmt.Sprintf("New (page %d of %d long records unwritten)", cut, cutRows[cut]), "ctoken-sqlite rearm")
}

// TestOneRowSharedWithAnotherTableCoversOnlyItself: a checkpoint cut
// short leaves one leaf of the table unwritten, its earlier rows expired,
// and one acknowledged claim on it was claimed too, same ID and expiry, in
// another store table of the file (two middlewares checking one token):
// New refuses, the shared row held, every other row of the leaf lacking.
func TestOneRowSharedWithAnotherTableCoversOnlyItself(t *testing.T) {
	d := Drivers()[0]
	ctx := context.Background()
	path := faultDB(t, d)
	db := d.OpenWith(t, path, With("wal_autocheckpoint", "0"))
	must(t, sqlitestore.Migrate(ctx, db, "other"))
	a := mustStore(t, db, sqlitestore.Options{RecheckInterval: time.Hour, SweepInterval: -1})
	b := mustStore(t, db, sqlitestore.Options{Table: "other", RecheckInterval: time.Hour, SweepInterval: -1})
	must(t, checkpointTruncate(db))
	// Expired by New: the leaf's rows the file holds are then no live
	// row of the table.
	ids := func(suffix string) []string {
		out := make([]string, 400)
		for i := range out {
			out[i] = fmt.Sprintf("p-%04d%s", i, suffix) // beside each other on the leaves
		}
		return out
	}
	// Each until a little after its claim, not one for all: a loaded
	// machine takes seconds over the 400.
	var oldEnd time.Time
	for _, id := range ids("") {
		oldEnd = time.Now().Add(2 * time.Second)
		claimAll(t, a, []string{id}, oldEnd)
	}
	must(t, checkpointTruncate(db))
	until := time.Now().Add(time.Hour)
	claimAll(t, a, ids("-acked"), until)
	onLeaf := map[uint32][]string{}
	walStoreRows(t, path+"-wal", func(pgno uint32, cols []walfile.Value) {
		if key := string(cols[0].Bytes); strings.HasSuffix(key, "-acked") {
			onLeaf[pgno] = append(onLeaf[pgno], key[2+len(a.Prefix()):])
		}
	})
	cut := uint32(0)
	for pgno, ids := range onLeaf {
		if pgno > 3 && (cut == 0 || len(ids) > len(onLeaf[cut])) {
			cut = pgno
		}
	}
	if cut == 0 {
		t.Fatal("no leaf of acknowledged claims")
	}
	// The same token presented to the other middleware: same ID, same until.
	claimAll(t, b, []string{onLeaf[cut][0]}, until)
	np, link := walDeletedCopy(t, path, "", "other")
	writeWALPages(t, np, link, func(pgno uint32) bool { return pgno == cut })
	time.Sleep(time.Until(oldEnd))
	_, err := sqlitestore.New(ctx, d.Open(t, np), sqlitestore.Options{SweepInterval: -1})
	// The shared row is excused, no other: the file may hold an older
	// image of the leaf with some of its rows (a driver's autocheckpoint
	// before the cut), so at most len-1 rows lack, and at least one.
	var lacks int
	if errors.Is(err, sqlitestore.ErrForgotten) {
		if i := strings.Index(err.Error(), "lacks "); i >= 0 {
			fmt.Sscanf(err.Error()[i:], "lacks %d of the", &lacks)
		}
	}
	if lacks < 1 || lacks > len(onLeaf[cut])-1 {
		t.Fatalf("New = %v; want ErrForgotten: the database lacks 1 to %d of the live rows", err, len(onLeaf[cut])-1)
	}
}

// TestKeptWALWithADamagedHeaderIsRefused: after a crash and `rm
// replay.db-wal`, a kept WAL whose header is not a WAL's cannot be read and
// is refused. Its frames are read as SQLite's recovery reads them, up to
// the first bad checksum: a changed byte there reads as the log's end (a
// torn tail), as SQLite would read the file put back. A WAL the database
// holds, whole or with a torn tail, is served.
func TestKeptWALWithADamagedHeaderIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		held    bool // the database file holds the WAL's pages
		edit    func(wal []byte) []byte
		refusal string
	}{
		{"a WAL the database lacks", false, nil, "held commits the database no longer does"},
		{"a byte of the header flipped", false, func(w []byte) []byte { w[12] ^= 1; return w }, "header of the WAL kept"},
		{"a page size over 64 KiB", false, func(w []byte) []byte { w[8], w[9], w[10], w[11] = 0, 2, 0, 0; return w }, "header of the WAL kept"},
		{"cut within the header", false, func(w []byte) []byte { return w[:20] }, "header of the WAL kept"},
		{"a WAL the database holds", true, nil, ""},
		{"a WAL the database holds, its last frame torn", true, func(w []byte) []byte { return w[:len(w)-100] }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, _, s := heldInWAL(t)
			claimAll(t, s, idList("c-", 20), time.Now().Add(time.Hour))
			np, link := walDeletedCopy(t, path, "")
			if tc.held {
				writeWALPages(t, np, link, func(uint32) bool { return false })
			}
			if tc.edit != nil {
				writeFile(t, link, tc.edit(readFile(t, link)))
			}
			if tc.refusal == "" {
				serves(t, np, "", idList("c-", 20))
				return
			}
			wantForgotten(t, driver.Open(t, np), sqlitestore.Options{SweepInterval: -1}, nil, "New", tc.refusal, "ctoken-sqlite rearm")
		})
	}
}

// unfinishedChild opens a transaction on the file at path that writes
// more pages than its cache holds (SQLite writes them to the WAL before
// any commit), says "spilled" and "done", and waits to be killed.
func unfinishedChild(path string) error {
	ctx := context.Background()
	db, err := sql.Open(driver.SQLName, driver.DSN(path, Safe))
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	for _, stmt := range []string{
		`PRAGMA cache_size = 10`,
		`BEGIN IMMEDIATE`,
		`CREATE TABLE spill (b BLOB)`,
		`INSERT INTO spill SELECT randomblob(3000) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) SELECT i FROM n)`,
	} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	os.Stdout.WriteString("spilled\ndone\n")
	time.Sleep(2 * faultPatience) // until killed
	return nil
}

// TestKeptWALOfAnUnfinishedTransactionIsServed: a process is SIGKILLed
// inside a transaction whose pages SQLite had written to the WAL, then
// another program opens the file, writes and closes it: SQLite's recovery
// ends the log at the last commit, the program's frames go over the first
// of the killed transaction's, and its close copies the WAL into the
// database file and deletes it. The WAL the store kept then holds, after
// the log's end, frames of the log's salts with checksums of another
// chain; New reads them as a torn tail, as SQLite does, and serves with
// every acknowledged claim held.
func TestKeptWALOfAnUnfinishedTransactionIsServed(t *testing.T) {
	ctx := context.Background()
	path, _, s := heldInWAL(t)
	ids := idList("c-", 20)
	claimAll(t, s, ids, time.Now().Add(time.Hour))

	runToDone(t, faultJob{Scenario: "unfinished", DB: path})

	// As the crash left them, the WAL in place the store's link.
	np, link := walDeletedCopy(t, path, "")
	must(t, os.Link(link, np+"-wal"))
	other := driver.Open(t, np)
	mustExec(t, ctx, other, `INSERT INTO effects (id) VALUES ('after the kill')`)
	must(t, other.Close())
	if _, err := os.Stat(np + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the WAL is still in place after the other program closed (%v): no case made", err)
	}
	if n := framesAfterTheLog(t, link); n == 0 {
		t.Fatal("no frame of the log's salts after its end: no case made")
	}

	serves(t, np, "", ids)
}

// framesAfterTheLog counts the whole frames of the WAL at link that carry
// its header's salts after the last frame SQLite's recovery reads.
func framesAfterTheLog(t *testing.T, link string) int {
	t.Helper()
	wal := readFile(t, link)
	size, _, last, err := walfile.Committed(bytes.NewReader(wal))
	if err != nil && !errors.Is(err, walfile.ErrDamaged) { // what it read, whichever
		t.Fatal(err)
	}
	end := int64(32)
	for _, off := range last {
		end = max(end, off+int64(size))
	}
	n := 0
	for off := end; off+24+int64(size) <= int64(len(wal)); off += 24 + int64(size) {
		if bytes.Equal(wal[off+8:off+16], wal[16:24]) {
			n++
		}
	}
	return n
}
