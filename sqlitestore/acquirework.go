package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// The one-commit transactional mode ([replay.WorkAcquirer]). AcquireWork
// takes the store's writer, as BeginWork does, begins an IMMEDIATE
// transaction, checks the marker, opens the savepoint, reads the ID's
// row and, when the ID is free, writes its row in state 'w' inside that
// transaction: nothing is committed before the work. The lease is the
// open transaction: SQLite's single writer keeps every other write of the
// file out until the Work ends, so the uncommitted 'w' row is all the
// lease needs in the database. Commit turns it into the done row with
// the record and commits once (one write transaction, one fsync);
// Rollback, a failed Commit, or the end of the process rolls it back, and
// nothing of the request is left.
//
// Busy promptly. Another call of this store for the same ID would wait
// for the writer, that is for the whole handler. So the store keeps, in
// memory, the IDs its Works hold (or are acquiring): AcquireWork,
// AcquireRecord, AcquireLease and Claim of such an ID answer at once,
// without the writer: busy with the holder's fingerprint, or not first.
// Calls for other IDs wait for the writer as they do behind any Work (up
// to Options.Timeout). Other processes on the file, and other Stores of
// this process, see no uncommitted row: their writes wait for SQLite's
// lock (busy_timeout) and then find the ID done or free, or fail with
// ErrUnavailable; never a second holder.
//
// The lease's end. A Work still open when its lease has passed since it
// began is rolled back by a timer (the writer is the whole store's: a
// stalled handler must not hold it for ever) and its Commit fails with
// [replay.ErrLeaseLost], nothing kept.
//
// Escapes are found as BeginWork's are (work.go), with one more case: the
// uncommitted 'w' row vanishes with a ROLLBACK of the handler. When the
// connection then changed no row since AcquireWork (total_changes()),
// nothing was kept: [replay.ErrRolledBack]. Otherwise statements after
// the ROLLBACK may have committed on their own: the outcome is unknown,
// and the store commits the ID's row in state 'w', expired, so the ID is
// refused ([errEscaped]) until an operator releases it. Rollback judges
// such a Work the same way (rollbackAcquired): a handler that escaped and
// then failed must not be run again over what it kept.

// hold is an ID that a Work of AcquireWork holds, or is acquiring, in
// this process.
type hold struct {
	fp  []byte // the holder's fingerprint (nil for none)
	end int64  // the lease's end by the store's clock; 0 while acquiring
}

// holds is the store's in-memory table of IDs held by its Works.
type holds struct {
	mu sync.Mutex
	m  map[string]*hold
}

// take records h for key unless another holder has it, which it returns.
func (hs *holds) take(key []byte, h *hold) *hold {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if o, ok := hs.m[string(key)]; ok {
		return o
	}
	if hs.m == nil {
		hs.m = make(map[string]*hold)
	}
	hs.m[string(key)] = h
	return nil
}

// busy reports the holder of key, if any: its fingerprint and when its
// lease ends.
func (hs *holds) busy(key []byte) (fp []byte, end int64, ok bool) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h, ok := hs.m[string(key)]
	if !ok {
		return nil, 0, false
	}
	return h.fp, h.end, true
}

// drop forgets h's hold of key.
func (hs *holds) drop(key []byte, h *hold) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.m[string(key)] == h {
		delete(hs.m, string(key))
	}
}

// heldRecord is the busy answer for an ID a Work of this store holds, or
// false when none does.
func (s *Store) heldRecord(key []byte, record bool) (replay.Record, bool) {
	fp, end, ok := s.holds.busy(key)
	if !ok {
		return replay.Record{}, false
	}
	r := replay.Record{Lease: replay.Lease{State: replay.LeaseBusy}}
	if end != 0 {
		r.Wait = time.Duration(max(end-s.now().UnixNano(), 0))
	}
	if record && fp != nil {
		r.Fingerprint = append([]byte(nil), fp...)
	}
	return r, true
}

var _ replay.WorkAcquirer = (*Store)(nil)

