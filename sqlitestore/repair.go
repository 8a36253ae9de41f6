package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// An I/O error is a loss until proven otherwise: Linux reports a failed
// write-back once and marks the pages clean, so the page cache holds bytes
// the disk never got. As PostgreSQL does, the store acknowledges nothing
// from the error on and rewrites every page from the page cache into the
// WAL, in short transactions with pauses between them so the
// application's writers get the lock, and checkpoints every repairWAL
// bytes so the WAL stays that small. The sidecar marks an unfinished
// repair: New repairs first, or after a crash of the machine refuses.
// Outside WAL mode a journal rolls it back.

const (
	repairPages = 256      // pages per transaction of the repair
	repairWAL   = 16 << 20 // bytes of pages the repair writes between two checkpoints
)

var errRepairing = fmt.Errorf("%w: an I/O error of the database file was found: the store acknowledges nothing until it has rewritten the database and synced it (in progress, logged)", ErrUnavailable)

func (s *Store) repairErr() error {
	if !s.repairing.Load() {
		return nil
	}
	if p := s.repairShort.Load(); p != nil {
		return *p
	}
	return errRepairing
}

// isIOError reports SQLITE_IOERR, by SQLite's message; not SQLITE_FULL,
// whose write put nothing in the page cache.
func isIOError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "disk I/O error")
}

func (s *Store) sawIOError(err error) {
	if isIOError(err) {
		s.startRepair("a write failed with an I/O error", err)
	}
}

// lookForWritebackFailure fsyncs the held database file, and starts the
// repair when this or another Store's fsync reported a failed write-back
// that no pass of this Store's repair covered.
func (s *Store) lookForWritebackFailure() {
	if s.file == nil || !s.wal {
		return
	}
	if s.cover(s.syncHeld()) {
		s.startRepair("a write-back of the database file failed (found by the store's fsync of it: another connection's checkpoint, or the kernel's write-back)", nil)
	}
}

// syncHeld fsyncs the held database file and returns how many failed
// write-backs the fsyncs of it reported, this one's included. Another
// fsync error ends the fsyncs.
func (s *Store) syncHeld() int64 {
	h := s.file
	h.syncMu.Lock()
	defer h.syncMu.Unlock()
	if h.syncErr == nil {
		if err := h.f.Sync(); isWritebackFailure(err) {
			h.failures.Add(1)
		} else if err != nil {
			h.syncErr = err
			s.log.Warn("sqlitestore: the fsync of the database file failed otherwise than for a failed write-back: the store no longer looks for failed write-backs of other connections", "table", unquote(s.table), "err", err)
		}
	}
	return h.failures.Load()
}

// cover records the failed write-backs up to the nth as acted on, and
// reports whether some were not.
func (s *Store) cover(n int64) bool {
	for {
		seen := s.failuresSeen.Load()
		if n <= seen {
			return false
		}
		if s.failuresSeen.CompareAndSwap(seen, n) {
			return true
		}
	}
}

