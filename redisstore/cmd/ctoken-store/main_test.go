package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// TestMain silences go-redis's logger, as main does.
func TestMain(m *testing.M) {
	logging.Disable()
	os.Exit(m.Run())
}

// redisServer is a redis-server of the test's own on a loopback port,
// without persistence unless args say otherwise, killed when the test ends.
type redisServer struct {
	t    *testing.T
	bin  string
	addr string
	args []string
	cmd  *exec.Cmd
}

// startRedis starts a redis-server (CTOKEN_REDIS_SERVER, else redis-server
// on PATH); without one the test is skipped, except under CI=true.
func startRedis(t *testing.T, args ...string) *redisServer {
	t.Helper()
	bin := os.Getenv("CTOKEN_REDIS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("redis-server not found but CI=true")
			}
			t.Skip("redis-server not found; run under .ci/redis.sh")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	s := &redisServer{t: t, bin: bin, addr: addr, args: args}
	t.Cleanup(s.kill)
	s.start()
	return s
}

func (s *redisServer) start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.addr)
	args := append([]string{"--bind", "127.0.0.1", "--port", port, "--dir", s.t.TempDir(), "--save", "", "--appendonly", "no"}, s.args...)
	s.cmd = exec.Command(s.bin, args...)
	must(s.t, s.cmd.Start())
	password := ""
	for i, a := range s.args {
		if a == "--requirepass" {
			password = s.args[i+1]
		}
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr, Password: password, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Fatal("redis-server did not answer PING")
		}
	}
}

func (s *redisServer) kill() {
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGKILL)
		s.cmd.Wait()
		s.cmd = nil
	}
}

// client is an application's client of the server.
func (s *redisServer) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// must fails t when err is not nil.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantOutput fails t unless what exited with want and its output out
// holds every one of wants.
func wantOutput(t *testing.T, what string, code, want int, out string, wants ...string) {
	t.Helper()
	if code != want {
		t.Fatalf("%s = %d, %q; want %d", what, code, out, want)
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Fatalf("%s = %q; want %q in it", what, out, w)
		}
	}
}

// wantFirst fails t unless s's claim of id is first.
func wantFirst(t *testing.T, s *redisstore.Store, id string, until time.Time) {
	t.Helper()
	if first, err := s.Claim(context.Background(), id, until); !first || err != nil {
		t.Fatalf("claim of %s = %v, %v; want first", id, first, err)
	}
}

// ctokenStore runs the command line and returns its exit status and output.
func ctokenStore(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Usage errors exit 2 before talking to any server.
func TestUsageErrorsExitTwo(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"no command", nil, 2},
		{"unknown command", []string{"frobnicate"}, 2},
		{"help", []string{"help"}, 0},
		{"no server", []string{"status"}, 2},
		{"two servers", []string{"status", "-addr", "127.0.0.1:1", "-cluster", "127.0.0.1:2"}, 2},
		{"sentinel without master", []string{"status", "-sentinel", "127.0.0.1:1"}, 2},
		{"master without sentinel", []string{"status", "-addr", "127.0.0.1:1", "-master", "m"}, 2},
		{"unknown flag", []string{"provision", "-addr", "127.0.0.1:1", "-json"}, 2},
		{"an argument left", []string{"status", "-addr", "127.0.0.1:1", "extra"}, 2},
		{"reopen without who", []string{"reopen", "-addr", "127.0.0.1:1", "-reason", "INC-1"}, 2},
		{"reopen without why", []string{"reopen", "-addr", "127.0.0.1:1", "-accepted-by", "alice"}, 2},
		{"a prefix with a brace", []string{"status", "-addr", "127.0.0.1:1", "-prefix", "a{b"}, 2},
		{"a malformed URL", []string{"status", "-url", "redis://:hunter2@[::1"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := ctokenStore(tt.args...)
			if code != tt.want {
				t.Fatalf("ctoken-store %q = %d (%s); want %d", tt.args, code, stderr, tt.want)
			}
			if strings.Contains(stderr, "hunter2") {
				t.Fatalf("stderr shows the password: %s", stderr)
			}
		})
	}
}

// A server that cannot be reached is a failure: exit 1. The port stays
// held by a listener that drops every connection, so no server another test
// starts in parallel can take it between the choice and the dial.
func TestUnreachableServerExitsOne(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	for _, cmd := range []string{"provision", "status"} {
		if code, _, stderr := ctokenStore(cmd, "-addr", addr, "-timeout", "2s"); code != 1 {
			t.Fatalf("%s against a port that drops every connection = %d (%s); want 1", cmd, code, stderr)
		}
	}
}

