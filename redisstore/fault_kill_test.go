//go:build fault

package redisstore

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The child instance of TestKilledInstanceSurvivorsFinishTheWork is this
// test binary run again with these variables set.
const (
	envChildRedis  = "CTOKEN_FAULT_CHILD_REDIS"  // Redis address; its presence makes TestFaultChildInstance serve
	envChildPrefix = "CTOKEN_FAULT_CHILD_PREFIX" // the fleet's store prefix
	envChildLog    = "CTOKEN_FAULT_CHILD_LOG"    // file the child appends each acceptance to
	envChildDelay  = "CTOKEN_FAULT_CHILD_DELAY"  // work after a successful claim, before the acceptance is logged
)

// TestFaultChildInstance is not a test on its own: run by
// TestKilledInstanceSurvivorsFinishTheWork as a separate process (with
// envChildRedis set), it serves one fleet instance on loopback, prints its
// URL, appends every token it accepts to the log file, and serves until its
// stdin closes or it is killed. Without envChildRedis it returns at once.
func TestFaultChildInstance(t *testing.T) {
	addr := os.Getenv(envChildRedis)
	if addr == "" {
		return
	}
	delay, err := time.ParseDuration(os.Getenv(envChildDelay))
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(os.Getenv(envChildLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	store, err := New(standaloneClient(t, addr), Options{Prefix: os.Getenv(envChildPrefix), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	in := startInstance(t, "child", store, func(h http.Handler) http.Handler {
		return recordAccepts(h, delay, func(tok string) {
			// One write(2) on an O_APPEND file: the line survives SIGKILL
			// once the call returns, and the reply is written after it.
			logf.Write([]byte(tokenDigest(tok) + "\n"))
		})
	})
	fmt.Printf("CHILD_URL=%s\n", in.srv.URL)
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
	}
}

// startChild runs TestFaultChildInstance in a new process and returns its
// URL and the process.
func startChild(t *testing.T, redisAddr, prefix, logPath string, delay time.Duration) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultChildInstance$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		envChildRedis+"="+redisAddr, envChildPrefix+"="+prefix,
		envChildLog+"="+logPath, envChildDelay+"="+delay.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		<-exited
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "CHILD_URL="); ok {
				urls <- u
			}
		}
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		close(exited)
	}()
	select {
	case u := <-urls:
		return u, cmd
	case <-exited:
		t.Fatalf("child instance exited before serving:\n%s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("child instance did not start:\n%s", stderr.String())
	}
	return "", nil
}

// readChildLog counts the child's acceptances per token digest.
func readChildLog(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	m := map[string]int{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if line != "" {
			m[line]++
		}
	}
	return m
}

