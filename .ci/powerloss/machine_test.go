// Package powerloss cuts the power under each store: the server's data
// directory (Redis, Valkey, PostgreSQL) or the database file (SQLite, whose
// app process is what dies) lives on a dropfs mount, the process is
// SIGKILLed and everything it did not fsync is dropped in the same instant,
// and every step the store acknowledged before the cut — a first claim, a
// confirmed lease, a confirmed record, a committed work (PostgreSQL and
// SQLite: AcquireWork, an effect row written in its transaction, Commit) —
// is tried again after the restart. One accepted again is a single-use ID
// accepted twice, or work done twice; an effect row without its done
// record, or a done work without its effect row, is work half kept.
//
// The tests need FUSE (root and /dev/fuse) and the servers' binaries; they
// skip without them, except under CI=true, where they fail. Each store
// configuration is cut CTOKEN_POWERLOSS_CUTS times (2 by default).
package powerloss_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"

	"powerloss/dropfs"
)

// needs skips the test for a missing prerequisite, or fails it under
// CI=true.
func needs(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true, and "+format, args...)
	}
	t.Skipf(format, args...)
}

// cuts is how many power cuts each configuration gets.
func cuts(t *testing.T) int {
	s := os.Getenv("CTOKEN_POWERLOSS_CUTS")
	if s == "" {
		return 2
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("CTOKEN_POWERLOSS_CUTS=%q: want a positive count", s)
	}
	return n
}

// machine is a data directory on a dropfs mount: a disk whose power can be
// cut. The directory (its backing and mount point) lives under a directory
// every user can traverse, so a server running as another user reaches it.
type machine struct {
	t       *testing.T
	backing string
	mnt     string
	fs      *dropfs.FS
}

