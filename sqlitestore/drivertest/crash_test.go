package drivertest

// Process-level faults, with real files and real processes: a child
// process (this test binary started again, its mode chosen by an
// environment variable) runs a workload on the database and prints one
// line per step only after the store acknowledged it; the parent
// SIGKILLs it at a random moment, checks with a store of its own that
// everything acknowledged holds, and starts it again on the same file.
// multiprocess_test.go runs several children on one file at once.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// faultChildEnv holds a faultJob (JSON) and makes the test binary run it
// instead of its tests.
const faultChildEnv = "CTOKEN_DRIVERTEST_FAULT_CHILD"

// faultLease is every lease the children take: longer than a test runs
// (go test's -timeout included; a minute was not, on a loaded machine),
// so an ID acquired twice (acknowledged both times) is a lease granted
// while another was live.
const faultLease = time.Hour

// faultPatience is how long a parent waits for a child that prints
// nothing (see faultProc.waitFor): a bound for a child that hangs, which
// a slow one on a loaded machine does not reach. A crash child stops by
// itself after twice as long, should its parent be gone.
const faultPatience = 2 * time.Minute

// faultJob is what a child runs.
type faultJob struct {
	// Mode is a key of faultModes.
	Mode string `json:"mode"`
	// DB is the database file.
	DB string `json:"db"`
	// New is the prefix of the fresh IDs a crash workload takes, New+"0",
	// New+"1" and so on, until the child is killed.
	New string `json:"new,omitempty"`
	// Retry lists IDs of earlier rounds, attempted again between the
	// fresh ones.
	Retry []faultRange `json:"retry,omitempty"`
	// IDs is the number of shared IDs of a multiprocess workload,
	// "mp-0" to "mp-<IDs-1>", taken in an order shuffled by Seed.
	IDs  int    `json:"ids,omitempty"`
	Seed uint64 `json:"seed"`
	// Gate makes the child wait, once ready, for a line on stdin.
	Gate bool `json:"gate,omitempty"`
	// HoldInWAL makes the child copy the WAL into the database file once
	// its store is built, and then neither checkpoint (automatic
	// checkpoints off) nor advance the store's sequence (no recheck): its
	// claims stay in the WAL alone, as the commits made since the last
	// checkpoint that followed an advance do.
	HoldInWAL bool `json:"holdinwal,omitempty"`
	// Scenario, when set, runs instead walLossChild's scenario of that
	// name on N IDs with leases of Lease, or unfinishedChild
	// ("unfinished"); see runToDone.
	Scenario string        `json:"scenario,omitempty"`
	N        int           `json:"n,omitempty"`
	Lease    time.Duration `json:"lease,omitempty"`
}

// faultRange is the IDs Prefix+"0" to Prefix+"<N-1>".
type faultRange struct {
	Prefix string `json:"prefix"`
	N      int    `json:"n"`
}

// faultStep runs one ID's workload in a child and reports each step
// acknowledged through say.
type faultStep func(ctx context.Context, s *sqlitestore.Store, id string, say func(verb, id, extra string))

var faultModes = map[string]faultStep{
	"claim":         claimStep,
	"lease":         leaseStep,
	"transactional": transactionalStep,
	"acquirework":   acquireWorkStep,
}