// AcquireWork implements [replay.WorkAcquirer]: it is
// [Store.AcquireRecord] whose lease is an open [replay.Work]. When id is
// free it returns [replay.LeaseAcquired] with the Work, whose transaction
// already holds id's row (state 'w', uncommitted): Commit writes the done
// row with the record and commits the handler's writes with it, one write
// transaction and one fsync for the request; Rollback, the end of the
// lease (the Work is then rolled back by the store, and Commit fails with
// [replay.ErrLeaseLost]) or the end of the process leave nothing of it.
// Otherwise it reports what AcquireRecord would, busy or done, and no
// Work.
//
// Like [Store.BeginWork], the Work holds the store's writer until it
// ends: other writes of the store wait for it, and other processes' wait
// up to their busy_timeout. Calls of this store for an ID a Work holds
// (AcquireWork, AcquireRecord, AcquireLease, Claim) do not wait: they
// answer at once, busy with the holder's fingerprint, or not first. Other
// processes on the file cannot see the uncommitted row: theirs wait for
// the writer and then find the ID done or free, or fail with
// ErrUnavailable (busy_timeout).
//
// Errors: [ErrInvalidClaim] for an empty or oversize id, a lease that is
// not positive or over the horizon, or an oversize fingerprint
// ([replay.ErrTooLarge]); [ErrConfig] when ctx carries a transaction (a
// Work's or [WithTx]'s: the writer would wait for itself); otherwise
// errors matching [ErrUnavailable]. In every error case no transaction is
// open and nothing was taken. It is safe for concurrent use.
func (s *Store) AcquireWork(ctx context.Context, id string, lease time.Duration, fingerprint []byte) (replay.Record, replay.Work, error) {
	if err := s.ready(); err != nil {
		return replay.Record{}, nil, err
	}
	if err := checkID(id); err != nil {
		return replay.Record{}, nil, err
	}
	if err := s.checkLease(lease); err != nil {
		return replay.Record{}, nil, err
	}
	if err := replay.CheckFingerprint(fingerprint); err != nil {
		return replay.Record{}, nil, fmt.Errorf("%w: %w", ErrInvalidClaim, err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Value(txKey{}) != nil {
		return replay.Record{}, nil, fmt.Errorf("%w: AcquireWork with a context that carries a transaction (a Work's or WithTx's): it would wait for the store's writer, which that transaction holds", ErrConfig)
	}
	key := s.key(id)
	h := &hold{fp: append([]byte(nil), fingerprint...)}
	if len(fingerprint) == 0 {
		h.fp = nil
	}
	if s.holds.take(key, h) != nil {
		r, _ := s.heldRecord(key, true)
		return r, nil, nil
	}
	bctx, cancel := s.bound(ctx)
	defer cancel()
	select {
	case s.writeMu <- struct{}{}:
	case <-bctx.Done():
		s.holds.drop(key, h)
		return replay.Record{}, nil, unavailable(bctx, errors.New("waiting for the store's writer"))
	}
	r, w, err := s.acquireWork(bctx, id, key, lease, h)
	if w == nil {
		s.holds.drop(key, h)
		<-s.writeMu
		return r, nil, err // an untyped nil Work
	}
	return r, w, nil
}

// acquireWork is AcquireWork with writeMu held. It returns a Work only
// for an acquired lease; then the Work holds writeMu and h.
func (s *Store) acquireWork(ctx context.Context, id string, key []byte, lease time.Duration, h *hold) (replay.Record, *work, error) {
	if err := s.guard.refused(); err != nil {
		return replay.Record{}, nil, err
	}
	wc, _, err := s.writerConn(ctx)
	if err != nil {
		return replay.Record{}, nil, err
	}
	q := stmtQuerier{ctx, wc}
	if _, err := q.exec(`BEGIN IMMEDIATE`); err != nil {
		s.dropWriter()
		return replay.Record{}, nil, unavailable(ctx, err)
	}
	q = s.inTx(ctx, wc)
	fail := func(r replay.Record, err error) (replay.Record, *work, error) {
		if _, rerr := (stmtQuerier{context.WithoutCancel(ctx), wc}).exec(`ROLLBACK`); rerr != nil {
			s.dropWriter()
			if err == nil {
				// The answer stands: nothing of this transaction is kept
				// with the connection closed.
				return r, nil, nil
			}
		}
		return r, nil, err
	}
	now := s.now().UnixNano()
	w := &work{s: s, id: id, token: newToken(), wc: wc, conn: wc.conn, acquired: true, key: key, hold: h}
	guarded := func(err error) (replay.Record, *work, error) {
		if errors.Is(err, ErrForgotten) || errors.As(err, new(fenced)) {
			return fail(replay.Record{}, err)
		}
		return fail(replay.Record{}, unavailable(ctx, err))
	}
	if w.seq, err = s.guard.step(q, s, now, true); err != nil {
		return guarded(err)
	}
	// The row, and the connection's count of changed rows before the
	// Work's own write (one more after it: see rolledBack).
	var (
		e       entry
		state   sql.NullString
		token   sql.NullString
		until   sql.NullInt64
		changes int64
	)
	if err := q.queryRow(`SELECT total_changes(), r.state, r.token, r.until, r.fingerprint, r.result FROM (SELECT 1)`+
		` LEFT JOIN `+s.table+` AS r ON r.key = ?`, key).
		Scan(&changes, &state, &token, &until, &e.fingerprint, &e.result); err != nil {
		return fail(replay.Record{}, unavailable(ctx, err))
	}
	if state.Valid {
		e.found, e.state, e.token, e.until = true, state.String, token.String, until.Int64
		e.live = e.until > now
	}
	switch {
	case e.found && e.state == "w" && !e.live:
		return fail(replay.Record{}, fmt.Errorf("%w: %w", ErrUnavailable, errEscaped))
	case e.live && (e.state == "l" || e.state == "w"):
		return fail(replay.Record{Lease: replay.Lease{State: replay.LeaseBusy, Wait: time.Duration(e.until - now)}, Fingerprint: e.fingerprint}, nil)
	case e.live && e.state == "d":
		return fail(replay.Record{Lease: replay.Lease{State: replay.LeaseDone}, Fingerprint: e.fingerprint, Result: e.result}, nil)
	case e.live:
		return fail(replay.Record{Lease: replay.Lease{State: replay.LeaseDone}}, nil)
	}
	if _, err := q.exec(`SAVEPOINT ` + s.savepoint); err != nil {
		return fail(replay.Record{}, unavailable(ctx, err))
	}
	w.deadline = now + int64(lease)
	if _, err := q.exec(`INSERT OR REPLACE INTO `+s.table+` (key, state, token, until, fingerprint, result) VALUES (?, 'w', ?, ?, ?, NULL)`,
		key, w.token, w.deadline, h.fp); err != nil {
		return fail(replay.Record{}, unavailable(ctx, err))
	}
	// The INSERT counts one change (a REPLACE's deletion of an expired
	// row counts none).
	w.changes = changes + 1
	s.holds.mu.Lock()
	h.end = w.deadline
	s.holds.mu.Unlock()
	w.timer = time.AfterFunc(time.Duration(w.deadline-s.now().UnixNano()), w.expire)
	return replay.Record{Lease: replay.Lease{State: replay.LeaseAcquired, Token: w.token}}, w, nil
}

// expire rolls back a Work of AcquireWork whose lease has passed: its
// Commit then fails with ErrLeaseLost, or with the error of an escape
// found now.
func (w *work) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	ctx, cancel := w.s.bound(context.Background())
	defer cancel()
	if err := w.intact(ctx); err != nil {
		w.result = err
		return
	}
	w.result = w.end(ctx, fmt.Errorf("%w: the lease ran out before Commit: the work's transaction was rolled back, nothing was kept", replay.ErrLeaseLost))
	w.s.log.Warn("sqlitestore: a Work's lease ran out before its Commit: its transaction was rolled back", "table", unquote(w.s.table))
}

// intact checks that the work's transaction is still the one AcquireWork
// (or BeginWork) opened, releasing its savepoint. When it is not, it ends
// the Work and returns the error Commit reports.
func (w *work) intact(ctx context.Context) error {
	s := w.s
	q := stmtQuerier{ctx, w.wc}
	now := s.now().UnixNano()
	e, err := s.row(q, s.key(w.id), now)
	if err != nil {
		return w.end(ctx, unavailable(ctx, err))
	}
	if e.state != "w" || e.token != w.token {
		// The handler's statements rolled the transaction back (and
		// perhaps began another, or committed statements on their own).
		return w.rolledBack(ctx)
	}
	// A statement of the handler that committed the transaction ended the
	// savepoint with it (and left the 'w' row committed): RELEASE fails.
	// Released, the transaction is still the Work's.
	if _, err := q.exec(`RELEASE ` + s.savepoint); err != nil && !strings.Contains(err.Error(), "no such savepoint") {
		return w.end(ctx, unavailable(ctx, fmt.Errorf("release: %w", err)))
	} else if err != nil {
		return w.end(ctx, fmt.Errorf("%w: a statement of the handler committed the work's transaction (COMMIT): part of the work was kept; %w", ErrUnavailable, errEscaped))
	}
	return nil
}

// rolledBack ends a Work whose 'w' row a statement of the handler rolled
// back. With no row changed on the connection since AcquireWork (or
// BeginWork), nothing was kept: ErrRolledBack (a BeginWork's lease row is
// as it was). Otherwise a statement after the ROLLBACK may have committed
// by itself: the ID is recorded as escaped (refused until an operator
// releases it: over an expired row, or over the Work's own lease row) and
// the outcome is reported unknown.
func (w *work) rolledBack(ctx context.Context) error {
	s := w.s
	bg := context.WithoutCancel(ctx)
	q := stmtQuerier{bg, w.wc}
	var changes int64
	if err := q.queryRow(`SELECT total_changes()`).Scan(&changes); err != nil {
		w.drop(false)
		return unavailable(ctx, fmt.Errorf("a statement of the handler ended the work's transaction, and reading the connection's changes failed: %w", err))
	}
	// Whatever the handler began after it; fails when none is open.
	_, rerr := q.exec(`ROLLBACK`)
	if rerr != nil && !strings.Contains(rerr.Error(), "no transaction is active") {
		w.drop(false)
		return unavailable(ctx, fmt.Errorf("a statement of the handler ended the work's transaction; rollback: %w", rerr))
	}
	if changes == w.changes {
		w.drop(true)
		return fmt.Errorf("%w: a statement of the handler ended the work's transaction (ROLLBACK) before it changed any row; nothing was kept", replay.ErrRolledBack)
	}
	now := s.now().UnixNano()
	err := func() error {
		// A temporary trigger the handler made on the store's table after
		// its ROLLBACK would fire for the record and could delete it: the
		// record is then written on the writer's next connection (which
		// refuses a trigger in main).
		n, err := s.triggers(q, true)
		if err != nil {
			return err
		}
		if n != 0 {
			if s.wc == w.wc {
				s.dropWriter()
			}
			bctx, cancel := s.bound(bg)
			defer cancel()
			wc, _, err := s.writerConn(bctx)
			if err != nil {
				return err
			}
			q = stmtQuerier{bg, wc}
		} else {
			// The handler may have lowered synchronous after its ROLLBACK:
			// the record of the escape commits at the level the Work began
			// with, or not at all.
			if w.wc.level == 0 {
				return errors.New("the connection's synchronous level is unknown")
			}
			if _, err := q.exec(`PRAGMA synchronous = ` + syncNames[w.wc.level]); err != nil {
				return err
			}
			// And the checkpoint after it stays the store's (see
			// untriggered).
			if s.wal {
				if err := setPragma(q, `PRAGMA wal_autocheckpoint = 0`); err != nil {
					return err
				}
			}
		}
		if _, err := q.exec(`BEGIN IMMEDIATE`); err != nil {
			return err
		}
		// Never over a live row: another process may have taken the ID
		// while SQLite's lock was free.
		_, err = q.exec(`INSERT INTO `+s.table+` (key, state, token, until, fingerprint, result) VALUES (?, 'w', ?, ?, NULL, NULL)`+
			` ON CONFLICT (key) DO UPDATE SET state = 'w', token = excluded.token, until = excluded.until, fingerprint = NULL, result = NULL`+
			` WHERE until <= ? OR state = 'l' AND token = excluded.token`,
			w.key, w.token, now, now)
		if err == nil {
			_, err = q.exec(`COMMIT`)
		}
		return err
	}()
	if err != nil && s.wc != w.wc {
		s.dropWriter() // the record's own connection, its transaction in doubt
	}
	w.drop(err == nil)
	if err != nil {
		return unavailable(ctx, fmt.Errorf("a statement of the handler ended the work's transaction (ROLLBACK) after rows changed, and recording the ID as escaped failed: %w", err))
	}
	s.log.Warn("sqlitestore: a statement of a handler ended its Work's transaction (ROLLBACK) and rows changed after AcquireWork: the ID is refused until an operator releases it", "table", unquote(s.table))
	return fmt.Errorf("%w: a statement of the handler ended the work's transaction (ROLLBACK) and rows changed: statements after it may have committed on their own; %w", ErrUnavailable, errEscaped)
}

// commitAcquired is Commit of a Work of AcquireWork: RELEASE proves the
// transaction is still the Work's (a handler's COMMIT or ROLLBACK ended
// the savepoint), then the 'w' row becomes the done row and the
// transaction commits: three statements.
func (w *work) commitAcquired(ctx context.Context, until time.Time, fp, result []byte) error {
	s := w.s
	q := s.inTx(ctx, w.wc)
	if _, err := q.exec(`RELEASE ` + s.savepoint); err != nil {
		if !strings.Contains(err.Error(), "no such savepoint") {
			return w.end(ctx, unavailable(ctx, fmt.Errorf("release: %w", err)))
		}
		return w.escaped(ctx)
	}
	if err := w.untriggered(ctx, q); err != nil {
		return err
	}
	now := s.now().UnixNano()
	if now >= w.deadline {
		return w.end(ctx, fmt.Errorf("%w: the lease ran out before Commit: nothing was kept", replay.ErrLeaseLost))
	}
	u := nanos(until)
	if err := s.checkUntil(now, u); err != nil {
		return w.end(ctx, fmt.Errorf("%w: %w", replay.ErrRolledBack, err))
	}
	var fpArg, resArg any
	if result != nil {
		fpArg, resArg = append([]byte{}, fp...), append([]byte{}, result...)
	}
	res, err := q.exec(`UPDATE `+s.table+` SET state = 'd', until = ?, fingerprint = ?, result = ? WHERE key = ? AND state = 'w' AND token = ?`,
		u, fpArg, resArg, w.key, w.token)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return w.end(ctx, unavailable(ctx, err))
	}
	if n != 1 {
		// A statement of the handler changed the store's row inside the
		// transaction, which is still the Work's: all of it is rolled back.
		return w.end(ctx, fmt.Errorf("%w: a statement of the handler changed the ID's row in the store's table; nothing was kept", replay.ErrRolledBack))
	}
	if _, err := q.exec(`COMMIT`); err != nil {
		w.clean = false
		w.drop(s.commitFailed(ctx, err))
		return unavailable(ctx, fmt.Errorf("commit: %w", err))
	}
	s.guard.saw(w.seq)
	w.drop(true)
	return nil
}