// newMachine mounts a fresh dropfs; seed, if given, fills the backing
// directory first (it is then the synced state). It is unmounted when the
// test ends, after the cleanups registered later (the servers) ran.
func newMachine(t *testing.T, seed func(backing string) error) *machine {
	t.Helper()
	root, err := os.MkdirTemp("", "powerloss-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &machine{t: t, backing: filepath.Join(root, "backing"), mnt: filepath.Join(root, "mnt")}
	for _, d := range []string{m.backing, m.mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if seed != nil {
		if err := seed(m.backing); err != nil {
			t.Fatal(err)
		}
	}
	m.fs, err = dropfs.Mount(m.backing, m.mnt)
	if errors.Is(err, dropfs.ErrNoFUSE) {
		needs(t, "no FUSE here (root and /dev/fuse needed): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m.fs != nil {
			if err := m.fs.Unmount(); err != nil {
				t.Errorf("Unmount: %v", err)
			}
		}
	})
	return m
}

// cut drops everything not fsynced: call it right after killing the
// server.
func (m *machine) cut() {
	m.t.Helper()
	if err := m.fs.Cut(); err != nil {
		m.t.Fatalf("Cut: %v", err)
	}
}

// tear is cut with a random half of the unsynced sectors landed (see
// [dropfs.FS.Tear]).
func (m *machine) tear(rng *rand.Rand) {
	m.t.Helper()
	landed, err := m.fs.Tear(rng)
	if err != nil {
		m.t.Fatalf("Tear: %v", err)
	}
	m.t.Logf("the tear landed %d unsynced sectors over synced ones", landed)
}

// boot unmounts the cut file system and mounts the synced state again.
func (m *machine) boot() {
	m.t.Helper()
	err := m.fs.Unmount()
	m.fs = nil
	if err != nil {
		m.t.Fatalf("Unmount: %v", err)
	}
	if m.fs, err = dropfs.Mount(m.backing, m.mnt); err != nil {
		m.t.Fatalf("Mount again: %v", err)
	}
}

// down unmounts the cut file system: the machine is off, and its disk
// (the backing directory) holds the synced state. The test process may
// then open the files in the backing directory directly: it must never
// map a file of its own mount (a page fault it serves itself stalls the
// Go runtime's stop-the-world, and with it the FUSE server).
func (m *machine) down() {
	m.t.Helper()
	err := m.fs.Unmount()
	m.fs = nil
	if err != nil {
		m.t.Fatalf("Unmount: %v", err)
	}
}

// up mounts the backing directory again after down.
func (m *machine) up() {
	m.t.Helper()
	var err error
	if m.fs, err = dropfs.Mount(m.backing, m.mnt); err != nil {
		m.t.Fatalf("Mount again: %v", err)
	}
}

// freePort returns a loopback port nothing listened on a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// kind is the work a worker does with each fresh ID.
type kind int

const (
	kindClaim  kind = iota // Claim: acknowledged when reported first
	kindLease              // AcquireLease then ConfirmLease: acknowledged when confirmed
	kindRecord             // AcquireRecord then ConfirmRecord with a result: acknowledged when confirmed
	kindWork               // AcquireWork, an effect row in its transaction, then Commit with a result: acknowledged when committed
	nKinds
)

var kindNames = [nKinds]string{"claims", "leases", "records", "works"}

// verbs are what an SQLite child prints for an acknowledged step of each
// kind.
var verbs = [nKinds]string{"claimed", "leased", "recorded", "worked"}

// workerKind is what worker w of 8 does: workers 0-3 claim, 4-5 lease and
// confirm, 6-7 record and confirm, in the same cut; with works (a store
// that implements replay.WorkAcquirer), workers 2-3 do transactional work
// instead of claiming.
func workerKind(w int, works bool) kind {
	switch {
	case w < 2:
		return kindClaim
	case w < 4:
		if works {
			return kindWork
		}
		return kindClaim
	case w < 6:
		return kindLease
	}
	return kindRecord
}

// leaseLength is every lease the load takes: longer than a test runs, so
// an ID whose confirmation was lost while its lease survived reads busy
// after the cut.
const leaseLength = 10 * time.Minute

// store is what every store implements: claims, leases and records.
type store interface {
	Claim(ctx context.Context, id string, until time.Time) (bool, error)
	AcquireLease(ctx context.Context, id string, lease time.Duration) (replay.Lease, error)
	ConfirmLease(ctx context.Context, id, token string, until time.Time) error
	AcquireRecord(ctx context.Context, id string, lease time.Duration, fingerprint []byte) (replay.Record, error)
	ConfirmRecord(ctx context.Context, id, token string, until time.Time, fingerprint, result []byte) error
}

// workStore is a store with the one-commit transactional mode
// (pgstore, sqlitestore).
type workStore interface {
	store
	AcquireWork(ctx context.Context, id string, lease time.Duration, fingerprint []byte) (replay.Record, replay.Work, error)
}

// effectFunc inserts id's row into the app table effects in the
// transaction ctx carries (from replay.Work.Context), through the store's
// TxFrom.
type effectFunc func(ctx context.Context, id string) error

// effectsTable is the app table every work writes one row to, in the
// store's database.
const effectsTable = `CREATE TABLE IF NOT EXISTS effects (id TEXT PRIMARY KEY)`

func fingerprint(id string) []byte { return []byte("fp:" + id) }
func result(id string) []byte      { return []byte("result:" + id) }

// doWork runs one transactional work on a fresh id: AcquireWork, id's
// effect row in the work's transaction, Commit with a record. acked
// reports a nil Commit.
func doWork(ctx context.Context, s workStore, effect effectFunc, id string) (acked bool, err error) {
	r, w, err := s.AcquireWork(ctx, id, leaseLength, fingerprint(id))
	if err != nil || r.State != replay.LeaseAcquired || w == nil {
		return false, err
	}
	if err := effect(w.Context(ctx), id); err != nil {
		w.Rollback(ctx)
		return false, err
	}
	err = w.Commit(ctx, time.Now().Add(time.Hour), fingerprint(id), result(id))
	return err == nil, err
}

// do runs one step of kind k on a fresh id: acked reports that the store
// acknowledged it (a first claim; a lease or a record confirmed; a work
// committed). effect is the store's (nil for a store without works).
func do(ctx context.Context, s store, effect effectFunc, k kind, id string) (acked bool, err error) {
	until := time.Now().Add(time.Hour)
	switch k {
	case kindWork:
		ws, ok := s.(workStore)
		if !ok || effect == nil {
			return false, fmt.Errorf("%T does no transactional work here", s)
		}
		return doWork(ctx, ws, effect, id)
	case kindClaim:
		return s.Claim(ctx, id, until)
	case kindLease:
		l, err := s.AcquireLease(ctx, id, leaseLength)
		if err != nil || l.State != replay.LeaseAcquired {
			return false, err
		}
		err = s.ConfirmLease(ctx, id, l.Token, until)
		return err == nil, err
	default:
		r, err := s.AcquireRecord(ctx, id, leaseLength, fingerprint(id))
		if err != nil || r.State != replay.LeaseAcquired {
			return false, err
		}
		err = s.ConfirmRecord(ctx, id, r.Token, until, fingerprint(id), result(id))
		return err == nil, err
	}
}

// again asks the store once more for an id acknowledged before the cut:
// accepted reports that it would let the work run again — a claim
// reported first, a lease or record acquired, or busy (the confirmation
// was lost and only the lease survived: once it ends the ID is free). A
// record found done with another result is an error. A work is asked as
// a record (AcquireRecord must find it done with its fingerprint and
// result); its effect row is checked by checkEffects.
func again(ctx context.Context, s store, k kind, id string) (accepted bool, err error) {
	switch k {
	case kindClaim:
		return s.Claim(ctx, id, time.Now().Add(time.Hour))
	case kindLease:
		l, err := s.AcquireLease(ctx, id, leaseLength)
		if err != nil {
			return false, err
		}
		return l.State != replay.LeaseDone, nil
	default:
		r, err := s.AcquireRecord(ctx, id, leaseLength, fingerprint(id))
		if err != nil {
			return false, err
		}
		if r.State == replay.LeaseDone && (string(r.Result) != string(result(id)) || string(r.Fingerprint) != string(fingerprint(id))) {
			return false, fmt.Errorf("record %s done with fingerprint %q and result %q, not the confirmed ones", id, r.Fingerprint, r.Result)
		}
		return r.State != replay.LeaseDone, nil
	}
}

// tally counts what one configuration's re-tries found.
type tally struct {
	acknowledged  int // steps acknowledged before a cut
	acceptedAgain int // of those, accepted again after it: done twice
	refused       int // refused as taken or done: kept through the cut
	refusedLoss   int // refused by the store as a loss it detected (fenced, forgotten)
	errors        int // no decision after the retries
	unpaired      int // works: an effect row without its done record, or a done work without its one effect row
}

func (c tally) String() string {
	return "acknowledged " + strconv.Itoa(c.acknowledged) +
		", accepted again " + strconv.Itoa(c.acceptedAgain) +
		", refused " + strconv.Itoa(c.refused) +
		", refused by the store as a loss " + strconv.Itoa(c.refusedLoss) +
		", errors " + strconv.Itoa(c.errors)
}

// withUnpaired is String with the works' effect check.
func (c tally) withUnpaired() string {
	return c.String() + ", effect without record / record without effect " + strconv.Itoa(c.unpaired)
}

func (c *tally) add(d tally) {
	c.acknowledged += d.acknowledged
	c.acceptedAgain += d.acceptedAgain
	c.refused += d.refused
	c.refusedLoss += d.refusedLoss
	c.errors += d.errors
	c.unpaired += d.unpaired
}

// tallies is a tally per kind.
type tallies [nKinds]tally

func (c *tallies) add(d tallies) {
	for k := range c {
		c[k].add(d[k])
	}
}

func (c tallies) sum() tally {
	var s tally
	for _, k := range c {
		s.add(k)
	}
	return s
}

// log prints one line per kind (the line .ci/powerloss.sh shows); works
// only when works were run.
func (c tallies) log(t *testing.T, what string, works bool) {
	t.Helper()
	for k, n := range c {
		switch {
		case kind(k) != kindWork:
			t.Logf("%s, %s: %v", what, kindNames[k], n)
		case works:
			t.Logf("%s, %s: %s", what, kindNames[k], n.withUnpaired())
		}
	}
}

// check fails t when nothing was measured, or, when mustKeepAll, when any
// acknowledged step was accepted again or any work was half kept (an
// effect without its record, a record without its effect). works says
// that the store ran transactional work.
func (c tallies) check(t *testing.T, name string, mustKeepAll, works bool) {
	t.Helper()
	all := c.sum()
	if works {
		t.Logf("%s: all kinds: %s", name, all.withUnpaired())
	} else {
		t.Logf("%s: all kinds: %v", name, all)
	}
	c.log(t, name, works)
	if all.acknowledged == 0 {
		t.Fatal("nothing acknowledged: nothing measured")
	}
	if all.acceptedAgain+all.refused+all.refusedLoss == 0 {
		t.Fatal("no re-try was decided: nothing measured")
	}
	for k, n := range c {
		if kind(k) == kindWork && !works {
			continue
		}
		if n.acknowledged == 0 {
			t.Errorf("no %s acknowledged: %s not measured", kindNames[k], kindNames[k])
		}
		if mustKeepAll && n.acceptedAgain > 0 {
			t.Errorf("%d of %d acknowledged %s accepted again after a power cut under %s", n.acceptedAgain, n.acknowledged, kindNames[k], name)
		}
		if mustKeepAll && n.unpaired > 0 {
			t.Errorf("%d effect without record / record without effect among the %s after a power cut under %s", n.unpaired, kindNames[k], name)
		}
	}
}

// acked is one step acknowledged before a cut.
type acked struct {
	id string
	k  kind
}

// stepFunc runs one step of kind k on a fresh id (see do).
type stepFunc func(k kind, id string) (acked bool, err error)

// load runs steps on fresh IDs from 8 goroutines (kinds by workerKind,
// with works or not) until cut returns: cut is called once the first step
// was acknowledged and a random 0.3-1.5 s have passed (time decides only
// when to cut, never what passes), and must kill the server and cut the
// power. load returns the steps acknowledged, and the IDs of every work
// tried (acknowledged or not).
func load(t *testing.T, rng *rand.Rand, round int, works bool, step stepFunc, cut func()) (done []acked, tried []string) {
	t.Helper()
	const workers = 8
	var (
		mu     sync.Mutex
		stop   atomic.Bool
		wg     sync.WaitGroup
		firstC = make(chan struct{})
		once   sync.Once
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := workerKind(w, works)
			for i := 0; !stop.Load(); i++ {
				id := "r" + strconv.Itoa(round) + "-w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				if k == kindWork {
					mu.Lock()
					tried = append(tried, id)
					mu.Unlock()
				}
				ok, err := step(k, id)
				if err == nil && ok {
					mu.Lock()
					done = append(done, acked{id, k})
					mu.Unlock()
					once.Do(func() { close(firstC) })
				} else if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	wait := cutDelay(rng)
	start := time.Now()
	select {
	case <-firstC:
	case <-time.After(2 * time.Minute):
		stop.Store(true)
		wg.Wait()
		t.Fatal("nothing acknowledged within 2 minutes")
	}
	time.Sleep(time.Until(start.Add(wait)))
	cut()
	stop.Store(true)
	wg.Wait()
	return done, tried
}

// cutDelay is how long after the load starts the power is cut: a random
// 0.3-1.5 s.
func cutDelay(rng *rand.Rand) time.Duration {
	return 300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))
}