// The first deploy: Open refuses the prefix, naming provision; provision -new
// opens it; Open serves; provision again changes nothing.
func TestFirstDeployProvisionThenOpenServes(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	opts := redisstore.Options{Prefix: "pay:", Logger: quiet()}
	if _, err := redisstore.Open(ctx, srv.client(), opts); !errors.Is(err, redisstore.ErrConfig) || !strings.Contains(redisstore.Reason(err), "ctoken-store provision") {
		t.Fatalf("Open before provision = %v; want ErrConfig naming ctoken-store provision", err)
	}
	code, stdout, _ := ctokenStore("provision", "-addr", srv.addr, "-prefix", "pay:", "-new")
	wantOutput(t, "provision", code, 0, stdout, "provisioned, 64 of 64")
	s, err := redisstore.Open(ctx, srv.client(), opts)
	must(t, err)
	defer s.Close()
	wantFirst(t, s, "tok-1", time.Now().Add(time.Minute))
	code, stdout, _ = ctokenStore("provision", "-addr", srv.addr, "-prefix", "pay:", "-new")
	wantOutput(t, "provision again", code, 0, stdout, "already provisioned")
	code, stdout, _ = ctokenStore("status", "-addr", srv.addr, "-prefix", "pay:")
	wantOutput(t, "status", code, 0, stdout, "64 open, 0 fenced, 0 missing", "verdict  serving", "provisioned", "appendonly no")
}

// status shows the key space's horizon, as provisioned, when -horizon is
// not given, and says it is unknown when the ledger records none; never
// the flag's default. -json's Horizon is then 0.
func TestStatusShowsTheKeySpacesHorizonNotTheFlagsDefault(t *testing.T) {
	srv := startRedis(t)
	for prefix, horizon := range map[string]string{"otp:": "10m", "lost:": "2h"} {
		if code, _, stderr := ctokenStore("provision", "-addr", srv.addr, "-prefix", prefix, "-horizon", horizon, "-new"); code != 0 {
			t.Fatalf("provision %s = %d: %s", prefix, code, stderr)
		}
	}
	must(t, srv.client().Del(context.Background(), "lost:ledger").Err())
	def := redisstore.DefaultHorizon.String()
	tests := []struct {
		name   string
		args   []string
		want   string
		absent string
	}{
		{"without -horizon: as provisioned", []string{"-prefix", "otp:"}, "horizon  10m0s (as provisioned, from the ledger)", def},
		{"with the same -horizon", []string{"-prefix", "otp:", "-horizon", "10m"}, "horizon  10m0s (-horizon, as provisioned)", def},
		{"with another -horizon: both", []string{"-prefix", "otp:", "-horizon", "1h"}, "horizon  1h0m0s (-horizon; provisioned with 10m0s)", def},
		{"without -horizon, the ledger lost: unknown", []string{"-prefix", "lost:"}, "horizon  unknown: the ledger records none", def},
		{"with -horizon, the ledger lost", []string{"-prefix", "lost:", "-horizon", "2h"}, "horizon  2h0m0s (-horizon; the ledger records none)", def},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := ctokenStore(append([]string{"status", "-addr", srv.addr}, tt.args...)...)
			if code != 0 || !strings.Contains(stdout, tt.want) {
				t.Fatalf("status = %d, %q (%s); want %q", code, stdout, stderr, tt.want)
			}
			if strings.Contains(stdout, tt.absent) {
				t.Fatalf("status shows %s, the flag's default:\n%s", tt.absent, stdout)
			}
		})
	}
	t.Run("-json without -horizon: Horizon 0, ProvisionedHorizon the key space's", func(t *testing.T) {
		code, stdout, _ := ctokenStore("status", "-addr", srv.addr, "-prefix", "otp:", "-json")
		var st redisstore.Status
		if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
			t.Fatalf("status -json = %d, %v: %s", code, err, stdout)
		}
		if st.Horizon != 0 || st.ProvisionedHorizon != 10*time.Minute {
			t.Fatalf("Horizon %v, ProvisionedHorizon %v; want 0, 10m", st.Horizon, st.ProvisionedHorizon)
		}
	})
}