func init() {
	if spec := os.Getenv(faultChildEnv); spec != "" {
		if err := faultChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, "fault child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// faultChild is the child process: it builds a store on the file, says
// "ready", and runs the job's IDs with 8 goroutines, printing one line a
// step. A crash job runs until it is killed (or 2 faultPatience pass); a
// multiprocess job runs its IDs once and says "finished".
func faultChild(spec string) error {
	var job faultJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		return err
	}
	switch job.Scenario {
	case "":
	case "unfinished":
		return unfinishedChild(job.DB)
	default:
		return walLossChild(job)
	}
	step, ok := faultModes[job.Mode]
	if !ok {
		return fmt.Errorf("unknown mode %q", job.Mode)
	}
	ctx := context.Background()
	// A call waits for its answer as long as a loaded machine makes it
	// (Timeout): an ErrUnavailable is the store's refusal, not a slow turn.
	pragmas, opts := Safe, sqlitestore.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), Timeout: time.Minute}
	if job.HoldInWAL {
		pragmas, opts.RecheckInterval = With("wal_autocheckpoint", "0"), time.Hour
	}
	db, err := sql.Open(driver.SQLName, driver.DSN(job.DB, pragmas))
	if err != nil {
		return err
	}
	if job.HoldInWAL {
		// mattn takes no wal_autocheckpoint in the DSN: set it on each
		// connection the pool will ever hold, all kept idle.
		db.SetMaxOpenConns(10)
		db.SetMaxIdleConns(10)
		conns := make([]*sql.Conn, 10)
		for i := range conns {
			if conns[i], err = db.Conn(ctx); err != nil {
				return err
			}
			if _, err := conns[i].ExecContext(ctx, `PRAGMA wal_autocheckpoint = 0`); err != nil {
				return err
			}
		}
		for _, c := range conns {
			c.Close()
		}
	}
	s, err := sqlitestore.New(ctx, db, opts)
	if err != nil {
		return fmt.Errorf("New: %w", err)
	}
	if job.HoldInWAL {
		if err := checkpointTruncate(db); err != nil {
			return err
		}
	}
	var out sync.Mutex
	say := func(verb, id, extra string) {
		line := verb + " " + id
		if extra != "" {
			line += " " + strings.ReplaceAll(extra, "\n", " ")
		}
		out.Lock()
		defer out.Unlock()
		os.Stdout.WriteString(line + "\n") // unbuffered: a line printed is a step acknowledged
	}
	say("ready", "-", "")
	if job.Gate {
		if _, err := io.ReadAll(os.Stdin); err != nil {
			return err
		}
	}

	ids := make(chan string)
	stop := time.After(2 * faultPatience)
	go func() {
		defer close(ids)
		r := rand.New(rand.NewPCG(job.Seed, 53))
		if job.IDs > 0 {
			for _, i := range r.Perm(job.IDs) {
				ids <- "mp-" + strconv.Itoa(i)
			}
			return
		}
		var retry []string
		for _, rg := range job.Retry {
			for i := range rg.N {
				retry = append(retry, rg.Prefix+strconv.Itoa(i))
			}
		}
		r.Shuffle(len(retry), func(i, j int) { retry[i], retry[j] = retry[j], retry[i] })
		for i := 0; ; i++ {
			id := job.New + strconv.Itoa(i)
			if i%2 == 1 && len(retry) > 0 {
				id, retry = retry[0], retry[1:]
			}
			select {
			case ids <- id:
			case <-stop:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for id := range ids {
				step(ctx, s, id, say)
			}
		})
	}
	wg.Wait()
	s.Close()
	say("finished", "-", "")
	return db.Close()
}

// faultErr reports a call's error: "unavailable" for ErrUnavailable (the
// store could not decide, as it may say at any time), "bad" for
// anything else, which the parents count as failures.
func faultErr(say func(verb, id, extra string), id, call string, err error) {
	verb := "bad"
	if errors.Is(err, sqlitestore.ErrUnavailable) {
		verb = "unavailable"
	}
	say(verb, id, call+": "+err.Error())
}

// claimStep claims id: "claimed" once Claim answered first.
func claimStep(ctx context.Context, s *sqlitestore.Store, id string, say func(verb, id, extra string)) {
	first, err := s.Claim(ctx, id, time.Now().Add(time.Hour))
	switch {
	case err != nil:
		faultErr(say, id, "Claim", err)
	case first:
		say("claimed", id, "")
	default:
		say("refused", id, "")
	}
}

// leaseStep acquires id and confirms it: "acquired", then "confirmed".
func leaseStep(ctx context.Context, s *sqlitestore.Store, id string, say func(verb, id, extra string)) {
	l, err := s.AcquireLease(ctx, id, faultLease)
	if err != nil {
		faultErr(say, id, "AcquireLease", err)
		return
	}
	if l.State != replay.LeaseAcquired {
		say(l.State.String(), id, "")
		return
	}
	say("acquired", id, "")
	if err := s.ConfirmLease(ctx, id, l.Token, time.Now().Add(time.Hour)); err != nil {
		faultErr(say, id, "ConfirmLease", err)
		return
	}
	say("confirmed", id, "")
}

// faultFingerprint and faultResult are the record a transactional step
// commits for id.
func faultFingerprint(id string) []byte { return []byte("fp:" + id) }
func faultResult(id string) []byte      { return []byte("ok:" + id) }

