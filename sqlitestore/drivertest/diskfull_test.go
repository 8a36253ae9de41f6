package drivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// smallDisk mounts a tmpfs of size (e.g. "2m") on a directory of the
// test's and unmounts it when the test ends (after the databases on it
// are closed: cleanups run last first). Mounting needs root: without it
// the test is skipped.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "disk")
	must(t, os.Mkdir(mnt, 0o700))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("a disk that fills up needs a small tmpfs, and mounting one needs root: mount: %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		// Lazily: the store holds the database file open for the
		// process's life.
		if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount -l %s: %v: %s", mnt, err, bytes.TrimSpace(out))
		}
	})
	return mnt
}

// fillDisk writes the file filler on dir's file system until free bytes
// are left (0: until the file system refuses with ENOSPC).
func fillDisk(t *testing.T, filler string, free int64) {
	t.Helper()
	f, err := os.OpenFile(filler, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	must(t, err)
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		var st syscall.Statfs_t
		must(t, syscall.Statfs(filepath.Dir(filler), &st))
		avail := int64(st.Bavail) * st.Bsize
		if free > 0 && avail <= free {
			return
		}
		n := int64(len(chunk))
		if free > 0 {
			n = min(n, avail-free)
		}
		if _, err := f.Write(chunk[:n]); err != nil {
			if free == 0 && errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatalf("filling the disk: %v", err)
		}
	}
}

// wantUnavailable checks that err is ErrUnavailable and not ErrForgotten:
// a full disk is a failure to write, not a loss.
func wantUnavailable(err error) error {
	switch {
	case err == nil:
		return errors.New("no error")
	case errors.Is(err, sqlitestore.ErrForgotten):
		return fmt.Errorf("ErrForgotten (a full disk is not a loss): %w", err)
	case !errors.Is(err, sqlitestore.ErrUnavailable):
		return fmt.Errorf("not ErrUnavailable: %w", err)
	}
	return nil
}

// TestFullDisk: records confirmed on a 2 MiB tmpfs until it is full.
// Every failing call fails with ErrUnavailable (not ErrForgotten), never
// first or acquired; on the full disk every write fails (New on a second
// pool too) while every ID acknowledged before is still refused and
// ReadRecord still reads each record; once space is freed the same store
// serves again, every record intact.
func TestFullDisk(t *testing.T) {
	eachDriver(t, fullDisk)
}

