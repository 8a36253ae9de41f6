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
	must(t, err)
	logf, err := os.OpenFile(os.Getenv(envChildLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	must(t, err)
	defer logf.Close()
	store := mustNew(t, standaloneClient(t, addr), Options{Prefix: os.Getenv(envChildPrefix), Timeout: 2 * time.Second})
	// One write(2) on an O_APPEND file: a line survives SIGKILL once the
	// call returns, and the reply is written after it.
	hook := hookEndpoint(t, store, killLease, killHookWork, func(id string) {
		logf.Write([]byte("hook-start " + tokenDigest(id) + "\n"))
	}, func(id string) {
		logf.Write([]byte("hook " + tokenDigest(id) + "\n"))
	})
	in := startInstance(t, "child", store, func(h http.Handler) http.Handler {
		return withHook(hook)(recordAccepts(h, delay, func(tok string) {
			logf.Write([]byte("tok " + tokenDigest(tok) + "\n"))
		}))
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
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	must(t, cmd.Start())
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

// readChildLog counts the child's acceptances per token digest, and its
// processed and started webhook deliveries per ID digest.
func readChildLog(t *testing.T, path string) (toks, hooks, started map[string]int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	toks, hooks, started = map[string]int{}, map[string]int{}, map[string]int{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if d, ok := strings.CutPrefix(line, "hook-start "); ok {
			started[d]++
		}
		if d, ok := strings.CutPrefix(line, "tok "); ok {
			toks[d]++
		} else if d, ok := strings.CutPrefix(line, "hook "); ok {
			hooks[d]++
		}
	}
	return toks, hooks, started
}

const (
	// killLease is the webhook lease of the killed-instance test.
	killLease = time.Second
	// killHookWork is how long its webhook handler works on a delivery.
	killHookWork = 20 * time.Millisecond
)

// TestKilledInstanceSurvivorsFinishTheWork runs a fleet of two in-process
// instances and one child process sharing one Redis, under token redeems,
// webhook deliveries and a listing, and SIGKILLs the child mid-work. No
// token is acted on twice, every token a client saw accepted was acted on
// once, and a token never acted on is one the child claimed and never
// answered. Every delivery is acknowledged and processed; the one the child
// was working on is processed once by a survivor after its lease ends, and
// twice only if the child processed it and died before confirming (the
// at-least-once window, counted). The listing sees every item once.
func TestKilledInstanceSurvivorsFinishTheWork(t *testing.T) {
	t.Setenv(envFleetKeys, fleetKey())
	t.Setenv(envFleetSession, "fleet-session-1")
	rp := newServer(t)
	store := faultStore(t, standaloneClient(t, rp.addr()), 2*time.Second)
	const workDelay = 5 * time.Millisecond
	var local, localHooks acceptLog
	var survivors []*instance
	var urls []string
	for i := range 2 {
		hook := hookEndpoint(t, store, killLease, killHookWork, nil, localHooks.add)
		in := startInstance(t, fmt.Sprint("i", i), store, func(h http.Handler) http.Handler {
			return withHook(hook)(recordAccepts(h, workDelay, local.add))
		})
		survivors = append(survivors, in)
		urls = append(urls, in.srv.URL)
	}
	logPath := t.TempDir() + "/child-accepts"
	childURL, child := startChild(t, rp.addr(), store.Prefix(), logPath, workDelay)
	urls = append(urls, childURL)
	const childIdx = 2
	c := faultClient(t)
	toks := mintMany(t, c, survivors, 150)

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

	// Webhook deliveries: a sender retries each (every 50 ms, over the
	// instances in turn) until a 2xx.
	sender := newHookSender(t, c)
	var hookIDs []string
	for i := range 240 {
		hookIDs = append(hookIDs, fmt.Sprint("msg_kill_", i))
	}
	var ackedByChild, hookNoReply sync.Map // delivery ID → true
	deliver := func(id string) {
		for deadline := time.Now().Add(killLease + 20*time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			i := int(rr.Add(1) % uint64(len(urls)))
			code := sender.send(urls[i], id)
			switch {
			case code/100 == 2:
				if i == childIdx {
					ackedByChild.Store(id, true)
				}
				return
			case code == 0 && i == childIdx:
				hookNoReply.Store(id, true)
			case code != http.StatusServiceUnavailable:
				failures <- fmt.Sprintf("delivery %s: status %d from instance %d", id, code, i)
				return
			}
		}
		failures <- fmt.Sprintf("delivery %s never acknowledged: lost", id)
	}
	hooksDone := inParallel(hookIDs, 12, deliver)
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
	// Kill the child once it has accepted 20 tokens and while its webhook
	// handler is working on a delivery (started, not yet processed).
	go func() {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			b, _ := os.ReadFile(logPath)
			if bytes.Count(b, []byte("tok ")) >= 20 && bytes.Count(b, []byte("hook-start ")) > bytes.Count(b, []byte("hook ")) {
				child.Process.Signal(syscall.SIGKILL)
				killed.Store(true)
				return
			}
		}
	}()
	inParallel(toks, 24, settle)()
	hooksDone()
	// Every delivery, all acknowledged by now, once more to the survivors,
	// as a sender whose acknowledgement got lost would send it: it must be
	// acknowledged as a duplicate, not processed again (checked below).
	for i, id := range hookIDs {
		if code := sender.send(urls[i%2], id); code != http.StatusOK {
			t.Errorf("delivery %s sent again after the kill: status %d, want 200 (a duplicate)", id, code)
		}
	}
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	if err := <-listing; err != nil {
		t.Error(err)
	}
	if !killed.Load() {
		t.Fatal("the child was never killed: it accepted fewer than 20 tokens, or never held a delivery in its handler")
	}

	childAccepts, childHooks, childStarted := readChildLog(t, logPath)
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
	// Webhook deliveries: every one acknowledged (none lost); processed once,
	// except one the child processed and died before confirming (its lease
	// then ended and a survivor processed the retry): at-least-once
	// handlers must be idempotent for that window.
	var hooksByChild, hooksBySurvivors, hooksTwice, hooksRetriedAfterKill, orphaned int
	for _, id := range hookIDs {
		if childStarted[tokenDigest(id)] > childHooks[tokenDigest(id)] {
			// The child died in its handler, holding the lease: a
			// survivor processed a retry once the lease ended.
			orphaned++
			if localHooks.count(id) != 1 {
				t.Fatalf("delivery %s, in the killed child's handler, then processed %d times by the survivors, want once", id, localHooks.count(id))
			}
		}
		byChild, bySurvivors := childHooks[tokenDigest(id)], localHooks.count(id)
		_, childAcked := ackedByChild.Load(id)
		_, noReply := hookNoReply.Load(id)
		switch {
		case byChild+bySurvivors == 0:
			t.Fatalf("delivery %s acknowledged but never processed", id)
		case byChild > 1 || bySurvivors > 1:
			t.Fatalf("delivery %s processed %d times by the child, %d by the survivors", id, byChild, bySurvivors)
		case childAcked && bySurvivors != 0:
			t.Fatalf("delivery %s acknowledged by the child, then processed again by a survivor", id)
		case byChild == 1 && bySurvivors == 1 && !noReply:
			t.Fatalf("delivery %s processed twice though the child answered every copy", id)
		case byChild == 1 && bySurvivors == 1:
			hooksTwice++
		case byChild == 1:
			hooksByChild++
		default:
			hooksBySurvivors++
			if noReply {
				hooksRetriedAfterKill++
			}
		}
	}
	t.Logf("%d webhook deliveries, all acknowledged: %d processed by the child, %d by the survivors (%d of them after a copy the child never answered; %d were in the child's handler when it was killed), %d twice (the child processed and died before confirming)",
		len(hookIDs), hooksByChild, hooksBySurvivors, hooksRetriedAfterKill, orphaned, hooksTwice)
	if orphaned == 0 {
		t.Fatal("the child was killed with no delivery in its handler")
	}

	noReplies := 0
	childFailed.Range(func(any, any) bool { noReplies++; return true })
	t.Logf("%d tokens: %d acted on by the child before it was killed, %d by the survivors, %d burned (claimed by the child, which died before acting); %d tokens had a redeem the child never answered; the listing asked %d pages again",
		len(toks), acceptedByChild, acceptedBySurvivors, burned, noReplies, listRetries.Load())
}
