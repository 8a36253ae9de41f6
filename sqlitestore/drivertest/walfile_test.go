package drivertest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/ctoken/ctoken/sqlitestore/internal/walfile"
)

// FuzzWALFileMatchesSQLiteRecovery checks the store's WAL reader
// (internal/walfile, which New uses to find a deleted WAL's lost commits)
// against SQLite's own recovery: a database written by random
// transactions (some after a checkpoint that restarts the WAL, so stale
// frames lie past the live ones), its files copied as a crash leaves them,
// the WAL cut at a random length or with a byte flipped. The database
// file with the reader's committed pages written over it must read as
// SQLite reads the database file and that WAL together.
func FuzzWALFileMatchesSQLiteRecovery(f *testing.F) {
	for i := range 8 {
		f.Add(uint64(i), uint32(i*7919), uint32(0))
	}
	f.Add(uint64(99), uint32(1<<31), uint32(40))
	f.Add(uint64(7), uint32(1<<31), uint32(4096+32+24+100))
	f.Fuzz(func(t *testing.T, seed uint64, cut, flip uint32) {
		d := Drivers()[0]
		r := rand.New(rand.NewPCG(seed, 63))
		// Not t.TempDir: a fuzz seed's name holds '#', which ends the
		// path of a file: URI.
		dir := plainTempDir(t)
		path := filepath.Join(dir, "w.db")
		db := d.OpenWith(t, path, With("wal_autocheckpoint", "0"))
		db.SetMaxOpenConns(1) // one connection, held: the WAL stays when the test reads it
		ctx := context.Background()
		conn := heldConn(t, db)
		mustExec(t, ctx, conn, `CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`)
		for range 2 + r.IntN(30) {
			if r.IntN(8) == 0 {
				mustExec(t, ctx, conn, `PRAGMA wal_checkpoint(RESTART)`)
			}
			tx, err := conn.BeginTx(ctx, nil)
			must(t, err)
			for range 1 + r.IntN(6) {
				k := r.IntN(200)
				switch r.IntN(3) {
				case 0:
					_, err = tx.Exec(`DELETE FROM t WHERE k = ?`, k)
				default:
					_, err = tx.Exec(`INSERT OR REPLACE INTO t (k, v) VALUES (?, randomblob(?))`, k, r.IntN(3000))
				}
				must(t, err)
			}
			must(t, tx.Commit())
		}
		base, wal := files(t, path)
		wal = wal[:min(len(wal), int(cut))]
		if flip != 0 && len(wal) > 0 {
			wal[int(flip)%len(wal)] ^= 0x55
		}

		// SQLite: the database file and the WAL, no shared memory.
		recovered := filepath.Join(dir, "r.db")
		writeFile(t, recovered, base)
		writeFile(t, recovered+"-wal", wal)
		want := dumpTable(t, d, recovered)

		// The reader: its committed pages over the database file.
		// A damaged header New refuses; what the reader returns with it
		// is still SQLite's.
		size, pages, last, err := walfile.Committed(bytes.NewReader(wal))
		if err != nil && !errors.Is(err, walfile.ErrDamaged) {
			t.Fatal(err)
		}
		applied := applyWAL(base, wal, size, last)
		if len(last) > 0 {
			// As a checkpoint does: the file ends at the last commit's size.
			if pages == 0 || int(pages)*size > len(applied) {
				t.Fatalf("the last commit's size, %d pages, is not the file's (%d bytes)", pages, len(applied))
			}
			applied = applied[:int(pages)*size]
		}
		mine := filepath.Join(dir, "m.db")
		writeFile(t, mine, applied)
		if got := dumpTable(t, d, mine); got != want {
			t.Fatalf("seed %d, WAL cut at %d of its bytes, flip %d: %d pages applied; the table reads\n%.300s\nwhere SQLite's recovery reads\n%.300s", seed, len(wal), flip, len(last), got, want)
		}
	})
}

