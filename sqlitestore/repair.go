package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// An I/O error is a loss until proven otherwise: Linux reports a failed
// write-back once and marks the pages clean, so the page cache holds bytes
// the disk never got. As PostgreSQL does, the store acknowledges nothing
// from the error on and rewrites every page from the page cache,
// repairPages per transaction so the application's writes go on. The
// sidecar marks an unfinished repair: New repairs first, or after a crash
// of the machine refuses. Outside WAL mode a journal rolls it back.

const repairPages = 256 // pages per transaction of the repair

var errRepairing = fmt.Errorf("%w: an I/O error of the database file was found: the store acknowledges nothing until it has rewritten the database and synced it (in progress, logged)", ErrUnavailable)

func (s *Store) repairErr() error {
	if s.repairing.Load() {
		return errRepairing
	}
	return nil
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
// since its last look. Another fsync error ends the looks.
func (s *Store) lookForWritebackFailure() {
	h := s.file
	if h == nil || !s.wal {
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
	s.observe(replay.Event{Kind: replay.EventServing})
}

// rewriteFile is one pass; a failed write-back found meanwhile fails it.
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
	// PASSIVE, which never holds the application's writers back: done
	// when it copied the whole WAL, which syncs the database file (and the
	// next writer restarts the WAL).
	for waited := time.Now(); ; {
		var busy, log, done int
		err := s.db.QueryRowContext(ctx, `PRAGMA main.wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done)
		if err != nil {
			return fmt.Errorf("the checkpoint after the rewrite: %w", err)
		}
		if done == log {
			break
		}
		if time.Since(waited) > 10*time.Second {
			s.log.Info("sqlitestore: the repair waits for a reader that holds the checkpoint back", "table", unquote(s.table), "frames", log, "copied", done)
			waited = time.Now()
		}
		select {
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

// rewritePages rewrites the pages after pgno in one transaction (without
// sqlite_dbpage, VACUUM) and returns the last one and the page count.
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
	if err := s.begin(ctx, wc); err != nil {
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
		// Bounded by Close alone: a large file's VACUUM outlasts any timeout.
		if err := s.waiting(parent, wc, `VACUUM`); err != nil {
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
