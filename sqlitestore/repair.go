package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// An I/O error is a loss until proven otherwise. Linux reports a failed
// write-back once, at the next fsync of each descriptor, and marks the
// failed pages clean: the page cache keeps bytes the disk never got, and
// a later fsync succeeds. In WAL mode a checkpoint that cannot copy the
// whole WAL (a reader holds an older snapshot) writes pages into the
// database file without syncing it and counts them as copied; when the
// sync of a later checkpoint fails, those pages are dropped too, and no
// checkpoint copies them again: once the WAL restarts, the disk holds
// their old images. The same holds for a write-back the kernel makes on
// its own, and for WAL frames of a lease batch that commits without an
// fsync (TestFsyncErrorThenPowerCut).
//
// So, as PostgreSQL does, the store acknowledges nothing from the error
// on, and repairs: it writes every page of the database again, through
// SQLite, with the bytes the page cache holds, then checkpoints the WAL
// whole into the database file (which syncs it) and restarts it. The error
// is found in the store's own writes and checkpoints (SQLITE_IOERR), and,
// for every other connection's checkpoint (SQLite drops the error of the
// automatic one), by an fsync of the database file at each check through a
// descriptor held for the process's life (heldfile.go). The repair runs on
// a goroutine of its own, bounded by nothing but Close, and rewrites
// repairPages pages per transaction (sqlite_dbpage), so the application's
// writes wait for one such transaction at most; a driver whose SQLite
// lacks sqlite_dbpage gets one VACUUM instead, which holds the write lock
// for its whole length. While the repair is unfinished the sidecar says so
// (Repair): New after a crash of the process repairs before serving, and
// after a crash of the machine, whose page cache held the only good copy,
// refuses with ErrForgotten. Outside WAL mode every commit syncs the
// database file itself, and a commit whose sync fails is rolled back from
// its journal: nothing to repair.

// repairPages is how many pages one transaction of the repair rewrites.
const repairPages = 256

// errRepairing refuses every call while the repair runs.
var errRepairing = fmt.Errorf("%w: an I/O error of the database file was found: the store acknowledges nothing until it has rewritten the database and synced it (in progress, logged)", ErrUnavailable)

// repairErr is errRepairing while a repair is due or running.
func (s *Store) repairErr() error {
	if s.repairing.Load() {
		return errRepairing
	}
	return nil
}

// isIOError reports an error of SQLite's I/O family (SQLITE_IOERR and its
// extended codes, a failed fsync among them), as the three drivers word
// it (SQLite's own message). A full disk (SQLITE_FULL) is not one: the
// write that failed put nothing in the page cache.
func isIOError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "disk I/O error")
}

// sawIOError starts the repair when err is an I/O error of SQLite.
func (s *Store) sawIOError(err error) {
	if isIOError(err) {
		s.startRepair("a write failed with an I/O error", err)
	}
}

// lookForWritebackFailure fsyncs the held database file, and starts the
// repair when the fsync, or another Store's on the same file since this
// one's last look, reported a failed write-back (EIO, ENOSPC, EDQUOT). Any
// other error of the fsync (a file system without it) is logged once and
// ends the looks.
func (s *Store) lookForWritebackFailure() {
	h := s.file
	if h == nil {
		return
	}
	h.syncMu.Lock()
	if h.syncErr == nil {
		if err := h.f.Sync(); isWritebackFailure(err) {
			h.failures.Add(1)
		} else if err != nil {
			h.syncErr = err
			s.log.Warn("sqlitestore: the fsync of the database file failed otherwise than for a failed write-back: the store no longer looks for failed write-backs of other connections", "table", unquote(s.table), "err", err)
		}
	}
	h.syncMu.Unlock()
	if n := h.failures.Load(); n != s.failuresSeen {
		s.failuresSeen = n
		s.startRepair("a write-back of the database file failed (found by the store's fsync of it: another connection's checkpoint, or the kernel's write-back)", nil)
	}
}