// TestKilledInstanceSurvivorsFinishTheWork runs a fleet of two in-process
// instances and one child process sharing one Redis, redeems 300 single-use
// tokens through all three with 24 concurrent clients while a client pages
// through the collection, and SIGKILLs the child once it has accepted 40
// tokens. Clients move on to a survivor when an instance does not answer.
// Then: every token was acted on ("accepted": the handler's work after a
// first claim) at most once across the fleet, every token a client saw
// accepted was acted on exactly once, every token is decided (accepted or
// refused as redeemed), and a token that was never acted on ("burned") is
// one whose claim the child made and whose reply it never sent: the
// survivors refuse it. The listing sees every item exactly once.
func TestKilledInstanceSurvivorsFinishTheWork(t *testing.T) {
	t.Setenv(envFleetKeys, fleetKey())
	t.Setenv(envFleetSession, "fleet-session-1")
	rp := startRedisProc(t)
	store := faultStore(t, standaloneClient(t, rp.addr()), 2*time.Second)
	const workDelay = 5 * time.Millisecond
	var local acceptLog
	var urls []string
	for i := range 2 {
		in := startInstance(t, fmt.Sprint("i", i), store, func(h http.Handler) http.Handler {
			return recordAccepts(h, workDelay, local.add)
		})
		urls = append(urls, in.srv.URL)
	}
	logPath := t.TempDir() + "/child-accepts"
	childURL, child := startChild(t, rp.addr(), store.Prefix(), logPath, workDelay)
	urls = append(urls, childURL)
	const childIdx = 2
	c := faultClient(t)

	var toks []single
	for range 150 {
		for _, kind := range singleUseKinds {
			tok, err := mint(c, urls[len(toks)%2], kind, "alice")
			if err != nil {
				t.Fatal(err)
			}
			toks = append(toks, single{kind, tok})
		}
	}

	var (
		rr          atomic.Uint64
		childFailed sync.Map // token digest → a redeem sent to the child got no reply
		outs        outcomes
		final       sync.Map // token digest → decided status the client saw
		killed      atomic.Bool
		listRetries atomic.Int32 // pages asked again because an instance did not answer
		failures    = make(chan string, 64)
	)
	// settle redeems one token until it is decided, moving to the next
	// instance when one does not answer.
	settle := func(s single) {
		for attempt := 0; attempt < 200; attempt++ {
			i := int(rr.Add(1) % uint64(len(urls)))
			st := redeem(c, urls[i], s)
			outs.add(s.tok, st)
			switch st {
			case 0:
				if i == childIdx {
					childFailed.Store(tokenDigest(s.tok), true)
				} else {
					failures <- fmt.Sprintf("survivor %d did not answer", i)
					return
				}
			case http.StatusServiceUnavailable:
				time.Sleep(10 * time.Millisecond)
			case http.StatusOK, http.StatusConflict:
				final.Store(tokenDigest(s.tok), st)
				return
			default:
				failures <- fmt.Sprintf("redeem: status %d", st)
				return
			}
		}
		failures <- "a token was not decided after 200 attempts"
	}

	work := make(chan single)
	var wg sync.WaitGroup
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				settle(s)
			}
		}()
	}
	// A listing through the whole fleet at the same time.
	listing := make(chan error, 1)
	go func() {
		seen := map[int]int{}
		cursor := ""
		for page := 0; ; {
			i := int(rr.Add(1) % uint64(len(urls)))
			r, err := call(c, http.MethodGet, urls[i]+"/items?collection=books&cursor="+url.QueryEscape(cursor), "alice", nil)
			if err != nil {
				listRetries.Add(1) // the killed child: ask another instance with the same cursor
				continue
			}
			if r.Status != http.StatusOK {
				listing <- fmt.Errorf("page %d refused: status %d code %d", page, r.Status, r.Code)
				return
			}
			for _, it := range r.Items {
				seen[it]++
			}
			if cursor = r.Next; cursor == "" {
				break
			}
			page++
			time.Sleep(time.Millisecond) // spread the listing over the kill
		}
		for i := range fleetItems {
			if seen[i] != 1 {
				listing <- fmt.Errorf("item %d seen %d times, want exactly once", i, seen[i])
				return
			}
		}
		listing <- nil
	}()
	// Kill the child once it has accepted 40 tokens.
	go func() {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if b, _ := os.ReadFile(logPath); bytes.Count(b, []byte("\n")) >= 40 {
				child.Process.Signal(syscall.SIGKILL)
				killed.Store(true)
				return
			}
		}
	}()
	for _, s := range toks {
		work <- s
	}
	close(work)
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	if err := <-listing; err != nil {
		t.Error(err)
	}
	if !killed.Load() {
		t.Fatal("the child was never killed: it accepted fewer than 40 tokens")
	}

	childAccepts := readChildLog(t, logPath)
	var acceptedByChild, acceptedBySurvivors, burned int
	for i, s := range toks {
		d := tokenDigest(s.tok)
		acts := local.count(s.tok) + childAccepts[d]
		st, decided := final.Load(d)
		_, noReply := childFailed.Load(d)
		switch {
		case !decided:
			t.Fatalf("%s token %d never decided", s.kind, i)
		case acts > 1:
			t.Fatalf("%s token %d acted on %d times", s.kind, i, acts)
		case outs.get(s.tok, http.StatusOK) > 1:
			t.Fatalf("%s token %d: %d clients were told it was accepted", s.kind, i, outs.get(s.tok, http.StatusOK))
		case st == http.StatusOK && acts != 1:
			t.Fatalf("%s token %d: accepted (200) but acted on %d times", s.kind, i, acts)
		case acts == 0 && !noReply:
			t.Fatalf("%s token %d refused as redeemed but never acted on, and no instance died holding it", s.kind, i)
		case acts == 0:
			burned++
		case childAccepts[d] == 1:
			acceptedByChild++
		default:
			acceptedBySurvivors++
		}
		// The survivors refuse it now, whatever happened.
		for _, u := range urls[:2] {
			if st := redeem(c, u, s); st != http.StatusConflict {
				t.Fatalf("%s token %d after the run: status %d, want 409", s.kind, i, st)
			}
		}
	}
	noReplies := 0
	childFailed.Range(func(any, any) bool { noReplies++; return true })
	t.Logf("%d tokens: %d acted on by the child before it was killed, %d by the survivors, %d burned (claimed by the child, which died before acting); %d tokens had a redeem the child never answered; the listing asked %d pages again",
		len(toks), acceptedByChild, acceptedBySurvivors, burned, noReplies, listRetries.Load())
}