func isWritebackFailure(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func (s *Store) startRepair(why string, err error) {
	if !s.wal || s.bg == nil || !s.repairing.CompareAndSwap(false, true) {
		return
	}
	attrs := []any{"table", unquote(s.table)}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	s.log.Warn("sqlitestore: "+why+": the store acknowledges nothing until it has rewritten the database file and synced it", attrs...)
	s.observe(replay.Event{Kind: replay.EventRefusing, Reason: errRepairing})
	s.guard.persist(s)
	s.wg.Add(1)
	go s.repair(s.bg)
}

// repair rewrites the file until a pass succeeds or the store closes.
func (s *Store) repair(ctx context.Context) {
	defer s.wg.Done()
	start, passes := time.Now(), 0
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		passes++
		err := s.rewriteFile(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			s.log.Warn("sqlitestore: the store closed before its repair after an I/O error finished: the next New repairs before it serves", "table", unquote(s.table))
			return
		}
		s.log.Warn("sqlitestore: a pass of the repair after an I/O error failed; trying again", "table", unquote(s.table), "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	s.repairShort.Store(nil)
	s.repairing.Store(false)
	s.guard.clearMarks(s, s.normal, "after the repair")
	s.log.Info("sqlitestore: after an I/O error, the database was rewritten and synced; serving", "table", unquote(s.table), "passes", passes, "elapsed", time.Since(start).Round(time.Millisecond))
	s.observe(replay.Event{Kind: replay.EventServing})
}

// rewriteFile is one pass. What the descriptors report at its start is
// covered by it; a failed write-back reported later fails it.
func (s *Store) rewriteFile(ctx context.Context) error {
	// Linux reports a failed write-back once to each descriptor open when
	// it happened: here to the held file's and the writer connection's,
	// which runs the repair's checkpoints; what they report now, this
	// pass covers. Page 1 written as it is (user_version) gives the
	// checkpoint a page to copy, so it syncs the file.
	var before int64
	if s.file != nil {
		before = s.syncHeld()
		s.cover(before)
	}
	var took time.Duration
	if err := s.repairTx(ctx, func(q stmtQuerier) error {
		var v int64
		if err := q.queryRow(`PRAGMA main.user_version`).Scan(&v); err != nil {
			return err
		}
		_, err := q.exec(`PRAGMA main.user_version = ` + strconv.FormatInt(v, 10))
		return err
	}, &took); err != nil {
		return err
	}
	if _, err := s.checkpointWAL(ctx); err != nil && !isIOError(err) {
		return err
	}
	var pageSize, total int64
	if err := s.db.QueryRowContext(ctx, `SELECT page_size, page_count FROM pragma_page_size, pragma_page_count`).Scan(&pageSize, &total); err != nil {
		return err
	}
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_dbpage WHERE pgno = 1`).Scan(&n)
	if err != nil && strings.Contains(err.Error(), "no such table") {
		err = s.vacuum(ctx, pageSize, total)
	} else if err == nil {
		err = s.rewritePages(ctx, pageSize, total)
	}
	if err != nil {
		return err
	}
	// The rewritten pages are durable in the WAL (the repair commits with
	// synchronous=FULL): a checkpoint a reader holds back copies them
	// later, and its failure is another I/O error.
	if frames, err := s.checkpointWAL(ctx); err != nil {
		return err
	} else if frames != 0 {
		s.log.Info("sqlitestore: the repair's last checkpoint did not copy the whole WAL (a read transaction or another checkpoint holds it back): the rewritten pages are synced in the WAL, and later checkpoints copy them", "table", unquote(s.table))
	}
	if s.file != nil && s.syncHeld() != before {
		return errors.New("another write-back of the database file failed during the pass")
	}
	return nil
}

// rewritePages rewrites every page, repairPages per transaction, each
// followed by a pause half as long as it held the write lock, and a
// PASSIVE checkpoint every repairWAL bytes. Each page is looked up by its
// number: sqlite_dbpage serves a range of them by reading every page of
// the file, which made a pass's cost grow with the square of its size.
func (s *Store) rewritePages(ctx context.Context, pageSize, total int64) error {
	every := max(repairWAL/pageSize/repairPages, 1) * repairPages
	start, logged := time.Now(), time.Now()
	for pgno := int64(0); pgno < total; {
		if pgno%every == 0 {
			if err := s.waitForRoom(ctx, func() (need, unheld int64, err error) {
				// The WAL restarts after a checkpoint that copied it whole;
				// else it grows by every page left.
				frames, err := s.checkpointWAL(ctx)
				stretch := s.walGrowth(0, min(total-pgno, every), pageSize)
				if frames == 0 {
					return stretch, stretch, err
				}
				return s.walGrowth(frames, total-pgno, pageSize), stretch, err
			}, pgno == 0); err != nil {
				return err
			}
		}
		var took time.Duration
		next := pgno
		err := s.repairTx(ctx, func(q stmtQuerier) error {
			if err := q.queryRow(`PRAGMA main.page_count`).Scan(&total); err != nil {
				return err
			}
			next = min(pgno+repairPages, total)
			_, err := q.exec(`WITH RECURSIVE p(n) AS (SELECT ? + 1 UNION ALL SELECT n + 1 FROM p WHERE n < ?)
				INSERT INTO sqlite_dbpage (pgno, data) SELECT n, (SELECT data FROM sqlite_dbpage WHERE pgno = n) FROM p`, pgno, next)
			return err
		}, &took)
		pause := took / 2
		if err == nil {
			pgno = next
		} else if strings.Contains(err.Error(), "database is locked") {
			// The application's writers held the lock for busy_timeout:
			// the same pages again, after as long a pause.
			s.log.Warn("sqlitestore: the repair after an I/O error waited for the write lock for busy_timeout; trying again", "table", unquote(s.table), "pages", pgno, "of", total)
			pause = max(took, time.Second)
		} else {
			return err
		}
		if time.Since(logged) > 10*time.Second {
			s.log.Info("sqlitestore: rewriting the database after an I/O error", "table", unquote(s.table), "pages", pgno, "of", total, "elapsed", time.Since(start).Round(time.Second))
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
	return nil
}

// vacuum is the repair where SQLite lacks sqlite_dbpage: one VACUUM,
// which holds the write lock until it ends and grows the WAL by the file.
func (s *Store) vacuum(ctx context.Context, pageSize, total int64) error {
	if err := s.waitForRoom(ctx, func() (need, unheld int64, err error) {
		frames, err := s.checkpointWAL(ctx)
		return s.walGrowth(frames, total, pageSize), s.walGrowth(0, total, pageSize), err
	}, true); err != nil {
		return err
	}
	s.log.Warn("sqlitestore: this driver's SQLite has no sqlite_dbpage: the repair rewrites the database with one VACUUM, which holds the write lock until it ends (the application's writes wait for it, up to their busy_timeout)", "table", unquote(s.table), "pages", total)
	// Bounded by Close alone: a large file's VACUUM outlasts any timeout.
	err := s.repairTx(ctx, func(q stmtQuerier) error { return s.waiting(ctx, q.wc, `VACUUM`) }, nil)
	if err != nil {
		return fmt.Errorf("VACUUM: %w", err)
	}
	return nil
}

// repairTx runs fn on the writer's connection under writeMu with
// synchronous=FULL, in a transaction when took is set (then the time it
// held the write lock). On failure it rolls back; a connection whose
// rollback fails is dropped, never handed back inside a transaction.
func (s *Store) repairTx(ctx context.Context, fn func(stmtQuerier) error, took *time.Duration) (err error) {
	select {
	case s.writeMu <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.writeMu }()
	wc, level, err := s.openWriter(ctx, false)
	if err != nil {
		return err
	}
	q := s.inTx(ctx, wc) // nothing in the transaction is cancelled, COMMIT included
	if level < syncFull {
		if _, err := q.exec(`PRAGMA synchronous = FULL`); err != nil {
			s.dropWriter()
			return err
		}
		defer func() {
			if _, rerr := q.exec(`PRAGMA synchronous = ` + syncNames[level]); rerr != nil {
				s.dropWriter()
			}
		}()
	}
	if took == nil {
		if err = fn(q); err != nil {
			s.commitFailed(ctx, err)
		}
		return err
	}
	start := time.Now()
	defer func() { *took = time.Since(start) }()
	if err := s.begin(ctx, wc); err != nil {
		return err
	}
	if err = fn(q); err == nil {
		_, err = q.exec(`COMMIT`)
	}
	if err != nil {
		s.commitFailed(ctx, err)
	}
	return err
}

// checkpointWAL runs PASSIVE checkpoints on the writer's connection
// (they never hold the application's writers back), until one copies the
// whole WAL (the next writer then restarts it) or one copies nothing
// more (a read transaction holds it back), ten at most. It returns the
// frames the next writer appends after: 0 when the WAL was copied whole.
func (s *Store) checkpointWAL(ctx context.Context) (frames int64, err error) {
	err = s.repairTx(ctx, func(q stmtQuerier) error {
		last := int64(-1)
		for range 10 {
			var busy, log, done int64
			if err := q.queryRow(`PRAGMA main.wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err != nil {
				return fmt.Errorf("a checkpoint of the repair: %w", err)
			}
			switch {
			case busy == 0 && done == log:
				frames = 0
				return nil
			case busy == 0 && done == last:
				frames = log
				return nil
			}
			last, frames = done, log
		}
		frames = max(frames, 1) // not copied whole, or not known (busy)
		return nil
	}, nil)
	return frames, err
}