// transactionalStep acquires id's record, inserts id into the app's
// table effects in the Work's transaction and commits: "acquired", then
// "committed". An insert refused because effects already holds id means
// the work ran a second time after its effect committed: "duplicate".
func transactionalStep(ctx context.Context, s *sqlitestore.Store, id string, say func(verb, id, extra string)) {
	r, err := s.AcquireRecord(ctx, id, faultLease, faultFingerprint(id))
	if err != nil {
		faultErr(say, id, "AcquireRecord", err)
		return
	}
	if r.State != replay.LeaseAcquired {
		say(r.State.String(), id, "")
		return
	}
	say("acquired", id, "")
	w, err := s.BeginWork(ctx, id, r.Token)
	if err != nil {
		faultErr(say, id, "BeginWork", err)
		return
	}
	workStep(ctx, w, id, say)
}

// acquireWorkStep is transactionalStep in one transaction: AcquireWork
// (its lease dies with the process, so "working", not "acquired", which
// counts leases that must not be granted twice), the insert into effects,
// Commit: "committed".
func acquireWorkStep(ctx context.Context, s *sqlitestore.Store, id string, say func(verb, id, extra string)) {
	r, w, err := s.AcquireWork(ctx, id, faultLease, faultFingerprint(id))
	if err != nil {
		faultErr(say, id, "AcquireWork", err)
		return
	}
	if w == nil {
		say(r.State.String(), id, "")
		return
	}
	say("working", id, "")
	workStep(ctx, w, id, say)
}

// workStep inserts id into effects in w's transaction and commits it:
// "committed", or "duplicate" when effects already held id.
func workStep(ctx context.Context, w replay.Work, id string, say func(verb, id, extra string)) {
	wctx := w.Context(ctx)
	tx, err := sqlitestore.TxFrom(wctx)
	if err == nil {
		_, err = tx.ExecContext(wctx, `INSERT INTO effects (id) VALUES (?)`, id)
	}
	if err != nil {
		w.Rollback(ctx)
		if strings.Contains(err.Error(), "UNIQUE constraint failed") {
			say("duplicate", id, err.Error())
		} else {
			say("bad", id, "insert: "+err.Error())
		}
		return
	}
	if err := w.Commit(ctx, time.Now().Add(time.Hour), faultFingerprint(id), faultResult(id)); err != nil {
		faultErr(say, id, "Commit", err)
		return
	}
	say("committed", id, "")
}

// faultProc is a running child.
type faultProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan struct{}
	exited chan struct{}
	mode   string
	err    error // cmd.Wait's, once exited is closed
	out    faultLines
	stderr faultBuffer
}

// faultLines splits a child's stdout into lines as they arrive; changed
// receives after each Write that added some.
type faultLines struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	ready   func()
	changed chan struct{}
}

func (l *faultLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		if line == "ready -" {
			l.ready()
			continue
		}
		l.lines = append(l.lines, line)
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
}

type faultBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *faultBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *faultBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startFault starts a child running job and waits until it says ready
// (its store built). The child is killed when the test ends.
func startFault(t *testing.T, job faultJob) *faultProc {
	t.Helper()
	p := launchFault(t, job)
	p.waitReady(t)
	return p
}

func launchFault(t *testing.T, job faultJob) *faultProc {
	t.Helper()
	spec, err := json.Marshal(job)
	must(t, err)
	exe, err := os.Executable()
	must(t, err)
	p := &faultProc{cmd: exec.Command(exe, "-test.run=^$"), ready: make(chan struct{}), exited: make(chan struct{}), mode: job.Mode}
	p.cmd.Env = append(os.Environ(), faultChildEnv+"="+string(spec))
	var once sync.Once
	p.out.ready = func() { once.Do(func() { close(p.ready) }) }
	p.out.changed = make(chan struct{}, 1)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.stderr
	if job.Gate {
		p.stdin, err = p.cmd.StdinPipe()
		must(t, err)
	}
	must(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.kill)
	return p
}

