//go:build ncruces

package drivertest

// Power cuts and fsync failures, simulated by the crash VFS
// (crashvfs_ncruces_test.go) under the store: how many claims, records
// and works the store acknowledged are accepted again once the machine
// comes back.

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// pcKind is what a workload step acknowledges.
type pcKind uint8

const (
	pcClaim  pcKind = iota // Claim answered first
	pcRecord               // AcquireRecord, then ConfirmRecord answered nil
	pcWork                 // AcquireWork, an insert into effects, Commit answered nil
	pcHTTP                 // a POST /charges with the ID as Idempotency-Key through the Transactional idempotency middleware answered 201
)

func (k pcKind) String() string { return [...]string{"claim", "record", "work", "http"}[k] }

// pcKindOf spreads the steps: half claims, a quarter records, a quarter
// works; with the middleware (http), half of those works are requests
// through it.
func pcKindOf(i int64, http bool) pcKind {
	switch i % 4 {
	case 2:
		return pcRecord
	case 3:
		if http && i%8 == 7 {
			return pcHTTP
		}
		return pcWork
	}
	return pcClaim
}

// pcSeed returns the seed of a randomized test: CTOKEN_SEED when set (to
// run a failed round again), the clock otherwise. It logs the seed.
func pcSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("CTOKEN_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CTOKEN_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("seed %d (CTOKEN_SEED runs it again)", seed)
	return seed
}

// pcOptions are the stores' options: frequent checks, so the marker's
// sequence advances and the sidecar is written during the short rounds.
func pcOptions() sqlitestore.Options {
	return sqlitestore.Options{
		Timeout:         time.Second,
		RecheckInterval: 100 * time.Millisecond,
		SweepInterval:   -1,
		Logger:          slog.New(slog.DiscardHandler),
	}
}

// pcLedger records a workload's outcomes.
type pcLedger struct {
	mu      sync.Mutex
	acked   map[string]pcKind
	ackedAt map[string]time.Time
	calls   int
	errs    int            // calls answered with an error (ErrUnavailable)
	kinds   map[string]int // their messages
	bad     []string
}

func newPCLedger() *pcLedger {
	return &pcLedger{acked: map[string]pcKind{}, ackedAt: map[string]time.Time{}, kinds: map[string]int{}}
}

// errCount returns the errors so far, and their commonest messages.
func (l *pcLedger) errCount() (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	msgs := slices.SortedFunc(maps.Keys(l.kinds), func(a, b string) int { return l.kinds[b] - l.kinds[a] })
	var out []string
	for _, m := range msgs[:min(3, len(msgs))] {
		out = append(out, fmt.Sprintf("%d× %q", l.kinds[m], m))
	}
	return l.errs, strings.Join(out, ", ")
}

func (l *pcLedger) note(id string, kind pcKind, acked bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	switch {
	case err != nil && !errors.Is(err, sqlitestore.ErrUnavailable):
		l.bad = append(l.bad, fmt.Sprintf("%s %s: %v", kind, id, err))
	case err != nil:
		l.errs++
		l.kinds[err.Error()]++
	case acked:
		l.acked[id] = kind
		l.ackedAt[id] = time.Now()
	}
}

// pcStep runs one step of kind on a fresh id and reports whether the
// store acknowledged it.
func pcStep(ctx context.Context, s *sqlitestore.Store, send func(string) answer, id string, kind pcKind) (bool, error) {
	until := time.Now().Add(time.Hour)
	fp, result := faultFingerprint(id), faultResult(id)
	switch kind {
	case pcHTTP:
		switch a := send(id); {
		case a.status == http.StatusCreated:
			return true, nil
		case a.status == http.StatusServiceUnavailable:
			return false, fmt.Errorf("%w: 503 %s", sqlitestore.ErrUnavailable, problemType(a.body))
		default:
			return false, fmt.Errorf("%d %s", a.status, a.body)
		}
	case pcRecord:
		r, err := s.AcquireRecord(ctx, id, time.Minute, fp)
		if err != nil || r.State != replay.LeaseAcquired {
			return false, err
		}
		err = s.ConfirmRecord(ctx, id, r.Token, until, fp, result)
		return err == nil, err
	case pcWork:
		_, w, err := s.AcquireWork(ctx, id, time.Minute, fp)
		if err != nil || w == nil {
			return false, err
		}
		wctx := w.Context(ctx)
		tx, err := sqlitestore.TxFrom(wctx)
		if err == nil {
			_, err = tx.ExecContext(wctx, `INSERT INTO effects (id) VALUES (?)`, id)
		}
		if err != nil {
			w.Rollback(ctx)
			if !errors.Is(err, sqlitestore.ErrUnavailable) {
				err = fmt.Errorf("%w: insert: %w", sqlitestore.ErrUnavailable, err)
			}
			return false, err
		}
		err = w.Commit(ctx, until, fp, result)
		return err == nil, err
	}
	first, err := s.Claim(ctx, id, until)
	return first && err == nil, err
}

// pcStart runs the workload with 6 goroutines on fresh IDs prefix+"0",
// prefix+"1"... beside a reader of db's (see pcReader), noted in l; with
// send (idempotencyFront), requests through the middleware too. abandon lets it
// meet the dead disk for a moment, stops it, and closes s and db.
func pcStart(ctx context.Context, s *sqlitestore.Store, db *sql.DB, send func(string) answer, prefix string) (l *pcLedger, abandon func()) {
	l = newPCLedger()
	stop := make(chan struct{})
	var next atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() { pcReader(ctx, db, stop) })
	for range 6 {
		wg.Go(func() {
			for !isClosed(stop) {
				i := next.Add(1) - 1
				id := prefix + strconv.FormatInt(i, 10)
				kind := pcKindOf(i, send != nil)
				acked, err := pcStep(ctx, s, send, id, kind)
				l.note(id, kind, acked, err)
				if err != nil {
					time.Sleep(time.Millisecond) // a failing store answers at once
				}
			}
		})
	}
	return l, func() {
		time.Sleep(20 * time.Millisecond)
		close(stop)
		wg.Wait()
		s.Close()
		db.Close()
	}
}

// pcReader is the application's reader: a connection of db held open for
// the whole workload (as an application that reads beside the store holds
// one), running short read transactions on the table effects. While it is
// open, no other connection's close is the last one, which would
// checkpoint the WAL (and so put back on the disk what a failed fsync
// dropped from it).
func pcReader(ctx context.Context, db *sql.DB, stop <-chan struct{}) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return
	}
	defer conn.Close()
	for i := 0; !isClosed(stop); i++ {
		var n int
		if _, err := conn.ExecContext(ctx, `BEGIN`); err == nil {
			_ = conn.QueryRowContext(ctx, `SELECT count(*) FROM effects`).Scan(&n)
			time.Sleep(time.Duration(i%3) * time.Millisecond)
			_, _ = conn.ExecContext(ctx, `COMMIT`)
		}
		time.Sleep(time.Millisecond)
	}
}

