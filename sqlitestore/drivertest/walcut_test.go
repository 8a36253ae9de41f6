package drivertest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/ctoken/ctoken/sqlitestore/internal/walfile"
)

// TestCheckpointCutShortThenWALDeleted: a kill or a power cut during a
// checkpoint leaves the database file with the WAL's pages written in
// ascending page order up to some page. Cut right after the marker's page
// (so the file's sequence equals the WAL's last), with claims on higher
// pages not yet written, then the WAL deleted: New refuses, or serves with
// none of the acknowledged claims accepted again. (Found by a review: the
// equal sequence alone was taken as proof.)
func TestCheckpointCutShortThenWALDeleted(t *testing.T) {
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			path := faultDB(t, d)
			db := d.OpenWith(t, path, With("wal_autocheckpoint", "0"))
			s := mustStore(t, db, sqlitestore.Options{RecheckInterval: time.Hour, SweepInterval: -1})
			checkpoint := func() {
				t.Helper()
				var busy, frames, done int
				if err := db.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &done); err != nil || busy != 0 {
					t.Fatalf("checkpoint: busy %d, %v", busy, err)
				}
			}
			id := func(prefix string, i int) string {
				return fmt.Sprintf("%s-%x", prefix, sha256.Sum256([]byte{byte(i), byte(i >> 8)}))
			}
			checkpoint()
			for i := range 3000 {
				if _, err := s.Claim(ctx, id("old", i), time.Now().Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			checkpoint()
			// As a sweep does: half the rows go, the pages keep room.
			if _, err := db.Exec(`DELETE FROM ctoken_replay WHERE state = 'c' AND random() % 2 = 0`); err != nil {
				t.Fatal(err)
			}
			checkpoint()
			var acked []string
			for i := range 60 {
				if first, err := s.Claim(ctx, id("c", i), time.Now().Add(time.Hour)); err != nil || !first {
					t.Fatalf("Claim = %v, %v", first, err)
				}
				acked = append(acked, id("c", i))
			}
			// The files as a SIGKILL leaves them, in a directory of their own.
			dir := t.TempDir()
			copyFile := func(from, to string) {
				t.Helper()
				b, err := os.ReadFile(from)
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, to, b)
			}
			np := filepath.Join(dir, "replay.db")
			copyFile(path, np)
			copyFile(sidecarOf(path), sidecarOf(np))
			links, err := filepath.Glob(sidecarOf(path) + ".wal-*")
			if err != nil || len(links) != 1 {
				t.Fatalf("links: %v, %v", links, err)
			}
			link := filepath.Join(dir, filepath.Base(links[0]))
			copyFile(path+"-wal", link) // the WAL, kept only by its link once -wal is gone

			// The checkpoint, cut right after the marker's page.
			f, err := os.Open(link)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			size, _, last, err := walfile.Committed(f)
			if err != nil {
				t.Fatal(err)
			}
			page := make([]byte, size)
			markerPage, best := uint32(0), int64(-1)
			for pgno, off := range last {
				if _, err := f.ReadAt(page, off); err != nil && err != io.EOF {
					t.Fatal(err)
				}
				entries, _ := walfile.IndexEntries(page, pgno, size)
				for _, e := range entries {
					if cols, total, ok := walfile.Record(e); ok && total == 7 && len(cols) == 7 && string(cols[1].Bytes) == "m" && cols[6].Int > best {
						best, markerPage = cols[6].Int, pgno
					}
				}
			}
			out, err := os.OpenFile(np, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			higher := 0
			for pgno, off := range last {
				if pgno > markerPage {
					higher++
					continue
				}
				if _, err := f.ReadAt(page, off); err != nil && err != io.EOF {
					t.Fatal(err)
				}
				if _, err := out.WriteAt(page, int64(pgno-1)*int64(size)); err != nil {
					t.Fatal(err)
				}
			}
			out.Close()
			if higher == 0 {
				t.Skip("the claims landed below the marker's page: no cut to make")
			}

			s2, err := sqlitestore.New(ctx, d.Open(t, np), sqlitestore.Options{SweepInterval: -1})
			if err != nil {
				if !errors.Is(err, sqlitestore.ErrForgotten) && !errors.Is(err, sqlitestore.ErrUnavailable) {
					t.Fatalf("New = %v; want a refusal", err)
				}
				t.Logf("%d WAL pages above the marker's not written; New: %v", higher, err)
				return
			}
			defer s2.Close()
			for _, id := range acked {
				if first, _ := s2.Claim(ctx, id, time.Now().Add(time.Hour)); first {
					t.Fatalf("Claim(%s), acknowledged before the cut, is first again (New served)", id)
				}
			}
		})
	}
}