// runToDone starts a child running job's Scenario, waits until it says
// "done" after at least one step, and SIGKILLs it.
func runToDone(t *testing.T, job faultJob) {
	t.Helper()
	p := launchFault(t, job)
	if !p.waitFor(t, "done", func(lines []string) bool { return slices.Index(lines, "done") > 0 }) {
		t.Fatalf("child %s exited (%v) before it said done; it printed %q; stderr:\n%s", job.Scenario, p.err, p.lines(), p.stderr.String())
	}
	p.kill()
}

func (p *faultProc) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.exited:
		t.Fatalf("child %s exited (%v) before it was ready; stderr:\n%s", p.mode, p.cmd.ProcessState, p.stderr.String())
	case <-time.After(faultPatience):
		t.Fatalf("child %s not ready within %v; stderr:\n%s", p.mode, faultPatience, p.stderr.String())
	}
}

// kill SIGKILLs the child (by its PID) and waits until it exited and its
// output is read.
func (p *faultProc) kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

// waitFor waits until cond (nil: never) holds on what the child printed,
// and reports whether it did: false when the child exited first. It fails
// the test when the child printed nothing for faultPatience while the
// test waited for what.
func (p *faultProc) waitFor(t *testing.T, what string, cond func(lines []string) bool) bool {
	t.Helper()
	seen := -1
	var stalled <-chan time.Time
	for {
		lines := p.lines()
		if cond != nil && cond(lines) {
			return true
		}
		if len(lines) != seen {
			seen, stalled = len(lines), time.After(faultPatience)
		}
		select {
		case <-p.out.changed:
		case <-p.exited:
			return cond != nil && cond(p.lines())
		case <-stalled:
			t.Fatalf("child %s printed nothing for %v while the test waited for %s; stderr:\n%s", p.mode, faultPatience, what, p.stderr.String())
		}
	}
}

func (p *faultProc) lines() []string {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	return slices.Clone(p.out.lines)
}

// faultTally counts what children printed, over every round.
type faultTally struct {
	acked     map[string]int // claimed, confirmed or committed
	acquired  map[string]int
	retried   int // attempts of an ID acknowledged in an earlier round
	unavail   int
	busyErrs  int // of those, errors naming SQLITE_BUSY or a lock
	bad, dups []string
	maxIndex  int // the highest fresh index seen in the last round
}

func newFaultTally() *faultTally {
	return &faultTally{acked: map[string]int{}, acquired: map[string]int{}}
}

// add counts one round's lines; fresh is the round's prefix of new IDs.
func (f *faultTally) add(lines []string, fresh string) {
	before := maps.Clone(f.acked)
	f.maxIndex = -1
	for _, line := range lines {
		verb, rest, _ := strings.Cut(line, " ")
		id, extra, _ := strings.Cut(rest, " ")
		if n, ok := strings.CutPrefix(id, fresh); ok && fresh != "" {
			if i, err := strconv.Atoi(n); err == nil && i > f.maxIndex {
				f.maxIndex = i
			}
		}
		if before[id] > 0 {
			f.retried++
		}
		switch {
		case faultAck(verb):
			f.acked[id]++
		case verb == "acquired":
			f.acquired[id]++
		case verb == "unavailable":
			f.unavail++
			if l := strings.ToLower(extra); strings.Contains(l, "busy") || strings.Contains(l, "locked") {
				f.busyErrs++
			}
		case verb == "bad":
			f.bad = append(f.bad, line)
		case verb == "duplicate":
			f.dups = append(f.dups, line)
		}
	}
}

// faultAck reports whether a child's line with verb acknowledges a step.
func faultAck(verb string) bool {
	return verb == "claimed" || verb == "confirmed" || verb == "committed"
}

