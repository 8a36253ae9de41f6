package sqlitestore

import (
	"context"
	"errors"
	"syscall"
)

// writeback looks for a write-back of the database file that failed
// since the last look, in any connection of any process: Linux reports
// such a failure at the next fsync of every descriptor open when it
// happened (errseq, since 4.13), so the fsync of the descriptor the store
// holds from New to Close (privateFile) reports one that a checkpoint of
// another connection met (SQLite drops the error of the automatic
// checkpoint after a commit, and an application may ignore its own). Such a failure may have dropped pages
// that earlier checkpoints copied from the WAL (see the comment above
// sawIOError), so the writer settles, as after an I/O error of its own.
// It settles now, not at the next write, since a power cut before then
// would take the pages; and a settle left unfinished (a reader kept the
// checkpoint from completing) is tried again at each check. Only a failed
// write-back (EIO, ENOSPC, EDQUOT) counts; any other error of the fsync
// (a file system without it) is logged once and ends the looks. WAL mode
// only: in the rollback journal modes every commit syncs the database
// file itself, and a commit whose fsync fails is rolled back from its
// journal.
func (s *Store) writeback(parent context.Context) {
	ctx, cancel := s.bound(parent)
	defer cancel()
	if s.dbFile != nil {
		// The fsync waits for the file's write-back, which a loaded disk
		// can make slow: the check waits no longer than its bound, and the
		// next check reads the result.
		res := s.syncing
		if res == nil {
			res = make(chan error, 1)
			f := s.dbFile
			go func() { res <- f.Sync() }()
		}
		var err error
		select {
		case err = <-res:
			s.syncing = nil
		case <-ctx.Done():
			s.syncing = res
		}
		switch {
		case s.syncing != nil, err == nil:
		case errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
			s.wbErr.Store(true)
			s.unsettled.Store(true) // after wbErr: see settled
			s.log.Warn("sqlitestore: a write-back of the database file failed (found by the store's own fsync of it: another connection's checkpoint, or the kernel's write-back): the store acknowledges nothing until it has rewritten the database and a checkpoint has put every page on the disk", "table", unquote(s.table), "err", err)
		default:
			s.log.Warn("sqlitestore: the fsync of the database file failed otherwise than for a failed write-back: the store no longer looks for failed write-backs of other connections", "table", unquote(s.table), "err", err)
			s.dbFile.Close()
			s.dbFile = nil
		}
	}
	// The settle has a bound of its own: a checkpoint that waits for
	// readers (busy_timeout) may outlast the one above, which the rest of
	// the check does not share either.
	select {
	case s.writeMu <- struct{}{}:
		if s.unsettled.Load() {
			sctx, cancel := s.bound(parent)
			defer cancel()
			if _, _, err := s.writerConn(sctx); err != nil {
				s.log.Warn("sqlitestore: after an I/O error, the rewrite or its checkpoint did not finish (tried again at the next call or check)", "table", unquote(s.table), "err", err)
			}
		}
		<-s.writeMu
	default:
		// A write or a Work holds the writer: it settles first.
	}
}