// pcCheck asks s for every acknowledged ID again. again: accepted again
// (Claim first, a lease or a Work granted, a request run again); lost:
// acknowledged but not refused as done in another way (a confirmation
// taken back to a lease still held, a committed work's effect missing, a
// request's answer not replayed as it was kept); errs: calls that
// failed. send is the middleware on s (idempotencyFront), for the http steps.
func pcCheck(ctx context.Context, s *sqlitestore.Store, db *sql.DB, send func(string) answer, acked map[string]pcKind) (again, lost []string, errs []error) {
	ids := slices.Sorted(maps.Keys(acked))
	var mu sync.Mutex
	check := func(id string) error {
		var a, l bool
		fp := faultFingerprint(id)
		switch acked[id] {
		case pcHTTP:
			// Asked again, the request is answered from its record: the
			// body of the one charge kept. Run again, it is accepted
			// again; anything else, lost.
			ans := send(id)
			if ans.status == http.StatusServiceUnavailable {
				return fmt.Errorf("%w: 503 %s", sqlitestore.ErrUnavailable, problemType(ans.body))
			}
			// The charges kept, and the body of the one when one is.
			var kept int
			var body sql.NullString
			if err := db.QueryRowContext(ctx, `SELECT count(*), max(body) FROM charges WHERE ref = ?`, id).Scan(&kept, &body); err != nil {
				return err
			}
			a = ans.status == http.StatusCreated && !ans.replayed || kept > 1
			l = !a && (ans.status != http.StatusCreated || kept != 1 || body.String != ans.body)
		case pcClaim:
			first, err := s.Claim(ctx, id, time.Now().Add(time.Hour))
			if err != nil {
				return err
			}
			a = first
		case pcRecord:
			r, err := s.AcquireRecord(ctx, id, time.Minute, fp)
			if err != nil {
				return err
			}
			a, l = r.State == replay.LeaseAcquired, r.State != replay.LeaseDone
		case pcWork:
			r, w, err := s.AcquireWork(ctx, id, time.Minute, fp)
			if err != nil {
				return err
			}
			if w != nil {
				w.Rollback(ctx)
			}
			a, l = w != nil, r.State != replay.LeaseDone && w == nil
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE id = ?`, id).Scan(&n); err != nil {
				return err
			}
			l = l || n != 1
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case a:
			again = append(again, id)
		case l:
			lost = append(lost, id)
		}
		return nil
	}
	// A call refused (the store repairing after the cut's I/O errors, a
	// new connection's pragma meeting a lock) consumed nothing, and is
	// tried again until pcPatience has passed: the question is what the
	// file holds. A call whose outcome is unknown may have taken the ID
	// again, and asking again would hide it: it is an error.
	deadline := time.Now().Add(pcPatience)
	errs = faultEach(ids, func(id string) (err error) {
		for {
			if err = check(id); err == nil || pcUnknownOutcome(err) || time.Now().After(deadline) {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	slices.Sort(again)
	slices.Sort(lost)
	return again, lost, errs
}

// pcUnknownOutcome reports whether a check's failed call may have acted:
// it ran out of its deadline, or the middleware's commit outcome is
// unknown.
func pcUnknownOutcome(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), idempotency.ProblemOutcomeUnknown)
}

// pcAfterCut builds a store on f after a cut and asks it for every ID in
// acked (pcCheck), adding what it found to tot. It returns New's error:
// ErrForgotten, counted as refused, then names how many acknowledged IDs
// the file lacks (read with SQL).
func pcAfterCut(t *testing.T, f pcFile, acked map[string]pcKind, tot *pcTotals) (again, lost []string, errs []error, err error) {
	ctx := context.Background()
	db := f.open(t)
	defer db.Close()
	// A minute a call: a check that ran out of time has an unknown
	// outcome (pcUnknownOutcome), which a loaded machine must not make.
	opts := pcOptions()
	opts.Timeout = time.Minute
	s, err := pcNew(ctx, db, opts)
	if errors.Is(err, sqlitestore.ErrForgotten) {
		tot.refused++
		missing, merr := pcMissing(ctx, db, acked)
		tot.missingRefused += missing
		return nil, nil, nil, fmt.Errorf("%w; %d of %d acknowledged IDs missing (read with SQL: %v)", err, missing, len(acked), merr)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	defer s.Close()
	again, lost, errs = pcCheck(ctx, s, db, idempotencyFront(t, s, &chargeApp{}), acked)
	tot.checked += len(acked)
	tot.again += len(again)
	tot.lost += len(lost)
	tot.checkErrs += len(errs)
	return again, lost, errs, nil
}

// pcMissing counts the acknowledged IDs whose row is not done (claimed or
// confirmed) in the database, read with plain SQL (for a database New
// refuses).
func pcMissing(ctx context.Context, db *sql.DB, acked map[string]pcKind) (int, error) {
	missing := 0
	for id, kind := range acked {
		// The middleware's record is under a key derived from the
		// caller and the Idempotency-Key: its charge stands for it.
		query, arg := `SELECT count(*) FROM charges WHERE ref = ?`, any(id)
		if kind != pcHTTP {
			prefix := sqlitestore.DefaultPrefix
			key := binary.BigEndian.AppendUint16(nil, uint16(len(prefix)))
			query, arg = `SELECT count(*) FROM main.`+sqlitestore.DefaultTable+` WHERE key = ? AND state IN ('c', 'd')`, append(append(key, prefix...), id...)
		}
		var n int
		if err := db.QueryRowContext(ctx, query, arg).Scan(&n); err != nil {
			return 0, err
		}
		if n == 0 {
			missing++
		}
	}
	return missing, nil
}

// pcTotals adds up a test's rounds.
type pcTotals struct {
	rounds, acked, checked, again, lost, refused, missingRefused, checkErrs, unavailable int
	http                                                                                 int // acknowledged requests through the middleware
	bad                                                                                  []string
}

func (c *pcTotals) addAcked(acked map[string]pcKind) {
	c.acked += len(acked)
	for _, k := range acked {
		if k == pcHTTP {
			c.http++
		}
	}
}

func (c pcTotals) String() string {
	return fmt.Sprintf("%d rounds: %d acknowledged (%d of them requests through the idempotency middleware), %d acknowledged IDs checked after the cuts, %d accepted again, %d otherwise lost, %d New refused (ErrForgotten; %d acknowledged IDs missing from those files), %d check calls failed, %d workload calls unavailable until the cut was seen (those the cut failed included)",
		c.rounds, c.acked, c.http, c.checked, c.again, c.lost, c.refused, c.missingRefused, c.checkErrs, c.unavailable)
}

// pcFile is a database file on the crash VFS.
type pcFile struct {
	v       *crashVFS
	path    string
	pragmas []Pragma
}

func (f pcFile) open(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver.SQLName, f.v.DSN(driver, f.path, f.pragmas))
	must(t, err)
	return db
}

// newPCFile makes a database file on v with the store's table, the app's
// table effects and chargeApp's table charges.
func newPCFile(t *testing.T, v *crashVFS, pragmas []Pragma) pcFile {
	t.Helper()
	f := pcFile{v, filepath.Join(t.TempDir(), "replay.db"), pragmas}
	ctx := context.Background()
	db := f.open(t)
	defer db.Close()
	must(t, sqlitestore.Migrate(ctx, db, ""))
	mustExec(t, ctx, db, `CREATE TABLE effects (id TEXT PRIMARY KEY)`)
	mustExec(t, ctx, db, chargesSchema)
	return f
}

// pcAutocheckpoint16 is Safe with a checkpoint every 16 pages: the
// database file's own syncs and the WAL's restarts happen within the short
// rounds. pcDeleteExtra is journal_mode=DELETE, which the store accepts
// with EXTRA only (New refuses FULL there, see TestPowerCut).
var (
	pcAutocheckpoint16 = append(slices.Clone(Safe), Pragma{"wal_autocheckpoint", "16"})
	pcDeleteExtra      = []Pragma{{"journal_mode", "DELETE"}, {"synchronous", "EXTRA"}, {"busy_timeout", "5000"}}
)

// pcPatience bounds a wait for what a workload does (a Sync, the power
// cut, an answer): a bound for a store or a VFS that hangs, which a slow
// one on a loaded machine does not reach.
const pcPatience = 2 * time.Minute

// pcNew is New, called again while it answers ErrUnavailable (on a loaded
// machine its first write may outlast pcOptions' Timeout) until
// pcPatience has passed.
func pcNew(ctx context.Context, db *sql.DB, opts sqlitestore.Options) (*sqlitestore.Store, error) {
	deadline := time.Now().Add(pcPatience)
	for {
		s, err := sqlitestore.New(ctx, db, opts)
		if !errors.Is(err, sqlitestore.ErrUnavailable) || errors.Is(err, sqlitestore.ErrForgotten) || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pcWait polls cond every 2 ms for up to d and reports whether it held.
func pcWait(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// TestPowerCut: for each journal mode the store accepts with FULL, 6
// rounds on one file of the workload, each ended by a power cut at a
// random Sync (every unsynced write dropped, or every other round torn);
// a new store is then asked for every ID acknowledged in any round so
// far, and none may be accepted again (New refusing with ErrForgotten
// counts as refused, and the next rounds take a fresh file).
//
// One more case runs journal_mode=DELETE with the VFS's lazyUnlink: a
// deleted rollback journal comes back after a cut unless its directory
// was synced, which SQLite does with synchronous=EXTRA, not FULL (New
// refuses DELETE with FULL: TestNew/refuses).
func TestPowerCut(t *testing.T) {
	seed := pcSeed(t)
	cases := []struct {
		name       string
		pragmas    []Pragma
		lazyUnlink bool
	}{
		{"WAL FULL", Safe, false},
		{"WAL FULL autocheckpoint 16", pcAutocheckpoint16, false},
		{"DELETE EXTRA", pcDeleteExtra, false},
		{"TRUNCATE FULL", With("journal_mode", "TRUNCATE"), false},
		{"PERSIST FULL", With("journal_mode", "PERSIST"), false},
		{"DELETE EXTRA, unlinks lost by a cut", pcDeleteExtra, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			tot := powerCutRounds(t, tc.pragmas, tc.lazyUnlink, r)
			t.Logf("%s: %v", tc.name, tot)
			if tot.acked == 0 {
				t.Error("nothing acknowledged in any round")
			}
			if len(tot.bad) > 0 {
				t.Errorf("%d workload calls failed with an error that is not ErrUnavailable, e.g. %q", len(tot.bad), tot.bad[:min(3, len(tot.bad))])
			}
			if tot.again > 0 || tot.lost > 0 {
				t.Errorf("%d acknowledged IDs accepted again and %d otherwise lost after power cuts; want 0", tot.again, tot.lost)
			}
			if tot.checkErrs > 0 {
				t.Errorf("%d acknowledged IDs the stores after the cuts did not answer for within %v", tot.checkErrs, pcPatience)
			}
		})
	}
}

func powerCutRounds(t *testing.T, pragmas []Pragma, lazyUnlink bool, r *rand.Rand) pcTotals {
	const rounds = 6
	ctx := context.Background()
	v := newCrashVFS(t)
	v.lazyUnlink = lazyUnlink
	var tot pcTotals
	files := 0
	newFile := func() pcFile {
		files++
		return newPCFile(t, v, pragmas)
	}
	f := newFile()
	acked := map[string]pcKind{} // acknowledged on f, in any round
	for round := range rounds {
		tot.rounds++
		db := f.open(t)
		s, err := pcNew(ctx, db, pcOptions())
		if err != nil {
			db.Close()
			t.Fatalf("round %d: New before the workload: %v", round, err)
		}
		mode := crashMode(round % 2)
		after, keep := r.IntN(100), r.IntN(2) == 0
		v.ArmCut(after, keep)
		l, abandon := pcStart(ctx, s, db, idempotencyFront(t, s, &chargeApp{}), fmt.Sprintf("f%d-r%d-", files, round))
		if !pcWait(pcPatience, v.Dead) {
			v.CutNow()
			t.Logf("round %d: no cut after %v (%d syncs): cut now", round, pcPatience, v.Stats().Syncs)
		}
		unavailBefore, sample := l.errCount()
		abandon()
		cut, err := v.PowerCut(mode, r)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		tot.addAcked(l.acked)
		tot.unavailable += unavailBefore
		tot.bad = append(tot.bad, l.bad...)
		for id, k := range l.acked {
			acked[id] = k
		}

		again, lost, errs, err := pcAfterCut(t, f, acked, &tot)
		switch {
		case errors.Is(err, sqlitestore.ErrForgotten):
			t.Logf("round %d (%v, %s): New refused: %v; a fresh file for the next rounds", round, mode, strings.Join(v.Events(), "; "), err)
			f, acked = newFile(), map[string]pcKind{}
			continue
		case err != nil:
			t.Errorf("round %d (%v, %s): New after the cut: %v (a fresh file for the next rounds)", round, mode, strings.Join(v.Events(), "; "), err)
			f, acked = newFile(), map[string]pcKind{}
			continue
		}
		t.Logf("round %d (%v; %s; %v): %d calls, %d acknowledged, %d unavailable until the cut (%s); %d acknowledged so far: %d accepted again %q, %d lost %q, %d check errors %v",
			round, mode, strings.Join(v.Events(), "; "), cut, l.calls, len(l.acked), unavailBefore, sample, len(acked),
			len(again), again[:min(3, len(again))], len(lost), lost[:min(3, len(lost))], len(errs), errors.Join(errs[:min(2, len(errs))]...))
		for _, id := range slices.Concat(again, lost) {
			delete(acked, id) // counted once
		}
	}
	return tot
}

// TestPowerCutNormal measures synchronous=NORMAL (WAL,
// Options.AllowNormalSync) under power cuts, with TestPowerCut's
// workload, 6 rounds per case on fresh files: the cut strikes a Sync (a
// checkpoint or a restarted WAL's header) in the first 3 rounds, and a
// random moment, mostly while the last commits are unsynced in the WAL,
// in the last 3.
//
// A simulated cut leaves the kernel's boot id as it was, so the sidecar as
// it was at the cut is put back with its boot rewritten (the abandoned
// store's Close, which a process without power never runs, may clear it).
// New must refuse with ErrForgotten; the acknowledged IDs missing from the
// file are what NORMAL lost (not asserted); after Rearm with a fence of
// an hour no acknowledged ID may be accepted again.
func TestPowerCutNormal(t *testing.T) {
	if _, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err != nil {
		t.Skip("no kernel boot id on this system: the store cannot tell a crash of the machine")
	}
	seed := pcSeed(t)
	normal := With("synchronous", "NORMAL")
	cases := []struct {
		name    string
		pragmas []Pragma
		syncs   int // the cut at a Sync strikes one of the first syncs
	}{
		{"WAL NORMAL", normal, 6},
		{"WAL NORMAL autocheckpoint 16", append(slices.Clone(normal), Pragma{"wal_autocheckpoint", "16"}), 100},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 100+uint64(i)))
			tot := powerCutNormalRounds(t, tc.pragmas, tc.syncs, r)
			t.Logf("%s: %v", tc.name, tot)
			if tot.acked == 0 {
				t.Error("nothing acknowledged in any round")
			}
			if len(tot.bad) > 0 {
				t.Errorf("%d calls failed with an error that is not ErrUnavailable, e.g. %q", len(tot.bad), tot.bad[:min(3, len(tot.bad))])
			}
			if tot.bootSet != tot.rounds {
				t.Errorf("the sidecar named the boot id at the cut in %d of %d rounds; want every round (a NORMAL store ran)", tot.bootSet, tot.rounds)
			}
			if tot.refused != tot.bootSet {
				t.Errorf("New refused with ErrForgotten after %d of the %d cuts made while a NORMAL store ran; want every one", tot.refused, tot.bootSet)
			}
			if tot.again > 0 {
				t.Errorf("%d acknowledged IDs accepted again after Rearm; want 0", tot.again)
			}
		})
	}
}

// pcNormalTotals adds up TestPowerCutNormal's rounds.
type pcNormalTotals struct {
	rounds, acked, lost, bootSet, clearedAfterCut, refused, refusedBoot int
	checked, again, fenced, refusedOtherwise, checkErrs                 int
	bad                                                                 []string
}

func (c pcNormalTotals) String() string {
	return fmt.Sprintf("%d rounds: %d acknowledged, %d of them lost from the file (missing when read with SQL after the cut); the sidecar named the boot id at %d cuts (the abandoned store's Close after the cut cleared it in %d rounds, put back); New refused (ErrForgotten) %d times (%d for the boot id, the others for another loss it found, e.g. the file older than the sidecar's sequence); after Rearm (fence 1 h): %d acknowledged IDs asked, %d accepted again, %d refused as fenced, %d refused otherwise, %d failed otherwise",
		c.rounds, c.acked, c.lost, c.bootSet, c.clearedAfterCut, c.refused, c.refusedBoot, c.checked, c.again, c.fenced, c.refusedOtherwise, c.checkErrs)
}

// pcSidecarBoot reads the sidecar of the database file path: its bytes,
// and its boot id.
func pcSidecarBoot(path string) ([]byte, string, error) {
	b, err := os.ReadFile(sidecarOf(path))
	if err != nil {
		return nil, "", err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, "", err
	}
	boot, _ := m["boot"].(string)
	return b, boot, nil
}

// pcReboot puts back the sidecar b of the database file path, its boot id
// (when it names one) replaced by another, as a reboot leaves it.
func pcReboot(path string, b []byte) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if boot, _ := m["boot"].(string); boot != "" {
		m["boot"] = "a-boot-before-the-power-cut"
		var err error
		if b, err = json.Marshal(m); err != nil {
			return err
		}
	}
	return os.WriteFile(sidecarOf(path), b, 0o644)
}

func powerCutNormalRounds(t *testing.T, pragmas []Pragma, syncs int, r *rand.Rand) pcNormalTotals {
	const rounds = 6
	ctx := context.Background()
	opts := pcOptions()
	opts.AllowNormalSync = true
	v := newCrashVFS(t)
	var tot pcNormalTotals
	for round := range rounds {
		tot.rounds++
		f := newPCFile(t, v, pragmas)
		db := f.open(t)
		s, err := sqlitestore.New(ctx, db, opts)
		if err != nil {
			db.Close()
			t.Fatalf("round %d: New before the workload: %v", round, err)
		}
		mode := crashMode(round % 2)
		atSync := round < rounds/2
		when, wait := "at a random moment", time.Duration(20+r.IntN(300))*time.Millisecond
		if atSync {
			when, wait = "at a Sync", 3*time.Second
			v.ArmCut(r.IntN(syncs), r.IntN(2) == 0)
		}
		l, abandon := pcStart(ctx, s, db, nil, fmt.Sprintf("r%d-", round))
		if !pcWait(wait, v.Dead) {
			if atSync {
				t.Logf("round %d: no cut after %v (%d syncs): cut now", round, wait, v.Stats().Syncs)
			}
			v.CutNow()
		}
		// The sidecar as the disk holds it at the cut.
		side, boot, err := pcSidecarBoot(f.path)
		if err != nil {
			t.Fatalf("round %d: the sidecar at the cut: %v", round, err)
		}
		unavailBefore, sample := l.errCount()
		abandon()
		if _, after, err := pcSidecarBoot(f.path); err == nil && boot != "" && after == "" {
			tot.clearedAfterCut++
		}
		cut, err := v.PowerCut(mode, r)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		events := strings.Join(v.Events(), "; ")
		if boot != "" {
			tot.bootSet++
		}
		if err := pcReboot(f.path, side); err != nil {
			t.Fatalf("round %d: rewriting the sidecar: %v", round, err)
		}
		tot.acked += len(l.acked)
		tot.bad = append(tot.bad, l.bad...)

		db = f.open(t)
		s, err = sqlitestore.New(ctx, db, opts)
		newErr := err
		switch {
		case errors.Is(err, sqlitestore.ErrForgotten):
			tot.refused++
			if strings.Contains(err.Error(), "synchronous=NORMAL") {
				tot.refusedBoot++
			}
		case err == nil:
			s.Close()
			t.Errorf("round %d (%v; %s): New after the cut and the reboot served (the sidecar's boot at the cut %q)", round, mode, events, boot)
		default:
			t.Errorf("round %d (%v; %s): New after the cut: %v", round, mode, events, err)
		}
		missing, err := pcMissing(ctx, db, l.acked)
		if err != nil {
			t.Fatalf("round %d: reading the acknowledged IDs with SQL: %v", round, err)
		}
		tot.lost += missing

		// The careless operator.
		if err := sqlitestore.Rearm(ctx, db, "", time.Hour); err != nil {
			t.Fatalf("round %d: Rearm: %v", round, err)
		}
		s, err = sqlitestore.New(ctx, db, opts)
		if err != nil {
			db.Close()
			t.Fatalf("round %d: New after Rearm: %v", round, err)
		}
		c := pcFencedCheck(ctx, s, l.acked)
		s.Close()
		db.Close()
		tot.checked += len(l.acked)
		tot.again += len(c.again)
		tot.fenced += c.fenced
		tot.refusedOtherwise += c.refused
		tot.checkErrs += len(c.errs)
		tot.bad = append(tot.bad, c.bad...)
		t.Logf("round %d (%v, cut %s; %s; %v): %d calls, %d acknowledged, %d unavailable until the cut (%s); sidecar's boot at the cut set %v; New: %v; %d acknowledged IDs missing from the file; after Rearm: %d accepted again %q, %d fenced, %d refused otherwise, %d failed otherwise %v",
			round, mode, when, events, cut, l.calls, len(l.acked), unavailBefore, sample, boot != "", newErr, missing,
			len(c.again), c.again[:min(3, len(c.again))], c.fenced, c.refused, len(c.errs), errors.Join(c.errs[:min(2, len(c.errs))]...))
	}
	return tot
}

// pcFenced is what pcFencedCheck found.
type pcFenced struct {
	again   []string // accepted again: Claim first, a lease or a Work granted
	fenced  int      // refused with the fence of Rearm
	refused int      // refused otherwise: Claim not first, a lease refused or done
	errs    []error  // ErrUnavailable, not the fence's
	bad     []string // errors that are not ErrUnavailable
}

// pcFencedCheck asks s, built after Rearm, for every acknowledged ID
// again.
func pcFencedCheck(ctx context.Context, s *sqlitestore.Store, acked map[string]pcKind) pcFenced {
	var (
		mu sync.Mutex
		c  pcFenced
	)
	faultEach(slices.Sorted(maps.Keys(acked)), func(id string) error {
		var again bool
		var err error
		fp := faultFingerprint(id)
		switch acked[id] {
		case pcClaim:
			again, err = s.Claim(ctx, id, time.Now().Add(time.Hour))
		case pcRecord:
			var r replay.Record
			r, err = s.AcquireRecord(ctx, id, time.Minute, fp)
			again = err == nil && r.State == replay.LeaseAcquired
		case pcWork:
			var w replay.Work
			_, w, err = s.AcquireWork(ctx, id, time.Minute, fp)
			if w != nil {
				w.Rollback(ctx)
			}
			again = err == nil && w != nil
		}
		var retry interface{ RetryAt() time.Time }
		mu.Lock()
		defer mu.Unlock()
		switch {
		case again:
			c.again = append(c.again, id)
		case err == nil:
			c.refused++
		case errors.As(err, &retry) && errors.Is(err, sqlitestore.ErrUnavailable):
			c.fenced++
		case errors.Is(err, sqlitestore.ErrUnavailable):
			c.errs = append(c.errs, fmt.Errorf("%s: %w", id, err))
		default:
			c.bad = append(c.bad, fmt.Sprintf("%s %s: %v", acked[id], id, err))
		}
		return nil
	})
	slices.Sort(c.again)
	return c
}

// TestFsyncErrorThenPowerCut: TestPowerCut's workload on a fresh file, 6
// rounds per case, meets one fsync failure with Linux's semantics (the
// writes since the file's last Sync dropped from the disk, still read from
// the page cache) at any file's Sync, at the WAL's Sync behind a NORMAL
// commit, or at the database file's Sync in a checkpoint; the store keeps
// serving, the power is cut 10 to 60 Syncs later, and a new store must
// refuse every ID acknowledged before and after the failure. With errseq
// every other handle open at the failure also gets the error once.
//
// A store that went on appending to the WAL behind the hole the dropped
// NORMAL frames leave would lose every later commit to the cut (recovery
// stops at the hole): it must first put the committed pages back.
func TestFsyncErrorThenPowerCut(t *testing.T) {
	seed := pcSeed(t)
	// The rounds of a case take its targets in turn.
	anyFile := pcTarget{"", 0}
	behindNormal := pcTarget{"-wal", 2}
	dbFile := pcTarget{"replay.db", 0}
	cases := []struct {
		name    string
		pragmas []Pragma
		errseq  bool
		targets []pcTarget
	}{
		{"WAL FULL", Safe, false, []pcTarget{anyFile, behindNormal}},
		{"WAL FULL errseq", Safe, true, []pcTarget{behindNormal, anyFile}},
		{"WAL FULL autocheckpoint 16", pcAutocheckpoint16, false, []pcTarget{dbFile, behindNormal}},
		{"DELETE EXTRA", pcDeleteExtra, false, []pcTarget{anyFile}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			tot := fsyncErrorRounds(t, tc.pragmas, tc.errseq, tc.targets, r)
			t.Logf("%s: %v", tc.name, tot)
			if tot.again > 0 || tot.lost > 0 {
				t.Errorf("%d acknowledged IDs accepted again and %d otherwise lost after an fsync failure and a power cut; want 0", tot.again, tot.lost)
			}
			if tot.checkErrs > 0 {
				t.Errorf("%d acknowledged IDs the stores after the cuts did not answer for within %v", tot.checkErrs, pcPatience)
			}
			if len(tot.bad) > 0 {
				t.Errorf("%d workload calls failed with an error that is not ErrUnavailable, e.g. %q", len(tot.bad), tot.bad[:min(3, len(tot.bad))])
			}
		})
	}
}

// TestFsyncErrorAfterAPartialCheckpoint pins the database file's loss
// of TestFsyncErrorThenPowerCut without its randomness: pages a partial
// checkpoint (a reader's snapshot held it back) wrote unsynced are dropped
// by the next checkpoint's failed fsync, and no later checkpoint copies
// them again, so after a cut every acknowledged claim must still be
// refused by a store that serves (the claims before the snapshot, "a-",
// sit on leaf pages no later claim, "z-", writes again). The failing
// fsync is a checkpoint of the store's writer, or Close's (a new store
// then serves on the pool).
func TestFsyncErrorAfterAPartialCheckpoint(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		pages   string
		atClose bool
	}{{"16", false}, {"1000", false}, {"1000", true}} {
		name := "wal_autocheckpoint " + tc.pages
		if tc.atClose {
			name += ", the fsync of Close's checkpoint"
		}
		t.Run(name, func(t *testing.T) {
			v := newCrashVFS(t)
			f := newPCFile(t, v, append(slices.Clone(Safe), Pragma{"wal_autocheckpoint", tc.pages}))
			db := f.open(t)
			rep := newRepairs()
			opts := pcOptions()
			opts.Observer = rep.observe
			s, err := pcNew(ctx, db, opts)
			if err != nil {
				db.Close()
				t.Fatal(err)
			}
			var acked []string
			claim := func(id string) {
				t.Helper()
				first, err := s.Claim(ctx, id, time.Now().Add(time.Hour))
				switch {
				case errors.Is(err, sqlitestore.ErrUnavailable):
				case err != nil:
					t.Fatalf("Claim(%s): %v", id, err)
				case !first:
					t.Fatalf("Claim(%s): a fresh ID not first", id)
				default:
					acked = append(acked, id)
				}
			}
			for i := range 400 {
				claim(fmt.Sprintf("a-%04d", i))
			}
			reader, err := db.Conn(ctx)
			must(t, err)
			var n int
			mustExec(t, ctx, reader, `BEGIN`)
			must(t, reader.QueryRowContext(ctx, `SELECT count(*) FROM effects`).Scan(&n))
			for i := range 1200 { // past the checkpoint of wal_autocheckpoint 1000
				claim(fmt.Sprintf("z-%05d", i))
			}
			mustExec(t, ctx, reader, `COMMIT`)
			reader.Close()
			failed := v.Stats().FailedSyncs
			v.ArmSyncFailure("replay.db", 0, 0)
			if tc.atClose {
				s.Close()
				if v.Stats().FailedSyncs == failed {
					t.Fatal("Close's checkpoint synced the database file without the failure")
				}
				if s, err = pcNew(ctx, db, opts); err != nil {
					t.Fatalf("New after Close: %v", err)
				}
			}
			for i := 1200; i < 6000; i++ {
				claim(fmt.Sprintf("z-%05d", i))
			}
			if v.Stats().FailedSyncs == failed {
				t.Fatal("no fsync of the database file failed")
			}
			// The store refused from the failure on, and repaired: it
			// serves again, and what it acknowledges now holds too.
			rep.wait(t)
			if rep.count() == 0 {
				t.Fatal("no repair started after the failed fsync")
			}
			for i := 6000; i < 6200; i++ {
				claim(fmt.Sprintf("z-%05d", i))
			}
			v.CutNow()
			s.Close()
			db.Close()
			cut, err := v.PowerCut(crashDrop, nil)
			must(t, err)
			db = f.open(t)
			defer db.Close()
			// The store's Close after the cut met I/O errors: the next New
			// repairs first (the machine did not restart: the sidecar
			// names this boot).
			rep = newRepairs()
			opts.Observer = rep.observe
			s, err = pcNew(ctx, db, opts)
			if err != nil {
				t.Fatalf("New after the cut (%s; %v): %v", strings.Join(v.Events(), "; "), cut, err)
			}
			defer s.Close()
			rep.wait(t)
			var again []string
			for _, id := range acked {
				first, err := s.Claim(ctx, id, time.Now().Add(time.Hour))
				if err != nil {
					t.Fatalf("Claim(%s) after the cut: %v", id, err)
				}
				if first {
					again = append(again, id)
				}
			}
			t.Logf("%d claims acknowledged; %s; %v", len(acked), strings.Join(v.Events(), "; "), cut)
			if len(again) > 0 {
				t.Errorf("%d of %d acknowledged claims accepted again after the cut, e.g. %q; want 0", len(again), len(acked), again[:min(3, len(again))])
			}
		})
	}
}

// pcTarget is the Sync an fsync failure strikes (see
// crashVFS.ArmSyncFailure): of a file whose path ends with suffix, and
// behind at least minCommits WAL commits.
type pcTarget struct {
	suffix     string
	minCommits int
}

func (p pcTarget) String() string {
	switch {
	case p.minCommits > 1:
		return "the WAL's fsync behind a NORMAL commit"
	case p.suffix == "":
		return "any file's fsync"
	}
	return "the fsync of *" + p.suffix
}

func fsyncErrorRounds(t *testing.T, pragmas []Pragma, errseq bool, targets []pcTarget, r *rand.Rand) pcTotals {
	const rounds = 6
	ctx := context.Background()
	v := newCrashVFS(t)
	v.errseq = errseq
	var tot pcTotals
	for round := range rounds {
		tot.rounds++
		f := newPCFile(t, v, pragmas)
		db := f.open(t)
		s, err := pcNew(ctx, db, pcOptions())
		if err != nil {
			db.Close()
			t.Fatalf("round %d: New: %v", round, err)
		}
		failedBefore := v.Stats().FailedSyncs
		target := targets[round%len(targets)]
		v.ArmSyncFailure(target.suffix, r.IntN(40), target.minCommits)
		l, abandon := pcStart(ctx, s, db, idempotencyFront(t, s, &chargeApp{}), fmt.Sprintf("r%d-", round))
		failed := pcWait(pcPatience, func() bool { return v.Stats().FailedSyncs > failedBefore })
		failedAt := v.Stats().LastFailure
		more := 10 + r.IntN(50)
		syncs := v.Stats().Syncs
		if failed && !pcWait(pcPatience, func() bool { return v.Stats().Syncs >= syncs+more }) {
			t.Logf("round %d: %d of the %d Syncs after the failure within %v: cut now", round, v.Stats().Syncs-syncs, more, pcPatience)
		}
		v.CutNow()
		unavailBefore, sample := l.errCount()
		abandon()
		st := v.Stats()
		events := strings.Join(v.Events(), "; ")
		cut, err := v.PowerCut(crashDrop, r)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !failed {
			t.Errorf("round %d: no fsync failure (%v) within %v (%d syncs)", round, target, pcPatience, st.Syncs)
		}
		after := 0
		for _, at := range l.ackedAt {
			if at.After(failedAt) {
				after++
			}
		}
		tot.addAcked(l.acked)
		tot.unavailable += unavailBefore
		tot.bad = append(tot.bad, l.bad...)

		again, lost, errs, err := pcAfterCut(t, f, l.acked, &tot)
		switch {
		case errors.Is(err, sqlitestore.ErrForgotten):
			t.Logf("round %d (%v: %s; %v): %d calls, %d acknowledged (%d after the failure), %d unavailable until the cut (%s); New refused: %v",
				round, target, events, cut, l.calls, len(l.acked), after, unavailBefore, sample, err)
			continue
		case err != nil:
			t.Errorf("round %d (%s): New after the cut: %v", round, events, err)
			continue
		}
		t.Logf("round %d (%v: %s; %v): %d calls, %d acknowledged (%d after the failure), %d unavailable until the cut (%s); after the cut: %d accepted again %q, %d lost %q, %d check errors %v",
			round, target, events, cut, l.calls, len(l.acked), after, unavailBefore, sample,
			len(again), again[:min(3, len(again))], len(lost), lost[:min(3, len(lost))], len(errs), errors.Join(errs[:min(2, len(errs))]...))
	}
	if errseq {
		t.Logf("errseq: %d fsync errors reported again to another handle", v.Stats().ErrseqRepeats)
	}
	return tot
}

// TestCrashVFS checks the simulation itself on a plain table: rows
// written with synchronous=OFF are lost by a cut; with FULL every
// committed row survives a cut at a random Sync (dropped or torn); after
// an fsync failure, a connection kept open loses no row committed after
// the failure, but for rows behind NORMAL commits.
func TestCrashVFS(t *testing.T) {
	seed := pcSeed(t)
	r := rand.New(rand.NewPCG(seed, 99))
	ctx := context.Background()

	// table makes a file with the table rows, synced (FULL).
	table := func(t *testing.T, v *crashVFS, journal string) string {
		path := filepath.Join(t.TempDir(), "plain.db")
		db := pcFile{v, path, With("journal_mode", journal)}.open(t)
		defer db.Close()
		mustExec(t, ctx, db, `CREATE TABLE rows (id INTEGER PRIMARY KEY, v BLOB)`)
		return path
	}
	// count returns the rows present among ids, after checking the file's
	// integrity.
	count := func(t *testing.T, v *crashVFS, path string, ids []int) int {
		t.Helper()
		db := pcFile{v, path, Safe}.open(t)
		defer db.Close()
		var ok string
		if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
			t.Errorf("integrity_check after the cut: %q, %v", ok, err)
		}
		n := 0
		for _, id := range ids {
			n += countRows(t, db, `SELECT count(*) FROM rows WHERE id = ?`, id)
		}
		return n
	}
	blob := make([]byte, 300)

	t.Run("synchronous OFF loses rows", func(t *testing.T) {
		for _, journal := range []string{"WAL", "DELETE"} {
			for _, closeFirst := range []bool{false, true} {
				v := newCrashVFS(t)
				path := table(t, v, journal)
				db := pcFile{v, path, []Pragma{{"journal_mode", journal}, {"synchronous", "OFF"}, {"busy_timeout", "5000"}}}.open(t)
				var ids []int
				for i := range 50 {
					mustExec(t, ctx, db, `INSERT INTO rows (id, v) VALUES (?, ?)`, i, blob)
					ids = append(ids, i)
				}
				if !closeFirst {
					v.CutNow()
				}
				db.Close()
				cut, err := v.PowerCut(crashDrop, r)
				must(t, err)
				n := count(t, v, path, ids)
				t.Logf("%s, OFF, closed before the cut %v: %d of %d committed rows survive (%v; %d syncs)", journal, closeFirst, n, len(ids), cut, v.Stats().Syncs)
				if n == len(ids) {
					t.Errorf("%s, synchronous=OFF: every row survived the cut: the VFS keeps unsynced writes", journal)
				}
			}
		}
	})

	t.Run("FULL keeps committed rows", func(t *testing.T) {
		for _, journal := range []string{"WAL", "DELETE"} {
			for _, mode := range []crashMode{crashDrop, crashTear} {
				for rep := range 3 {
					v := newCrashVFS(t)
					path := table(t, v, journal)
					db := pcFile{v, path, With("journal_mode", journal)}.open(t)
					v.ArmCut(10+r.IntN(60), r.IntN(2) == 0)
					var (
						mu   sync.Mutex
						ids  []int
						next atomic.Int64
						wg   sync.WaitGroup
					)
					for range 3 {
						wg.Go(func() {
							for !v.Dead() {
								id := int(next.Add(1))
								if _, err := db.ExecContext(ctx, `INSERT INTO rows (id, v) VALUES (?, ?)`, id, blob[:r2(id)]); err == nil {
									mu.Lock()
									ids = append(ids, id)
									mu.Unlock()
								}
							}
						})
					}
					wg.Wait()
					db.Close()
					cut, err := v.PowerCut(mode, r)
					must(t, err)
					n := count(t, v, path, ids)
					t.Logf("%s FULL %v #%d: %d of %d committed rows survive (%s; %v)", journal, mode, rep, n, len(ids), strings.Join(v.Events(), "; "), cut)
					if n != len(ids) {
						t.Errorf("%s FULL %v: %d committed rows lost", journal, mode, len(ids)-n)
					}
				}
			}
		}
	})

	// fsyncFailure commits rows through an fsync failure and a cut, every
	// other one with NORMAL when normal; it returns the rows committed with
	// FULL after the failure and how many of them survive.
	fsyncFailure := func(t *testing.T, journal string, normal bool) (int, int) {
		v := newCrashVFS(t)
		path := table(t, v, journal)
		db := pcFile{v, path, With("journal_mode", journal)}.open(t)
		defer db.Close()
		conn, err := db.Conn(ctx)
		must(t, err)
		// Another connection keeps the file (and its WAL index) open.
		other, err := db.Conn(ctx)
		must(t, err)
		must(t, other.PingContext(ctx))
		v.ArmSyncFailure("", 2+r.IntN(15), 0)
		var before, after []int
		var failures []string
		afterFail := 0
		for id := 0; afterFail < 30 && id < 1000; id++ {
			level := "FULL"
			if normal && id%2 == 0 {
				level = "NORMAL"
			}
			mustExec(t, ctx, conn, `PRAGMA synchronous = `+level)
			_, err := conn.ExecContext(ctx, `INSERT INTO rows (id, v) VALUES (?, ?)`, id, blob[:r2(id)])
			switch {
			case level == "NORMAL":
			case err != nil:
				failures = append(failures, err.Error())
			case v.Stats().FailedSyncs > 0:
				after = append(after, id)
			default:
				before = append(before, id)
			}
			if v.Stats().FailedSyncs > 0 {
				afterFail++
			}
		}
		v.CutNow()
		conn.Close()
		other.Close()
		db.Close()
		events := strings.Join(v.Events(), "; ")
		cut, err := v.PowerCut(crashDrop, r)
		must(t, err)
		nb, na := count(t, v, path, before), count(t, v, path, after)
		t.Logf("%s, every other commit NORMAL %v: %s; %d statements failed %q; committed with FULL before the failure %d (%d survive), after it %d (%d survive) (%v)",
			journal, normal, events, len(failures), failures[:min(2, len(failures))], len(before), nb, len(after), na, cut)
		if nb != len(before) {
			t.Errorf("%s: %d rows committed before the fsync failure lost", journal, len(before)-nb)
		}
		return len(after), na
	}

	t.Run("fsync failure, connection kept open", func(t *testing.T) {
		for _, journal := range []string{"WAL", "DELETE"} {
			for range 3 {
				committed, survive := fsyncFailure(t, journal, false)
				if committed == 0 {
					t.Errorf("%s: no row committed after the failure", journal)
				}
				if survive != committed {
					t.Errorf("%s: %d of %d rows committed after the fsync failure lost by the cut", journal, committed-survive, committed)
				}
			}
		}
	})

	// The hazard of TestFsyncErrorThenPowerCut (commits appended behind the
	// hole a failed fsync leaves after NORMAL commits are lost to a cut):
	// the VFS must reproduce it, or it could not show the store's defence.
	t.Run("fsync failure after NORMAL commits loses later FULL commits", func(t *testing.T) {
		lost, total := 0, 0
		for range 3 {
			committed, survive := fsyncFailure(t, "WAL", true)
			lost += committed - survive
			total += committed
		}
		t.Logf("WAL, every other commit NORMAL: %d of %d rows committed with FULL after the failure lost by the cut", lost, total)
		if lost == 0 {
			t.Errorf("no row committed with FULL after the failure was lost: the VFS does not reproduce the hole that a failed fsync leaves behind NORMAL commits")
		}
	})
}

// r2 varies the rows' sizes, so that commits write different numbers of
// pages and frames.
func r2(id int) int { return 50 + id*37%250 }

// TestCommitFsyncFailureIsOutcomeUnknown: the fsync of a transactional
// request's COMMIT fails (Linux semantics: the WAL's unsynced frames
// dropped from the disk, kept in the page cache). Whether the charge was
// kept is then unknown to the store, and the client is told exactly
// that — 503 with the outcome-unknown problem, never success and never
// the outage's 503. Its retry with the same key learns the outcome — the
// charge replayed if it was kept, else run — and the charge is kept
// once. (Over MCP the same Commit error is 1028 with a retry hint of
// 1 s, whatever the store: mcptoken's and mcp's tests.)
func TestCommitFsyncFailureIsOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after int // the -wal Syncs that succeed before the failing one
	}{
		{"the request's own commit", 0},
		{"a commit after another", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newCrashVFS(t)
			f := newPCFile(t, v, Safe)
			db := f.open(t)
			t.Cleanup(func() { db.Close() })
			s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
			app := &chargeApp{}
			send := idempotencyFront(t, s, app)
			if a := send("warm-up"); a.status != http.StatusCreated {
				t.Fatalf("warm-up: %d %s", a.status, a.body)
			}
			refs := []string{"charge-1", "charge-2"}[:tc.after+1]
			v.ArmSyncFailure("-wal", tc.after, 0)
			var unknown []string
			for _, ref := range refs {
				a := send(ref)
				switch {
				case a.status == http.StatusServiceUnavailable && problemType(a.body) == idempotency.ProblemOutcomeUnknown:
					unknown = append(unknown, ref)
				case a.status != http.StatusCreated:
					t.Fatalf("%s: %d %s; want 201, or 503 outcome unknown", ref, a.status, a.body)
				}
			}
			if st := v.Stats(); st.FailedSyncs != 1 || len(unknown) != 1 || unknown[0] != refs[tc.after] {
				t.Fatalf("%d failed fsyncs; told outcome unknown: %v, want [%s]", st.FailedSyncs, unknown, refs[tc.after])
			}
			ref := unknown[0]
			var last answer
			for deadline := time.Now().Add(30 * time.Second); ; {
				if last = send(ref); last.status != http.StatusServiceUnavailable && last.status != http.StatusConflict {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: retries still answered %d %s after 30 s", ref, last.status, last.body)
				}
			}
			got := charges(t, db)
			if last.status != http.StatusCreated || len(got[ref]) != 1 || got[ref][0] != last.body {
				t.Fatalf("%s: the retry got %d %q (replayed %v); charges kept %q: want 201 with the one charge kept", ref, last.status, last.body, last.replayed, got[ref])
			}
			for _, r := range refs {
				if len(got[r]) != 1 {
					t.Errorf("%s: %d charges kept, want 1", r, len(got[r]))
				}
			}
			t.Logf("%s: retried after outcome unknown; replayed %v (%d runs)", ref, last.replayed, app.runs.Load())
		})
	}
}

// charges returns the committed charges' bodies by reference.
func charges(t testing.TB, db *sql.DB) map[string][]string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT ref, body FROM charges`)
	must(t, err)
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var ref, body string
		must(t, rows.Scan(&ref, &body))
		out[ref] = append(out[ref], body)
	}
	must(t, rows.Err())
	return out
}

// problemType returns the type of an RFC 9457 problem body, or "".
func problemType(body string) string {
	var doc struct{ Type string }
	json.Unmarshal([]byte(body), &doc)
	return doc.Type
}