func fullDisk(t *testing.T, d Driver) {
	ctx := context.Background()
	mnt := smallDisk(t, "2m")
	path, filler := filepath.Join(mnt, "replay.db"), filepath.Join(mnt, "filler")
	db := d.Open(t, path)
	must(t, sqlitestore.Migrate(ctx, db, ""))
	rep := newRepairs()
	s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1, Observer: rep.observe})
	defer s.Close()

	result := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	fp := []byte("fingerprint")
	until := time.Now().Add(time.Hour)
	records, claims := map[string]bool{}, map[string]bool{} // acknowledged
	var failures []string                                   // calls that failed with the right error
	check := func(call, id string, err error) bool {
		t.Helper()
		if err == nil {
			return true
		}
		if werr := wantUnavailable(err); werr != nil {
			t.Errorf("%s(%s) = %v", call, id, werr)
		}
		failures = append(failures, call+": "+err.Error())
		return false
	}
	// step confirms a 100 KiB record of "r"+n, then claims "c"+n; it
	// returns whether the disk refused the record, and the claim.
	step := func(n string) (recordRefused, claimRefused bool) {
		t.Helper()
		id := "r" + n
		r, err := s.AcquireRecord(ctx, id, time.Minute, fp)
		if check("AcquireRecord", id, err) {
			if r.State != replay.LeaseAcquired {
				t.Fatalf("AcquireRecord(%s) = %v; want acquired (a fresh ID)", id, r.State)
			}
			err = s.ConfirmRecord(ctx, id, r.Token, until, fp, result)
			if check("ConfirmRecord", id, err) {
				records[id] = true
			}
		}
		recordRefused = err != nil
		id = "c" + n
		first, err := s.Claim(ctx, id, until)
		if check("Claim", id, err) {
			if !first {
				t.Fatalf("Claim(%s) not first: a fresh ID", id)
			}
			claims[id] = true
		} else if first {
			t.Errorf("Claim(%s) = first with an error", id)
		}
		return recordRefused, err != nil
	}
	// refusesAcknowledged checks that no ID acknowledged so far is
	// accepted again; full says writes fail, so a refusal may come as
	// ErrUnavailable.
	refusesAcknowledged := func(when string, full bool) {
		t.Helper()
		for id := range claims {
			first, err := s.Claim(ctx, id, until)
			if first || err != nil && (!full || wantUnavailable(err) != nil) {
				t.Errorf("%s: Claim(%s) of an acknowledged claim = %v, %v; want not first", when, id, first, err)
			}
		}
		for id := range records {
			r, err := s.AcquireRecord(ctx, id, time.Minute, fp)
			switch {
			case err != nil && full && wantUnavailable(err) == nil:
			case err != nil || r.State != replay.LeaseDone:
				t.Errorf("%s: AcquireRecord(%s) of a confirmed record = %v, %v; want done", when, id, r.State, err)
			case !bytes.Equal(r.Result, result):
				t.Errorf("%s: AcquireRecord(%s)'s result has %d bytes; want the %d confirmed", when, id, len(r.Result), len(result))
			}
		}
	}

	// Nearly full: 600 KiB left, room for a few records. Once a record
	// is refused, small claims still fit for a while in the space the file
	// system gave SQLite's WAL for the refused commit (they commit and are
	// acknowledged, rightly): go on until a claim is refused too.
	fillDisk(t, filler, 600<<10)
	recordFull, claimFull := -1, -1
	for n := 0; n < 40 && claimFull < 0; n++ {
		rr, cr := step(strconv.Itoa(n))
		if rr && recordFull < 0 {
			recordFull = n
		}
		if cr {
			claimFull = n
		}
	}
	if len(records) == 0 || recordFull < 0 || claimFull < 0 {
		t.Fatalf("%d records confirmed, the first refused at step %d, the first claim refused at step %d; want a few records, then refusals", len(records), recordFull, claimFull)
	}
	refusesAcknowledged("the disk nearly full", true)

	recordsBefore, claimsBefore := len(records), len(claims)
	nearlyFull := failures

	// Full to the last byte: every write fails.
	fillDisk(t, filler, 0)
	for n := range 5 {
		id := "x" + strconv.Itoa(n)
		if first, err := s.Claim(ctx, id, until); first || wantUnavailable(err) != nil {
			t.Errorf("the disk full: Claim(%s) = %v, %v; want ErrUnavailable", id, first, err)
		}
		if l, err := s.AcquireLease(ctx, id, time.Minute); l.State == replay.LeaseAcquired || wantUnavailable(err) != nil {
			t.Errorf("the disk full: AcquireLease(%s) = %v, %v; want ErrUnavailable", id, l.State, err)
		}
	}
	refusesAcknowledged("the disk full", true)
	// A read writes nothing: it answers on the full disk, unless a driver
	// that reports the full disk as an I/O error (ncruces) has the store
	// repairing, when every call refuses.
	reads := 0
	for id := range records {
		r, err := s.ReadRecord(ctx, id)
		switch {
		case err != nil && rep.count() > 0 && wantUnavailable(err) == nil:
		case err != nil || r.State != replay.LeaseDone || !bytes.Equal(r.Fingerprint, fp) || !bytes.Equal(r.Result, result):
			t.Errorf("the disk full: ReadRecord(%s) of a confirmed record = %v with %d result bytes, %v; want done with its record", id, r.State, len(r.Result), err)
		default:
			reads++
		}
	}
	if r, err := s.ReadRecord(ctx, "x0"); err == nil && r.State != replay.LeaseFree {
		t.Errorf("the disk full: ReadRecord of an ID never acquired = %v; want free", r.State)
	}
	if reads == 0 && rep.count() == 0 {
		t.Errorf("the disk full: no ReadRecord answered, and the store is not repairing")
	}
	// A New on a second pool writes once: refused, or (its small commit
	// fits in WAL space the file system gave a refused commit before,
	// overwritten now that the store keeps its writer after the error)
	// committed, and then it too refuses every acknowledged claim.
	db2 := d.Open(t, path)
	s2, err := sqlitestore.New(ctx, db2, sqlitestore.Options{})
	if err == nil {
		for id := range claims {
			if first, cerr := s2.Claim(ctx, id, until); first || cerr != nil && wantUnavailable(cerr) != nil {
				t.Errorf("the disk full: a second store's Claim(%s) of an acknowledged claim = %v, %v; want not first", id, first, cerr)
			}
		}
		s2.Close()
	} else if werr := wantUnavailable(err); werr != nil {
		t.Errorf("the disk full: New on a second pool = %v; want ErrUnavailable or a store", werr)
	}
	db2.Close()

	// Room again: the same store serves.
	must(t, os.Remove(filler))
	failures = nil
	// A driver that reports the full disk as an I/O error (ncruces) made
	// the store repair: it serves once the repair ended.
	rep.wait(t)
	for n := range 3 {
		if rr, cr := step("again" + strconv.Itoa(n)); rr || cr {
			t.Errorf("with room again, the same store refused: %s", failures[len(failures)-1])
		}
	}
	refusesAcknowledged("room again", false)
	t.Logf("nearly full: %d records of %d KiB and %d claims acknowledged, the first record refused at step %d, the first claim at step %d (%d calls refused: %s); full: New refused with %v; room again: %d records and %d claims acknowledged",
		recordsBefore, len(result)>>10, claimsBefore, recordFull, claimFull, len(nearlyFull), strings.Join(nearlyFull[:min(2, len(nearlyFull))], "; "), err, len(records)-recordsBefore, len(claims)-claimsBefore)
}