// walGrowth is how much the WAL file grows when pages are appended after
// frames of it.
func (s *Store) walGrowth(frames, pages, pageSize int64) int64 {
	var size int64
	if info, err := os.Stat(s.path + "-wal"); err == nil {
		size = info.Size()
	}
	return max(32+(frames+pages)*(24+pageSize)-size, 0) // the header, then a header per frame
}

// waitForRoom returns once the database's directory has the free space
// the next writes need (need's bytes, and an eighth more for the
// application's writes meanwhile), refusing meanwhile with both figures
// and trying again up to 30 s apart. need also returns what the writes
// would need were the WAL copied whole (unheld): when that would fit, a
// read transaction holding the checkpoint back is what keeps the repair
// from starting, so the refusal names it and the repair tries again
// every second, to start as soon as the read ends. When the space cannot
// be measured it goes on, logged when first.
func (s *Store) waitForRoom(ctx context.Context, need func() (need, unheld int64, err error), first bool) error {
	dir := filepath.Dir(s.path)
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		n, unheld, err := need()
		if err != nil {
			return err
		}
		n, unheld = n+n/8, unheld+unheld/8
		free, err := freeSpace(dir)
		if err != nil && first {
			s.log.Warn("sqlitestore: the repair after an I/O error cannot measure the free space beside the database: it goes on, and may fill the disk", "table", unquote(s.table), "dir", dir, "needed", n, "err", err)
		}
		if err != nil || free >= n {
			s.repairShort.Store(nil)
			return nil
		}
		var refusal error
		switch {
		case free >= unheld:
			wait = time.Second
			refusal = fmt.Errorf("%w; %s, so no checkpoint can restart the WAL and the repair would grow it by every page left: it needs %.1f MiB free in %s and finds %.1f MiB, %.1f MiB once the read ends: end the read (the repair tries again every second), or free space there", errRepairing, heldReader, mib(n), dir, mib(free), mib(unheld))
			s.log.Warn("sqlitestore: the repair after an I/O error waits for a read transaction that holds the WAL, or for free space beside the database", "table", unquote(s.table), "dir", dir, "needed", n, "needed once the read ends", unheld, "free", free, "in", wait)
		default:
			also := ""
			if n > unheld {
				also = fmt.Sprintf(" (%s: %.1f MiB once the read ends)", heldReader, mib(unheld))
			}
			refusal = fmt.Errorf("%w; the repair needs %.1f MiB free in %s and finds %.1f MiB%s: free space there (it tries again, up to 30 s apart)", errRepairing, mib(n), dir, mib(free), also)
			s.log.Warn("sqlitestore: the repair after an I/O error waits for free space beside the database", "table", unquote(s.table), "dir", dir, "needed", n, "free", free, "in", wait)
		}
		// Logged first: whoever reads the refusal finds the line written.
		s.repairShort.Store(&refusal)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// heldReader names what holds a WAL's checkpoint back.
const heldReader = "a read transaction holds the WAL (an unclosed *sql.Rows or transaction on the database, or another program reading the file: litestream, a backup, a sqlite3 shell)"

func mib(n int64) float64 { return float64(n) / (1 << 20) }