// escaped ends a Work of AcquireWork whose savepoint a statement of the
// handler ended: by a COMMIT (the 'w' row is committed: the ID stays
// refused) or a ROLLBACK (see rolledBack).
func (w *work) escaped(ctx context.Context) error {
	s := w.s
	e, err := s.row(stmtQuerier{ctx, w.wc}, w.key, s.now().UnixNano())
	if err != nil {
		return w.end(ctx, unavailable(ctx, err))
	}
	if e.state == "w" && e.token == w.token {
		return w.end(ctx, fmt.Errorf("%w: a statement of the handler committed the work's transaction (COMMIT): part of the work was kept; %w", ErrUnavailable, errEscaped))
	}
	return w.rolledBack(ctx)
}

// rollback is Rollback. When a statement of the handler rolled the
// Work's 'w' row back, statements after that ROLLBACK may have committed
// on their own (and, for a Work of AcquireWork, the ID is already free):
// rolledBack judges it as Commit would (the ID is refused when rows
// changed since the Work began), so that a handler that escaped and then
// failed is never run again over its own kept writes. Otherwise the
// transaction is rolled back (after a handler's COMMIT, the committed 'w'
// row keeps the ID refused).
func (w *work) rollback(ctx context.Context) error {
	s := w.s
	bg := context.WithoutCancel(ctx)
	e, err := s.row(stmtQuerier{bg, w.wc}, w.key, s.now().UnixNano())
	if err == nil && (e.state != "w" || e.token != w.token) {
		if err := w.rolledBack(ctx); err != nil && !errors.Is(err, replay.ErrRolledBack) {
			return err
		}
		return nil
	}
	_, rerr := (stmtQuerier{bg, w.wc}).exec(`ROLLBACK`)
	w.drop(rerr == nil)
	if rerr != nil {
		return unavailable(ctx, rerr)
	}
	if err != nil {
		// Rolled back, but whether a statement of the handler had ended
		// the transaction before is unknown.
		return unavailable(ctx, fmt.Errorf("reading the work's row before its rollback: %w", err))
	}
	return nil
}
