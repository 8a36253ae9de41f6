package idempotency

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"time"

	"github.com/ctoken/ctoken/internal/confirm"
	"github.com/ctoken/ctoken/internal/httpx"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// runWork is run for [Config.Transactional]: it opens a transaction of the
// store for the lease a holds, runs next with the transaction in its
// context (ctx, from handlerContext), and settles the key: the response
// committed with the handler's writes and then sent, or the writes rolled
// back and the key released. Nothing of the handler's response is sent
// before the commit succeeded.
func (a *attempt) runWork(ctx context.Context, w http.ResponseWriter, next http.Handler, body []byte) {
	p := a.p
	start := time.Now()
	var work replay.Work
	var err error
	if a.held != nil {
		work = a.held // AcquireWork began it, holding the lease
	} else {
		// The transaction may live as long as the lease can still be
		// committed (confirmDeadline), however the client's request ends.
		wctx, wcancel := replay.WithDeadlineOnly(a.r.Context(), a.start.Add(p.lease+p.lease/4))
		defer wcancel()
		work, err = p.transactor.BeginWork(wctx, a.id, a.token)
	}
	a.work = max(time.Since(start), 1)
	if err == nil && work == nil {
		err = errStoreAnswer
	}
	if err != nil {
		err = storeBeginError(err)
		a.log(slog.LevelWarn, "idempotency: the store could not begin the handler's transaction; key released, answered 503", http.StatusServiceUnavailable, err)
		took, _ := a.releaseLease()
		p.refuse(w, err, took, p.retryAfter)
		return
	}
	r2 := a.handlerRequest(work.Context(ctx), body)
	outer := w.Header().Clone() // an outer middleware's headers, kept on a 503
	b := &bufferWriter{a: a, w: w, hold: true}
	defer func() {
		// A handler that panics, or ends its goroutine with
		// runtime.Goexit, returns nothing: roll back and release.
		pv := recover()
		if !b.settled {
			b.settled = true
			a.rollback(work)
			a.release(errReleasedPanic)
		}
		if pv != nil {
			panic(pv)
		}
	}()
	next.ServeHTTP(b, r2)
	b.settled = true
	if b.status == 0 {
		if ctx.Err() != nil {
			a.log(slog.LevelWarn, "idempotency: the handler returned without a response after its deadline; its transaction rolled back, key released, answered 503", http.StatusServiceUnavailable, errReleasedLate)
			a.rollback(work)
			a.release(errReleasedLate)
			restoreHeader(w.Header(), outer)
			writeProblem(w, http.StatusServiceUnavailable, p.problems.body(errReleasedLate), p.retryAfter)
			return
		}
		b.status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	if httpx.RetryStatus(b.status) {
		a.rollback(work)
		a.release(errReleasedRetry)
		b.send()
		return
	}
	var enc []byte
	if b.buf.Len() <= p.maxResponse {
		enc, err = p.records.sealBuffered(a.id, a.fp, b.status, storedHeader(w.Header(), p.replay), &b.buf)
	}
	if enc == nil || err != nil {
		enc = a.tooLarge(b.status)
	}
	if err := a.commit(work, enc); err != nil {
		restoreHeader(w.Header(), outer)
		if errors.Is(err, ErrOutcomeUnknown) {
			writeProblem(w, http.StatusServiceUnavailable, p.problems.body(err), a.unknownRetryAfter())
			return
		}
		writeProblem(w, http.StatusServiceUnavailable, p.problems.unsettled, p.retryAfter)
		return
	}
	b.send()
}

// commit commits work with result as the key's response, once: a Work
// ends with its first Commit, so an error is never retried. It logs and
// observes the outcome and returns nil only if the handler's writes and
// the record were committed.
func (a *attempt) commit(work replay.Work, result []byte) error {
	p := a.p
	ctx, cancel := replay.WithDeadlineOnly(a.r.Context(), a.confirmDeadline())
	defer cancel()
	start := time.Now()
	err := work.Commit(ctx, time.Now().Add(p.window), a.fp, result)
	a.work += max(time.Since(start), 1)
	took := a.acquired + a.work
	switch {
	case err == nil:
		p.observeRun(a.route, time.Since(a.start)) // estimate.go: the Retry-After of a 409
		if p.obs != nil {
			p.obs.Observe(observe.Event{Kind: observe.KindIdempotency, Outcome: observe.OutcomeProcessed, StoreLatency: took})
		}
		return nil
	case errors.Is(err, replay.ErrLeaseLost):
		err = leaseLostError(err)
		a.log(slog.LevelError, "idempotency: the lease ran out before the commit and another attempt took the key; the handler's transaction was rolled back and its response not sent, answered 503", http.StatusServiceUnavailable, err)
	case errors.Is(err, replay.ErrRolledBack):
		// Nothing was kept (a statement of the handler had failed, the
		// record was refused): the key is released, so the retry runs
		// the handler again at once instead of waiting out the lease.
		err = storeConfirmError(err)
		a.log(slog.LevelError, "idempotency: the store rolled the handler's transaction back (a statement of it failed, or the record was refused); nothing was kept, key released, the handler's response not sent, answered 503", http.StatusServiceUnavailable, err)
		releaseTook, _ := a.releaseLease()
		took = releaseTook
	default:
		err = outcomeUnknownError(err)
		a.log(slog.LevelError, "idempotency: the commit of the handler's transaction failed with an unknown outcome; key left leased, the handler's response not sent, answered 503 outcome unknown", http.StatusServiceUnavailable, err)
	}
	p.report(err, took)
	return err
}

// unknownRetryAfter is the Retry-After of an unknown outcome: when the
// lease was taken in the handler's transaction (AcquireWork), the lease
// was committed or not with it, so the store can tell as soon as it ends
// the transaction: [Config.RetryAfter]. Otherwise the key stays leased
// until the lease ends, and until then a retry is only told 409: the
// seconds until it ends.
func (a *attempt) unknownRetryAfter() string {
	if a.held != nil {
		return a.p.retryAfter
	}
	return httpx.RetryAfterSeconds(time.Until(a.start.Add(a.p.lease)))
}

// rollback discards work's writes, waiting at most a quarter of the lease
// for the store. A failure is logged: the writes were not committed (only
// Commit commits them), and the store ends the transaction.
func (a *attempt) rollback(work replay.Work) {
	ctx, cancel := replay.WithDeadlineOnly(a.r.Context(), time.Now().Add(a.p.lease/4))
	defer cancel()
	start := time.Now()
	err := work.Rollback(ctx)
	a.work += max(time.Since(start), 1)
	if err != nil {
		a.log(slog.LevelError, "idempotency: the handler's transaction could not be rolled back; its writes are not committed", 0, storeRollbackError(err))
	}
}

// confirmDeadline is how long a record of the lease may be tried: until
// the lease ends or, when that is already near, for a quarter of the
// lease.
func (a *attempt) confirmDeadline() time.Time {
	return confirm.Deadline(a.start.Add(a.p.lease), a.p.lease)
}

// restoreHeader sets h back to outer: the headers the handler set are not
// sent with a problem that replaces its response.
func restoreHeader(h, outer http.Header) {
	clear(h)
	maps.Copy(h, outer)
}

// refuseTimeoutHandler is what Wrap returns for an [http.TimeoutHandler]
// outside Transactional: it refuses every covered request with 500, and
// logs it at Error, since the key would be released by the 503 the
// TimeoutHandler answers while its handler still runs, and the retry
// would run it beside itself.
func (p *params) refuseTimeoutHandler(next http.Handler) http.Handler {
	const msg = "idempotency: Wrap was given an http.TimeoutHandler, which answers before its handler returns: a retry would run the handler beside itself; refused, answered 500 (put TimeoutHandler outside Wrap, or use Transactional)"
	if p.log != nil {
		p.log.LogAttrs(context.Background(), slog.LevelError, msg, slog.String("reason", ReasonOf(errTimeoutHandler).String()))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.covers(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		a := &attempt{p: p, r: r, route: r.Pattern}
		if p.route != nil {
			a.route = p.route(r)
		}
		a.log(slog.LevelError, msg, http.StatusInternalServerError, errTimeoutHandler)
		p.refuse(w, errTimeoutHandler, 0, "")
	})
}
