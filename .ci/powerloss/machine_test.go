// Package powerloss cuts the power under each store's real server: the
// server's data directory lives on a dropfs mount, the server is SIGKILLed
// and everything it did not fsync is dropped in the same instant, and every
// claim the store acknowledged before the cut is claimed again after the
// restart. A claim accepted again is a single-use ID accepted twice.
//
// The tests need FUSE (root and /dev/fuse) and the servers' binaries; they
// skip without them, except under CI=true, where they fail. Each store
// configuration is cut CTOKEN_POWERLOSS_CUTS times (2 by default).
package powerloss_test

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// tally counts what one configuration's re-claims found.
type tally struct {
	acknowledged  int // claims reported first before a cut
	acceptedAgain int // of those, reported first again after it: accepted twice
	refused       int // refused as taken: kept through the cut
	refusedLoss   int // refused by the store as a loss it detected (fenced, forgotten)
	errors        int // no decision after the retries
}

func (c tally) String() string {
	return "acknowledged " + strconv.Itoa(c.acknowledged) +
		", accepted again " + strconv.Itoa(c.acceptedAgain) +
		", refused " + strconv.Itoa(c.refused) +
		", refused by the store as a loss " + strconv.Itoa(c.refusedLoss) +
		", errors " + strconv.Itoa(c.errors)
}

func (c *tally) add(d tally) {
	c.acknowledged += d.acknowledged
	c.acceptedAgain += d.acceptedAgain
	c.refused += d.refused
	c.refusedLoss += d.refusedLoss
	c.errors += d.errors
}

// claimFunc claims id once: first reports an acknowledged first claim.
type claimFunc func(id string) (first bool, err error)

// load claims fresh IDs from workers goroutines until cut returns: cut is
// called once the first claim was acknowledged and a random 0.3-1.5 s have
// passed (time decides only when to cut, never what passes), and must kill
// the server and cut the power. load returns the IDs acknowledged first.
func load(t *testing.T, rng *rand.Rand, round int, claim claimFunc, cut func()) []string {
	t.Helper()
	const workers = 8
	var (
		mu     sync.Mutex
		acked  []string
		stop   atomic.Bool
		wg     sync.WaitGroup
		firstC = make(chan struct{})
		once   sync.Once
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				id := "r" + strconv.Itoa(round) + "-w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				first, err := claim(id)
				if err == nil && first {
					mu.Lock()
					acked = append(acked, id)
					mu.Unlock()
					once.Do(func() { close(firstC) })
				} else if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	wait := 300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))
	start := time.Now()
	select {
	case <-firstC:
	case <-time.After(2 * time.Minute):
		stop.Store(true)
		wg.Wait()
		t.Fatal("no claim acknowledged within 2 minutes")
	}
	time.Sleep(time.Until(start.Add(wait)))
	cut()
	stop.Store(true)
	wg.Wait()
	return acked
}

// decide claims id again until the store decides, and classifies it.
// isLoss tells a refusal for a loss the store detected from other errors.
func decide(claim claimFunc, id string, isLoss func(error) bool, firstErr *error) tally {
	var err error
	for range 40 {
		var first bool
		first, err = claim(id)
		switch {
		case err == nil && first:
			return tally{acceptedAgain: 1}
		case err == nil:
			return tally{refused: 1}
		case isLoss(err):
			if *firstErr == nil {
				*firstErr = err
			}
			return tally{refusedLoss: 1}
		}
		time.Sleep(250 * time.Millisecond)
	}
	if *firstErr == nil {
		*firstErr = err
	}
	return tally{errors: 1}
}