func isWritebackFailure(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// startRepair makes the store refuse every call and starts the repair,
// once, in WAL mode.
func (s *Store) startRepair(why string, err error) {
	if !s.wal || s.bg == nil || !s.repairing.CompareAndSwap(false, true) {
		return
	}
	s.log.Warn("sqlitestore: "+why+": the store acknowledges nothing until it has rewritten the database file and synced it", "table", unquote(s.table), "err", err)
	s.observe(Event{Kind: EventRefusing, Reason: errRepairing})
	s.guard.persist(s)
	s.wg.Add(1)
	go s.repair(s.bg)
}

// repair rewrites the file until a pass succeeds or the store closes,
// waiting longer after each failed pass (30 s at most).
func (s *Store) repair(ctx context.Context) {
	defer s.wg.Done()
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
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
	s.repairing.Store(false)
	s.guard.clearMarks(s, s.normal, "after the repair")
	s.log.Info("sqlitestore: after an I/O error, the database was rewritten and synced; serving", "table", unquote(s.table))
	s.observe(Event{Kind: EventServing})
}

// rewriteFile is one pass of the repair: every page rewritten, then a
// checkpoint that copies the whole WAL into the database file, syncs it
// and truncates the WAL. A failed write-back found meanwhile by any
// Store's look fails the pass.
func (s *Store) rewriteFile(ctx context.Context) error {
	var before int64
	if s.file != nil {
		before = s.file.failures.Load()
	}
	start, logged := time.Now(), time.Now()
	for pgno := int64(0); ; {
		next, total, err := s.rewritePages(ctx, pgno)
		if err != nil {
			return err
		}
		if next >= total {
			break
		}
		pgno = next
		if time.Since(logged) > 10*time.Second {
			s.log.Info("sqlitestore: rewriting the database after an I/O error", "table", unquote(s.table), "pages", pgno, "of", total, "elapsed", time.Since(start).Round(time.Second))
			logged = time.Now()
		}
	}
	for {
		var busy, log, done int
		err := s.db.QueryRowContext(ctx, `PRAGMA main.wal_checkpoint(TRUNCATE)`).Scan(&busy, &log, &done)
		if err != nil {
			return fmt.Errorf("the checkpoint after the rewrite: %w", err)
		}
		if busy == 0 && done == log {
			break
		}
		select { // readers kept it from copying the whole WAL
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if s.file != nil && s.file.failures.Load() != before {
		return errors.New("another write-back of the file failed during the pass")
	}
	return nil
}

// rewritePages rewrites, in one transaction of the store's writer, the
// repairPages pages after pgno, and returns the last page rewritten and
// the database's page count. Without sqlite_dbpage it rewrites the whole
// database (VACUUM).
func (s *Store) rewritePages(parent context.Context, pgno int64) (next, total int64, err error) {
	ctx, cancel := context.WithTimeout(parent, time.Minute)
	defer cancel()
	select {
	case s.writeMu <- struct{}{}:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	defer func() { <-s.writeMu }()
	wc, _, err := s.openWriter(ctx, false)
	if err != nil {
		return 0, 0, err
	}
	q := stmtQuerier{ctx, wc}
	if _, err := q.exec(`BEGIN IMMEDIATE`); err != nil {
		return 0, 0, err
	}
	committed := false
	defer func() {
		if !committed {
			if _, err := (stmtQuerier{context.WithoutCancel(ctx), wc}).exec(`ROLLBACK`); err != nil {
				s.dropWriter()
			}
		}
	}()
	if err := q.queryRow(`PRAGMA main.page_count`).Scan(&total); err != nil {
		return 0, 0, err
	}
	next = min(pgno+repairPages, total)
	_, err = q.exec(`UPDATE sqlite_dbpage SET data = data WHERE pgno > ? AND pgno <= ?`, pgno, next)
	if err != nil && strings.Contains(err.Error(), "no such table") {
		if _, err := q.exec(`ROLLBACK`); err != nil {
			return 0, 0, err
		}
		committed = true
		s.log.Warn("sqlitestore: this driver's SQLite has no sqlite_dbpage: the repair rewrites the database with one VACUUM, which holds the write lock until it ends", "table", unquote(s.table), "pages", total)
		if _, err := q.exec(`VACUUM`); err != nil {
			return 0, 0, fmt.Errorf("VACUUM: %w", err)
		}
		return total, total, nil
	}
	if err != nil {
		return 0, 0, err
	}
	committed = true
	if _, err := q.exec(`COMMIT`); err != nil {
		return 0, 0, fmt.Errorf("commit: %w", err)
	}
	return next, total, nil
}
