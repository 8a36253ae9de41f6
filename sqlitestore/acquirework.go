package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// The one-commit mode ([replay.WorkAcquirer]): the lease is the Work's
// open transaction, holding the uncommitted 'w' row, since SQLite's one
// writer keeps other writes out. The IDs Works hold are kept in memory, so
// this store's calls for them need not wait for the handler.

// hold is an ID that a Work of AcquireWork holds, or is acquiring.
type hold struct {
	fp  []byte // the holder's fingerprint (nil for none)
	end int64  // the lease's end by the store's clock; 0 while acquiring
}

type holds struct {
	mu sync.Mutex
	m  map[string]*hold
}

// take records h for key, or returns key's holder.
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

// busy reports key's holder, if any: its fingerprint and lease's end.
func (hs *holds) busy(key []byte) (fp []byte, end int64, ok bool) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h, ok := hs.m[string(key)]
	if !ok {
		return nil, 0, false
	}
	return h.fp, h.end, true
}

func (hs *holds) drop(key []byte, h *hold) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.m[string(key)] == h {
		delete(hs.m, string(key))
	}
}

// heldRecord is the busy answer for an ID a Work holds, or false.
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

// AcquireWork is [Store.AcquireRecord] whose lease is an open
// [replay.Work] ([replay.WorkAcquirer]): Commit writes the record with the
// handler's writes in one commit; a lease that passes rolls the Work back
// ([replay.ErrLeaseLost]). The Work holds the store's writer, as
// [Store.BeginWork]'s does. On an error nothing was taken.
func (s *Store) AcquireWork(ctx context.Context, id string, lease time.Duration, fingerprint []byte) (replay.Record, replay.Work, error) {
	if err := s.readyFor(id); err != nil {
		return replay.Record{}, nil, err
	}
	if err := s.checkLease(lease); err != nil {
		return replay.Record{}, nil, err
	}
	if err := replay.CheckFingerprint(fingerprint); err != nil {
		return replay.Record{}, nil, fmt.Errorf("%w: %w", ErrInvalidClaim, err)
	}
	ctx = orBackground(ctx)
	if ctx.Value(txKey{}) != nil {
		return replay.Record{}, nil, fmt.Errorf("%w: AcquireWork with a context that carries a transaction (a Work's or WithTx's): it would wait for the store's writer, which that transaction holds", ErrConfig)
	}
	key := s.key(id)
	h := &hold{fp: append([]byte(nil), fingerprint...)} // nil for none
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

// acquireWork is AcquireWork with writeMu held; a Work it returns holds
// writeMu and h.
func (s *Store) acquireWork(ctx context.Context, id string, key []byte, lease time.Duration, h *hold) (replay.Record, *work, error) {
	if err := s.guard.refused(); err != nil {
		return replay.Record{}, nil, err
	}
	wc, _, err := s.writerConn(ctx)
	if err != nil {
		return replay.Record{}, nil, err
	}
	if err := s.begin(ctx, wc); err != nil {
		s.dropWriter()
		return replay.Record{}, nil, unavailable(ctx, err)
	}
	q := s.inTx(ctx, wc)
	fail := func(r replay.Record, err error) (replay.Record, *work, error) {
		if _, rerr := (stmtQuerier{context.WithoutCancel(ctx), wc}).exec(`ROLLBACK`); rerr != nil {
			s.dropWriter()
			if err == nil {
				// The answer stands: the closed connection kept nothing.
				return r, nil, nil
			}
		}
		return r, nil, err
	}
	now := s.now().UnixNano()
	w := &work{s: s, id: id, token: newToken(), wc: wc, acquired: true, key: key, hold: h}
	if w.seq, err = s.guard.step(q, s, now, true); err != nil {
		return fail(replay.Record{}, unavailable(ctx, err)) // a loss or a fence passes as it is
	}
	if _, err := q.exec(`SAVEPOINT ` + s.savepoint); err != nil {
		return fail(replay.Record{}, unavailable(ctx, err))
	}
	// A fresh ID, the common case, takes the 'w' row at once.
	w.deadline = now + int64(lease)
	const row = ` (key, state, token, until, fingerprint, result) VALUES (?, 'w', ?, ?, ?, NULL)`
	n, err := execN(q, `INSERT INTO `+s.table+row+` ON CONFLICT (key) DO NOTHING`, key, w.token, w.deadline, h.fp)
	if err != nil {
		return fail(replay.Record{}, unavailable(ctx, err))
	}
	if n == 0 {
		e, err := s.row(q, key, now)
		if err != nil {
			return fail(replay.Record{}, unavailable(ctx, err))
		}
		switch {
		case e.state == "w" && !e.live:
			return fail(replay.Record{}, fmt.Errorf("%w: %w", ErrUnavailable, errEscaped))
		case e.live && (e.state == "l" || e.state == "w"):
			return fail(replay.Record{Lease: replay.Lease{State: replay.LeaseBusy, Wait: time.Duration(e.until - now)}, Fingerprint: e.fingerprint}, nil)
		case e.live && e.state == "d":
			return fail(replay.Record{Lease: replay.Lease{State: replay.LeaseDone}, Fingerprint: e.fingerprint, Result: e.result}, nil)
		case e.live:
			return fail(replay.Record{Lease: replay.Lease{State: replay.LeaseDone}}, nil)
		}
		if _, err := q.exec(`INSERT OR REPLACE INTO `+s.table+row, key, w.token, w.deadline, h.fp); err != nil {
			return fail(replay.Record{}, unavailable(ctx, err))
		}
	}
	// The connection's changes once the Work's row is written (rolledBack).
	if err := q.queryRow(`SELECT total_changes()`).Scan(&w.changes); err != nil {
		return fail(replay.Record{}, unavailable(ctx, err))
	}
	s.holds.mu.Lock()
	h.end = w.deadline
	s.holds.mu.Unlock()
	// Under w.mu: a deadline already passed fires expire at once, which
	// reads w.timer when it ends the Work.
	w.mu.Lock()
	w.timer = time.AfterFunc(time.Duration(w.deadline-s.now().UnixNano()), w.expire)
	w.mu.Unlock()
	return replay.Record{Lease: replay.Lease{State: replay.LeaseAcquired, Token: w.token}}, w, nil
}

// expire rolls back a Work of AcquireWork whose lease has passed.
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

// intact checks, releasing the savepoint, that the transaction is the
// Work's; if not, it ends the Work.
func (w *work) intact(ctx context.Context) error {
	s := w.s
	q := stmtQuerier{ctx, w.wc}
	now := s.now().UnixNano()
	e, err := s.row(q, s.key(w.id), now)
	if err != nil {
		return w.end(ctx, unavailable(ctx, err))
	}
	if e.state != "w" || e.token != w.token {
		// A handler's statement rolled the transaction back.
		return w.rolledBack(ctx)
	}
	// A handler's COMMIT ended the savepoint: RELEASE fails.
	if _, err := q.exec(`RELEASE ` + s.savepoint); err != nil && !strings.Contains(err.Error(), "no such savepoint") {
		return w.end(ctx, unavailable(ctx, fmt.Errorf("release: %w", err)))
	} else if err != nil {
		return w.end(ctx, fmt.Errorf("%w: a statement of the handler committed the work's transaction (COMMIT): part of the work was kept; %w", ErrUnavailable, errEscaped))
	}
	return nil
}

// rolledBack ends a Work whose 'w' row a handler rolled back: the ID is
// recorded as escaped if rows changed since, which may have committed.
func (w *work) rolledBack(ctx context.Context) error {
	s := w.s
	bg := context.WithoutCancel(ctx)
	q := stmtQuerier{bg, w.wc}
	var changes int64
	if err := q.queryRow(`SELECT total_changes()`).Scan(&changes); err != nil {
		w.drop(false)
		return unavailable(ctx, fmt.Errorf("a statement of the handler ended the work's transaction, and reading the connection's changes failed: %w", err))
	}
	if rerr := rollback(q); rerr != nil {
		w.drop(false)
		return unavailable(ctx, fmt.Errorf("a statement of the handler ended the work's transaction; rollback: %w", rerr))
	}
	if changes == w.changes {
		w.drop(true)
		return fmt.Errorf("%w: a statement of the handler ended the work's transaction (ROLLBACK) before it changed any row; nothing was kept", replay.ErrRolledBack)
	}
	now := s.now().UnixNano()
	err := func() error {
		// A handler's temporary trigger could delete the record: write it
		// on a new connection.
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
			// At the Work's synchronous level, whatever the handler set.
			if w.wc.level == 0 {
				return errors.New("the connection's synchronous level is unknown")
			}
			if _, err := q.exec(`PRAGMA synchronous = ` + syncNames[w.wc.level]); err != nil {
				return err
			}
			if s.wal {
				if err := setPragma(q, `PRAGMA wal_autocheckpoint = 0`); err != nil {
					return err
				}
			}
		}
		if err := s.begin(bg, q.wc); err != nil {
			return err
		}
		// Never over a live row another process took meanwhile.
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
		s.dropWriter() // in doubt
	}
	w.drop(err == nil)
	if err != nil {
		return unavailable(ctx, fmt.Errorf("a statement of the handler ended the work's transaction (ROLLBACK) after rows changed, and recording the ID as escaped failed: %w", err))
	}
	s.log.Warn("sqlitestore: a statement of a handler ended its Work's transaction (ROLLBACK) and rows changed after AcquireWork: the ID is refused until an operator releases it", "table", unquote(s.table))
	return fmt.Errorf("%w: a statement of the handler ended the work's transaction (ROLLBACK) and rows changed: statements after it may have committed on their own; %w", ErrUnavailable, errEscaped)
}

// commitAcquired is Commit of a Work of AcquireWork: RELEASE proves the
// transaction is still the Work's, then the 'w' row becomes the done row.
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
	n, err := execN(q, `UPDATE `+s.table+` SET state = 'd', until = ?, fingerprint = ?, result = ? WHERE key = ? AND state = 'w' AND token = ?`,
		u, fpArg, resArg, w.key, w.token)
	if err != nil {
		return w.end(ctx, unavailable(ctx, err))
	}
	if n != 1 {
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

// escaped ends a Work of AcquireWork whose savepoint a handler's COMMIT
// (the 'w' row stays, refused) or ROLLBACK (rolledBack) ended.
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

// rollback judges a 'w' row a handler rolled back as Commit would, so a
// handler that escaped and failed never runs again over its writes.
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
		return unavailable(ctx, fmt.Errorf("reading the work's row before its rollback: %w", err))
	}
	return nil
}