// applyWAL writes the pages of wal that walfile.Committed returned (last,
// of size bytes) over base, as a checkpoint writes them into the file.
func applyWAL(base, wal []byte, size int, last map[uint32]int64) []byte {
	for pgno, off := range last {
		at := int(pgno-1) * size
		if end := at + size; end > len(base) {
			base = append(base, make([]byte, end-len(base))...)
		}
		copy(base[at:at+size], wal[off:off+int64(size)])
	}
	return base
}

// plainTempDir is a temporary directory removed when the test ends,
// whose path holds no character a file: URI reads otherwise.
func plainTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "drivertest")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	must(t, os.WriteFile(path, b, 0o600))
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return b
}

// dumpTable reads table t of the database at path (and the integrity
// check's verdict) as one string.
func dumpTable(t *testing.T, d Driver, path string) string {
	t.Helper()
	db := d.Open(t, path)
	defer db.Close()
	var b bytes.Buffer
	var ok string
	must(t, db.QueryRow(`PRAGMA integrity_check`).Scan(&ok))
	fmt.Fprintln(&b, ok)
	rows, err := db.Query(`SELECT k, hex(sha3(v)) FROM t ORDER BY k`)
	if err != nil {
		rows, err = db.Query(`SELECT k, length(v), hex(substr(v, 1, 16)), hex(substr(v, -16)) FROM t ORDER BY k`)
	}
	if err != nil && strings.Contains(err.Error(), "no such table") {
		return b.String() + "no table t\n" // the WAL was cut before its commit
	}
	must(t, err)
	defer rows.Close()
	cols, _ := rows.Columns()
	vals := make([]any, len(cols))
	for i := range vals {
		vals[i] = new(any)
	}
	for rows.Next() {
		must(t, rows.Scan(vals...))
		for _, v := range vals {
			fmt.Fprint(&b, *(v.(*any)), " ")
		}
		fmt.Fprintln(&b)
	}
	must(t, rows.Err())
	return b.String()
}

// TestWALFileReadsBigEndianChecksumsAndLargePages: a WAL written by a
// big-endian machine (magic 0x377f0683, checksums of big-endian words),
// made here by rewriting a real one, at page sizes 4 KiB and 64 KiB (the
// largest, stored as is): SQLite recovers it, and the reader's committed
// pages over the database file read the same table.
func TestWALFileReadsBigEndianChecksumsAndLargePages(t *testing.T) {
	d := Drivers()[0]
	be := binary.BigEndian
	sum := func(s1, s2 uint32, b []byte) (uint32, uint32) {
		for i := 0; i+8 <= len(b); i += 8 {
			s1 += be.Uint32(b[i:]) + s2
			s2 += be.Uint32(b[i+4:]) + s1
		}
		return s1, s2
	}
	for _, pageSize := range []int{4096, 65536} {
		t.Run(fmt.Sprint(pageSize), func(t *testing.T) {
			dir := plainTempDir(t)
			path := filepath.Join(dir, "w.db")
			db := d.OpenWith(t, path, With("wal_autocheckpoint", "0"))
			db.SetMaxOpenConns(1)
			ctx := context.Background()
			conn, err := db.Conn(ctx)
			must(t, err)
			mustExec(t, ctx, conn, `PRAGMA journal_mode = DELETE`)
			mustExec(t, ctx, conn, fmt.Sprintf(`PRAGMA page_size = %d`, pageSize))
			mustExec(t, ctx, conn, `VACUUM`)
			mustExec(t, ctx, conn, `PRAGMA journal_mode = WAL`)
			mustExec(t, ctx, conn, `CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`)
			for i := range 20 {
				mustExec(t, ctx, conn, fmt.Sprintf(`INSERT OR REPLACE INTO t VALUES (%d, randomblob(%d))`, i%7, 100+i*500))
			}
			base, wal := files(t, path)
			conn.Close()
			if got := int(be.Uint32(wal[8:])); got != pageSize {
				t.Fatalf("page size %d in the WAL header; want %d", got, pageSize)
			}
			be.PutUint32(wal[0:], 0x377f0683)
			s1, s2 := sum(0, 0, wal[:24])
			be.PutUint32(wal[24:], s1)
			be.PutUint32(wal[28:], s2)
			for off := 32; off+24+pageSize <= len(wal); off += 24 + pageSize {
				s1, s2 = sum(s1, s2, wal[off:off+8])
				s1, s2 = sum(s1, s2, wal[off+24:off+24+pageSize])
				be.PutUint32(wal[off+16:], s1)
				be.PutUint32(wal[off+20:], s2)
			}
			recovered := filepath.Join(dir, "r.db")
			writeFile(t, recovered, base)
			writeFile(t, recovered+"-wal", wal)
			want := dumpTable(t, d, recovered)
			size, _, last, err := walfile.Committed(bytes.NewReader(wal))
			if err != nil || size != pageSize || len(last) == 0 {
				t.Fatalf("Committed = %d, %d pages, %v", size, len(last), err)
			}
			mine := filepath.Join(dir, "m.db")
			writeFile(t, mine, applyWAL(base, wal, size, last))
			if got := dumpTable(t, d, mine); got != want || !strings.HasPrefix(want, "ok\n") || strings.Count(want, "\n") < 8 {
				t.Fatalf("the reader's pages read\n%.300s\nwhere SQLite's recovery reads\n%.300s", got, want)
			}
		})
	}
}