// faultTwice returns the IDs counted more than once.
func faultTwice(m map[string]int) []string {
	var out []string
	for id, n := range m {
		if n > 1 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func faultKeys(m map[string]int) []string { return slices.Sorted(maps.Keys(m)) }

// eachID runs check on ids with 32 goroutines (the store's group commit
// then answers them in a few transactions) and returns the failures.
func faultEach(ids []string, check func(id string) error) []error {
	var (
		mu   sync.Mutex
		errs []error
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) {
					return
				}
				if err := check(ids[i]); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", ids[i], err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// faultDone returns the check that s refuses an ID a child of mode
// acknowledged: a lease's AcquireLease finds it done, a claim's Claim is
// not first.
func faultDone(s *sqlitestore.Store, mode string) func(id string) error {
	return func(id string) error {
		if mode == "lease" {
			if l, err := s.AcquireLease(context.Background(), id, faultLease); l.State != replay.LeaseDone || err != nil {
				return fmt.Errorf("AcquireLease = %v, %v; want LeaseDone", l.State, err)
			}
			return nil
		}
		if first, err := s.Claim(context.Background(), id, time.Now().Add(time.Hour)); first || err != nil {
			return fmt.Errorf("Claim = %v, %v; want not first", first, err)
		}
		return nil
	}
}

func faultReport(t *testing.T, what string, errs []error) {
	t.Helper()
	if len(errs) == 0 {
		return
	}
	shown := errs[:min(len(errs), 10)]
	t.Errorf("%s: %d failures, the first: %v", what, len(errs), errors.Join(shown...))
}

// faultDB creates the database file with the store's table and the
// app's table effects, and closes it.
func faultDB(t *testing.T, d Driver) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "replay.db")
	db := d.Open(t, path)
	ctx := context.Background()
	must(t, sqlitestore.Migrate(ctx, db, ""))
	mustExec(t, ctx, db, `CREATE TABLE effects (id TEXT PRIMARY KEY)`)
	must(t, db.Close())
	return path
}

// TestSIGKILL: a child process runs a workload
// with 8 goroutines (claims; leases acquired and confirmed; transactional
// works inserting into the app's table effects, begun with BeginWork or
// in one transaction with AcquireWork) and is SIGKILLed at a
// random moment, 5 rounds on the same file. Each round, the child takes
// fresh IDs and attempts again every ID of the rounds before. After each
// kill, New on the file succeeds (a killed process is not a loss), and
// its store refuses every ID acknowledged so far: Claim is not first,
// AcquireLease and AcquireRecord report LeaseDone. For the transactional
// workload every committed ID has its row in effects, and every row in
// effects has its done record (no effect without its record); no insert
// ever met an effect already there (no work run twice). Over the rounds
// no ID is acknowledged twice, nor acquired twice.
func TestSIGKILL(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	eachDriver(t, func(t *testing.T, d Driver) {
		for i, mode := range []string{"claim", "lease", "transactional", "acquirework"} {
			t.Run(mode, func(t *testing.T) {
				sigkillRounds(t, d, mode, rand.New(rand.NewPCG(seed, uint64(i))))
			})
		}
	})
}

func sigkillRounds(t *testing.T, d Driver, mode string, r *rand.Rand) {
	const rounds = 5
	path := faultDB(t, d)
	tally := newFaultTally()
	var retry []faultRange
	// delays are from the child's "ready", or, for the round early, from
	// its start (negative: killed before it was ready).
	var delays []time.Duration
	var startup time.Duration // from the start to "ready", last measured
	const early = 2
	for round := range rounds {
		fresh := fmt.Sprintf("r%d-", round)
		job := faultJob{Mode: mode, DB: path, New: fresh, Retry: retry, Seed: r.Uint64()}
		started := time.Now()
		p := launchFault(t, job)
		if round == early {
			// Killed at a random moment of its start, New included.
			delay := time.Duration(r.Int64N(int64(startup + 20*time.Millisecond)))
			time.Sleep(delay)
			if isClosed(p.ready) {
				delays = append(delays, delay)
			} else {
				delays = append(delays, -delay) // killed before it was ready
			}
		} else {
			p.waitReady(t)
			startup = time.Since(started)
			ready := time.Now()
			time.Sleep(50*time.Millisecond + time.Duration(r.Int64N(int64(350*time.Millisecond))))
			// And not before it worked, which a loaded machine gives little
			// of the delay: 10 lines, an acknowledgment, and an attempt of
			// an ID acknowledged in an earlier round if there is one.
			if !p.waitFor(t, "its work", func(lines []string) bool {
				acks, again := 0, len(tally.acked) == 0
				for _, line := range lines {
					verb, rest, _ := strings.Cut(line, " ")
					id, _, _ := strings.Cut(rest, " ")
					if faultAck(verb) {
						acks++
					}
					again = again || tally.acked[id] > 0
				}
				return len(lines) >= 10 && acks > 0 && again
			}) {
				t.Fatalf("round %d: the child exited before it worked (%v); stderr:\n%s", round, p.err, p.stderr.String())
			}
			delays = append(delays, time.Since(ready))
		}
		p.kill()
		tally.add(p.lines(), fresh)
		// The next rounds attempt every ID this one may have attempted:
		// those it printed and those in flight when it was killed.
		retry = append(retry, faultRange{fresh, tally.maxIndex + 1 + 16})

		sigkillCheck(t, d, path, mode, tally, round)
		if t.Failed() {
			t.Logf("round %d child stderr:\n%s", round, p.stderr.String())
			return
		}
	}
	reaccepted := faultTwice(tally.acked)
	t.Logf("%d rounds killed after %v (round %d from the start): %d IDs acknowledged, %d attempts of IDs acknowledged in an earlier round, %d re-accepted, %d acquired twice, %d unavailable (%d naming busy or locked)",
		rounds, delays, early, len(tally.acked), tally.retried, len(reaccepted), len(faultTwice(tally.acquired)), tally.unavail, tally.busyErrs)
	if len(tally.acked) == 0 {
		t.Fatal("no step was acknowledged in any round: the children were killed before they worked")
	}
	if tally.retried == 0 {
		t.Error("no ID acknowledged in a round was attempted again in a later one")
	}
	if len(reaccepted) > 0 {
		t.Errorf("%d IDs acknowledged twice across the kills, e.g. %q", len(reaccepted), reaccepted[:min(5, len(reaccepted))])
	}
	if a := faultTwice(tally.acquired); len(a) > 0 {
		t.Errorf("%d IDs acquired twice while their first lease (%v) was live, e.g. %q", len(a), faultLease, a[:min(5, len(a))])
	}
}

// sigkillCheck builds a store on the file after a kill and checks that
// every step acknowledged so far holds.
func sigkillCheck(t *testing.T, d Driver, path, mode string, tally *faultTally, round int) {
	t.Helper()
	if len(tally.bad) > 0 {
		t.Errorf("round %d: %d calls failed with an error that is not ErrUnavailable, e.g. %q", round, len(tally.bad), tally.bad[:min(5, len(tally.bad))])
	}
	if len(tally.dups) > 0 {
		t.Errorf("round %d: %d works found their effect already committed (run twice), e.g. %q", round, len(tally.dups), tally.dups[:min(5, len(tally.dups))])
	}
	ctx := context.Background()
	db := d.Open(t, path)
	defer db.Close()
	s, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
	if err != nil {
		t.Fatalf("round %d: New after a SIGKILL = %v; want a store (a killed process is not a loss)", round, err)
	}
	defer s.Close()
	acked := faultKeys(tally.acked)
	switch mode {
	case "claim", "lease":
		what := map[string]string{"claim": "Claim of an acknowledged ID", "lease": "AcquireLease of a confirmed ID"}[mode]
		faultReport(t, fmt.Sprintf("round %d: %s", round, what), faultEach(acked, faultDone(s, mode)))
	case "transactional", "acquirework":
		effects := map[string]int{}
		rows, err := db.QueryContext(ctx, `SELECT id FROM effects`)
		must(t, err)
		for rows.Next() {
			var id string
			must(t, rows.Scan(&id))
			effects[id]++
		}
		must(t, rows.Close())
		var missing []string
		for _, id := range acked {
			if effects[id] != 1 {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			t.Errorf("round %d: %d committed IDs without their row in effects, e.g. %q", round, len(missing), missing[:min(5, len(missing))])
		}
		unacked := 0
		for id := range effects {
			if tally.acked[id] == 0 {
				unacked++
			}
		}
		t.Logf("round %d: %d rows in effects, %d of them committed but killed before the child printed it", round, len(effects), unacked)
		faultReport(t, fmt.Sprintf("round %d: AcquireRecord of an ID in effects", round), faultEach(faultKeys(effects), func(id string) error {
			r, err := s.AcquireRecord(ctx, id, faultLease, faultFingerprint(id))
			if r.State != replay.LeaseDone || err != nil {
				return fmt.Errorf("AcquireRecord = %v, %v; want LeaseDone (an effect without its record)", r.State, err)
			}
			if !bytes.Equal(r.Result, faultResult(id)) {
				return fmt.Errorf("AcquireRecord's result = %q; want %q", r.Result, faultResult(id))
			}
			return nil
		}))
	}
}