// againFunc tries an acknowledged step once more (see again).
type againFunc func(k kind, id string) (accepted bool, err error)

// decideAll re-tries every acknowledged step from 8 goroutines and counts
// what the store decided. isLoss tells a refusal for a loss the store
// detected from other errors; firstErr is the first refusal or error.
func decideAll(done []acked, try againFunc, isLoss func(error) bool) (c tallies, firstErr error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(done) {
					return
				}
				a := done[i]
				d, err := decide(try, a, isLoss)
				mu.Lock()
				d.acknowledged = 1
				c[a.k].add(d)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return c, firstErr
}

// decide tries a again until the store decides, and classifies it; err
// is the refusal for a loss, or the last error when nothing was decided.
func decide(try againFunc, a acked, isLoss func(error) bool) (tally, error) {
	var err error
	for range 40 {
		var accepted bool
		accepted, err = try(a.k, a.id)
		switch {
		case err == nil && accepted:
			return tally{acceptedAgain: 1}, nil
		case err == nil:
			return tally{refused: 1}, nil
		case isLoss(err):
			return tally{refusedLoss: 1}, err
		}
		time.Sleep(250 * time.Millisecond)
	}
	return tally{errors: 1}, err
}

// checkEffects judges every work of a cut after it: the IDs of every work
// tried (acknowledged or not) and of every effect row found (effects: how
// many rows each ID has, read after the restart, outside any Work). An ID
// must be done (AcquireRecord reports LeaseDone, with the work's
// fingerprint and result) exactly when it has one effect row: an effect
// row without its done record, or a done record without its one effect
// row, counts as unpaired. Run it after decideAll: the acknowledged works
// it found not done hold a lease then (busy), and read not done again. An
// ID whose probe the store refused as a loss (isLoss) is not judged; one
// still undecided after the retries neither, and its error is firstErr.
func checkEffects(ctx context.Context, s store, tried []string, effects map[string]int, isLoss func(error) bool) (unpaired int, firstErr error) {
	seen := map[string]bool{}
	var ids []string
	for _, id := range tried {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for id := range effects {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) {
					return
				}
				id := ids[i]
				var (
					done bool
					err  error
				)
				for range 40 {
					var accepted bool
					accepted, err = again(ctx, s, kindRecord, id)
					if err == nil {
						done = !accepted
						break
					}
					if isLoss(err) {
						break
					}
					time.Sleep(250 * time.Millisecond)
				}
				mu.Lock()
				switch n := effects[id]; {
				case err != nil:
					if firstErr == nil {
						firstErr = fmt.Errorf("work %s not judged: %w", id, err)
					}
				case done && n != 1:
					unpaired++
					if firstErr == nil {
						firstErr = fmt.Errorf("work %s done with %d effect rows", id, n)
					}
				case !done && n != 0:
					unpaired++
					if firstErr == nil {
						firstErr = fmt.Errorf("work %s not done, with %d effect rows", id, n)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return unpaired, firstErr
}