// TestWALFileReadsTheStoresRows checks the store's reading of its rows
// from a WAL's pages (what New looks up after a crash) against SQLite: a
// store's claims, leases and records with IDs of 1 to 400 bytes and
// results large enough to spill onto overflow pages, every write in the
// WAL; the rows read from the WAL's index pages are the table's rows,
// key, state and until.
func TestWALFileReadsTheStoresRows(t *testing.T) {
	d := Drivers()[0]
	ctx := context.Background()
	dir := plainTempDir(t)
	path := filepath.Join(dir, "replay.db")
	db := d.OpenWith(t, path, With("wal_autocheckpoint", "0"))
	must(t, sqlitestore.Migrate(ctx, db, ""))
	mustExec(t, ctx, db, `PRAGMA wal_checkpoint(TRUNCATE)`)
	s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
	until := time.Now().Add(time.Hour)
	for i := range 120 {
		id := fmt.Sprint(i, "-", strings.Repeat("k", i*i%400))
		switch i % 3 {
		case 0:
			claimAll(t, s, []string{id}, until)
		case 1:
			mustLease(t, s, id, time.Hour)
		default:
			r, err := s.AcquireRecord(ctx, id, time.Minute, []byte("fp"))
			must(t, err)
			must(t, s.ConfirmRecord(ctx, id, r.Token, until, []byte("fp"), bytes.Repeat([]byte{byte(i)}, i*60)))
		}
	}
	want := map[string]string{}
	rows, err := db.QueryContext(ctx, `SELECT key, state, until FROM ctoken_replay`)
	must(t, err)
	for rows.Next() {
		var key []byte
		var state string
		var u int64
		must(t, rows.Scan(&key, &state, &u))
		want[string(key)] = fmt.Sprint(state, " ", u)
	}
	must(t, rows.Close())

	wal, size, last := walPages(t, path+"-wal")
	got := map[string]string{}
	for pgno, off := range last {
		entries, err := walfile.IndexEntries(wal[off:off+int64(size)], pgno, size)
		if err != nil {
			t.Fatalf("page %d: %v", pgno, err)
		}
		for _, e := range entries {
			cols, ok := walfile.Record(e)
			if !ok {
				t.Fatalf("page %d: a malformed record", pgno)
			}
			if len(cols) != 7 {
				continue // the until index
			}
			if cols[3].Cut {
				t.Fatalf("page %d: a store row whose key, state, token and until are not on its page", pgno)
			}
			got[string(cols[0].Bytes)] = fmt.Sprint(string(cols[1].Bytes), " ", cols[3].Int)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows read from the WAL; the table has %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("row %q: read %q from the WAL; the table has %q", k, got[k], v)
		}
	}
}