// A restart of a Redis without persistence while a store runs: the
// store's claims fence the shards; a new Open refuses naming the way back;
// provision refuses; status shows the fences; reopen with the risk
// accepted opens the key space, the running store and a new Open serve,
// and the risk is reported and recorded.
func TestRestartWithoutPersistenceReopenServes(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	if code, _, stderr := ctokenStore("provision", "-addr", srv.addr, "-prefix", "pay:", "-new"); code != 0 {
		t.Fatalf("provision = %d: %s", code, stderr)
	}
	opts := redisstore.Options{Prefix: "pay:", Logger: quiet()}
	running, err := redisstore.Open(ctx, srv.client(), opts)
	must(t, err)
	defer running.Close()
	until := time.Now().Add(time.Minute)
	for i := range 20 {
		wantFirst(t, running, fmt.Sprint("before-", i), until)
	}
	srv.kill()
	srv.start()
	// Fewer claims than shards: the fences they write on the shards they
	// find without a marker leave fewer markers than the 64 the previous
	// run held, so each check of the new run finds the loss.
	fenced := 0
	for i := range 20 {
		if _, err := running.Claim(ctx, fmt.Sprint("after-", i), until); errors.Is(err, redisstore.ErrFenced) {
			fenced++
		}
	}
	if fenced == 0 {
		t.Fatal("no claim fenced after the restart")
	}
	// The running store's check found the loss and fences every shard in
	// the background; reopening before it has would be undone by it.
	for i, deadline := 0, time.Now().Add(time.Minute); !fencedAll(ctx, t, running, fmt.Sprint("probe-", i)); i++ {
		if time.Now().After(deadline) {
			t.Fatal("the running store did not fence the key space within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err = redisstore.Open(ctx, srv.client(), opts)
	if !errors.Is(err, redisstore.ErrFenced) || !strings.Contains(redisstore.Reason(err), "ctoken-store reopen") || !strings.Contains(err.Error(), "fenced until") {
		t.Fatalf("Open after the loss = %v; want ErrFenced naming the fence's end and ctoken-store reopen", err)
	}
	code, _, stderr := ctokenStore("provision", "-addr", srv.addr, "-prefix", "pay:")
	wantOutput(t, "provision after the loss", code, 1, stderr, "ctoken-store reopen")
	code, stdout, _ := ctokenStore("status", "-addr", srv.addr, "-prefix", "pay:")
	wantOutput(t, "status", code, 0, stdout, "FENCED", "fenced until", "0 open", "safe to reopen from")
	t.Logf("status after the loss:\n%s", stdout)
	code, stdout, stderr = ctokenStore("reopen", "-addr", srv.addr, "-prefix", "pay:", "-accepted-by", "alice (on call)", "-reason", "INC-7: Redis restarted without persistence")
	if code != 0 || !strings.Contains(stdout, "reopened 64 of 64") || !strings.Contains(stderr, "risk_accepted") {
		t.Fatalf("reopen = %d, %q, %q; want 0, 64 shards reopened and the risk_accepted event logged", code, stdout, stderr)
	}
	wantFirst(t, running, "fresh", until)
	s, err := redisstore.Open(ctx, srv.client(), opts)
	must(t, err)
	s.Close()
	code, stdout, _ = ctokenStore("status", "-addr", srv.addr, "-prefix", "pay:", "-json")
	var st redisstore.Status
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		t.Fatalf("status -json = %d, %v: %s", code, err, stdout)
	}
	last := st.Ledger[len(st.Ledger)-1]
	if st.Open != redisstore.Shards || last.Kind != "reopened" || !strings.Contains(last.Detail, "alice (on call)") || !strings.Contains(last.Detail, "INC-7") {
		t.Fatalf("status after reopen: %+v; want every shard open and the reopened entry", st)
	}
}

// fencedAll reports whether s has fenced the key space after the loss it
// found: its ledger entry is written, and s refuses by the fences rather
// than by the loss it has still to fence.
func fencedAll(ctx context.Context, t *testing.T, s *redisstore.Store, probe string) bool {
	t.Helper()
	st, err := s.Status(ctx)
	must(t, err)
	if !slices.ContainsFunc(st.Ledger, func(e redisstore.LedgerEntry) bool { return e.Kind == "loss" }) {
		return false
	}
	_, err = s.Claim(ctx, probe, time.Now().Add(time.Minute))
	return errors.Is(err, redisstore.ErrFenced) && !strings.Contains(redisstore.Reason(err), "is being fenced")
}

// A password comes from CTOKEN_REDIS_PASSWORD or -password-file, and is
// never printed, also when it is wrong. One on the command line is refused
// before any server is asked (exit 2), naming where it goes instead: a
// -url that carries one, whatever its scheme or user, and a password given
// twice or a -password-file that is not one password.
func TestPasswordIsNeverPrinted(t *testing.T) {
	const pw = "s3cret-pw-123"
	srv := startRedis(t, "--requirepass", pw)
	dir := t.TempDir()
	file := func(name, content string) string {
		p := dir + "/" + name
		must(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	tests := []struct {
		name  string
		env   string
		args  []string
		want  int
		names string // what a refusal must name
	}{
		{"from the environment", pw, []string{"status", "-addr", srv.addr}, 0, ""},
		{"from the environment, with a URL naming the user", pw, []string{"status", "-url", "redis://default@" + srv.addr + "/0"}, 0, ""},
		{"from a file", "", []string{"status", "-addr", srv.addr, "-password-file", file("pw", pw)}, 0, ""},
		{"from a file ending in a newline", "", []string{"status", "-addr", srv.addr, "-password-file", file("pw-nl", pw+"\n")}, 0, ""},
		{"from a file ending in CRLF", "", []string{"status", "-addr", srv.addr, "-password-file", file("pw-crlf", pw+"\r\n")}, 0, ""},
		{"wrong, from the environment", pw + "-wrong", []string{"status", "-addr", srv.addr}, 1, ""},
		{"wrong, from a file", "", []string{"status", "-addr", srv.addr, "-password-file", file("pw-wrong", pw+"-wrong\n")}, 1, ""},
		{"redis:// with a password", "", []string{"status", "-url", "redis://:" + pw + "@127.0.0.1:1/0"}, 2, passwordEnv},
		{"redis:// with a user and a password", "", []string{"status", "-url", "redis://alice:" + pw + "@127.0.0.1:1"}, 2, "-password-file"},
		{"rediss:// with a password", "", []string{"provision", "-url", "rediss://:" + pw + "@127.0.0.1:1"}, 2, passwordEnv},
		{"unix:// with a password", "", []string{"reopen", "-url", "unix://:" + pw + "@/tmp/redis.sock", "-accepted-by", "a", "-reason", "r"}, 2, passwordEnv},
		{"a URL with a password and the environment too", pw, []string{"status", "-url", "redis://:" + pw + "@127.0.0.1:1"}, 2, passwordEnv},
		{"the environment and a file both", pw, []string{"status", "-addr", "127.0.0.1:1", "-password-file", file("both", pw)}, 2, "not both"},
		{"an empty file", "", []string{"status", "-addr", "127.0.0.1:1", "-password-file", file("empty", "\n")}, 2, "empty"},
		{"a file of two lines", "", []string{"status", "-addr", "127.0.0.1:1", "-password-file", file("two", pw+"\n"+pw+"\n")}, 2, "more than one line"},
		{"a file too large", "", []string{"status", "-addr", "127.0.0.1:1", "-password-file", file("large", strings.Repeat(pw, 400))}, 2, "over 4096 bytes"},
		{"a file that does not exist", "", []string{"status", "-addr", "127.0.0.1:1", "-password-file", dir + "/absent"}, 2, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(passwordEnv, tt.env)
			code, stdout, stderr := ctokenStore(tt.args...)
			if code != tt.want || !strings.Contains(stderr, tt.names) {
				t.Fatalf("= %d, %q; want %d naming %q", code, stderr, tt.want, tt.names)
			}
			if strings.Contains(stdout+stderr, pw) {
				t.Fatalf("the output shows the password:\n%s\n%s", stdout, stderr)
			}
		})
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// status judges the rights of the user it runs as exactly as Open does: a
// user without one (here +hget, which the server baselines need) is
// REFUSED with the rule to add, not "serving", though every shard is
// open; reopen refuses it the same way; once the right is given, status
// says serving and Open serves.
func TestStatusAgreesWithOpenOnAMissingRight(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	admin := srv.client()
	code, stdout, _ := ctokenStore("provision", "-addr", srv.addr, "-prefix", "pay:", "-new")
	wantOutput(t, "provision", code, 0, stdout, "provisioned, 64 of 64")
	must(t, admin.Do(ctx, "ACL", "SETUSER", "fleet", "on", ">pw", "+@all", "-hget", "~*").Err())
	fleet := redis.NewClient(&redis.Options{Addr: srv.addr, Username: "fleet", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { fleet.Close() })
	opts := redisstore.Options{Prefix: "pay:", Logger: quiet()}
	if _, err := redisstore.Open(ctx, fleet, opts); !errors.Is(err, redisstore.ErrConfig) || !strings.Contains(redisstore.Reason(err), "+hget") {
		t.Fatalf("Open as a user without +hget = %v; want ErrConfig naming +hget", err)
	}
	t.Setenv(passwordEnv, "pw")
	url := "redis://fleet@" + srv.addr + "/0"
	code, stdout, _ = ctokenStore("status", "-url", url, "-prefix", "pay:")
	wantOutput(t, "status as the fleet's user", code, 0, stdout, "64 open, 0 fenced, 0 missing", "verdict  REFUSED", "+hget")
	if strings.Contains(stdout, "verdict  serving") {
		t.Fatalf("status says serving while Open refuses:\n%s", stdout)
	}
	code, _, stderr := ctokenStore("reopen", "-url", url, "-prefix", "pay:", "-accepted-by", "a", "-reason", "r")
	wantOutput(t, "reopen as the fleet's user", code, 1, stderr, "+hget")
	must(t, admin.Do(ctx, "ACL", "SETUSER", "fleet", "+hget").Err())
	code, stdout, _ = ctokenStore("status", "-url", url, "-prefix", "pay:")
	wantOutput(t, "status once the right is given", code, 0, stdout, "verdict  serving")
	s, err := redisstore.Open(ctx, fleet, opts)
	must(t, err)
	s.Close()
}
