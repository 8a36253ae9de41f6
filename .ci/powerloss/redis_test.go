package powerloss_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/redisstore"
	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server (or valkey-server) on a machine's mount.
type redisServer struct {
	t      *testing.T
	bin    string
	args   []string
	port   string
	cmd    *exec.Cmd
	exited chan struct{}
	out    *bytes.Buffer
}

// start runs the server on m's mount and waits until it answers PING.
func (r *redisServer) start(m *machine) {
	r.t.Helper()
	var err error
	for range 5 {
		r.port = freePort(r.t)
		args := append([]string{"--bind", "127.0.0.1", "--port", r.port, "--dir", m.mnt,
			"--protected-mode", "yes", "--save", "", "--appendonly", "yes"}, r.args...)
		r.cmd = exec.Command(r.bin, args...)
		r.out = new(bytes.Buffer)
		r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err = r.cmd.Start(); err != nil {
			r.t.Fatal(err)
		}
		exited := make(chan struct{})
		r.exited = exited
		go func(cmd *exec.Cmd) { cmd.Wait(); close(exited) }(r.cmd)
		if err = r.waitPing(); err == nil {
			return
		}
		r.kill()
	}
	r.t.Fatalf("%s did not start: %v\n%s", r.bin, err, r.out)
}

func (r *redisServer) addr() string { return "127.0.0.1:" + r.port }

func (r *redisServer) waitPing() error {
	c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		select {
		case <-r.exited:
			return errors.New("the server exited")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("no PING answer within 60 s")
}

// kill SIGKILLs the server (by PID) and waits for it to exit.
func (r *redisServer) kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	r.cmd.Process.Kill()
	<-r.exited
}

func redisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // a retried claim whose reply was lost could report "duplicate"
		PoolSize:              16,
	})
}

// TestRedisPowerLoss claims, leases and records IDs (see load) on a Redis
// whose data directory is on a dropfs mount, kills the server and cuts the
// power at a random moment, restarts it, and tries every acknowledged step
// again (see again). Under appendfsync always (the setting the store
// accepts without an opt-in) none may be accepted again; under everysec
// with AllowRollback the loss is measured and printed.
func TestRedisPowerLoss(t *testing.T) {
	type flavour struct{ name, env, bin string }
	flavours := []flavour{{"redis", "CTOKEN_REDIS_SERVER", "redis-server"}, {"valkey", "CTOKEN_VALKEY_SERVER", "valkey-server"}}
	tests := []struct {
		appendfsync   string
		allowRollback bool
		mustKeepAll   bool
	}{
		{"always", false, true},
		{"everysec", true, false},
	}
	for _, fl := range flavours {
		bin := os.Getenv(fl.env)
		if bin == "" {
			bin = fl.bin
		}
		path, lookErr := exec.LookPath(bin)
		for _, tt := range tests {
			name := fmt.Sprintf("%s appendfsync %s", fl.name, tt.appendfsync)
			if tt.allowRollback {
				name += " with AllowRollback, measured"
			} else {
				name += " accepts nothing twice"
			}
			t.Run(name, func(t *testing.T) {
				if lookErr != nil {
					if fl.name == "valkey" {
						t.Skipf("no %s (optional; bookworm-backports has it): %v", bin, lookErr)
					}
					needs(t, "no %s: apt-get install redis-server, or set %s: %v", bin, fl.env, lookErr)
				}
				c := redisPowerLoss(t, path, tt.appendfsync, tt.allowRollback)
				c.check(t, name, tt.mustKeepAll, false)
			})
		}
	}
}

func redisPowerLoss(t *testing.T, bin, appendfsync string, allowRollback bool) tallies {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 65))
	m := newMachine(t, nil)
	srv := &redisServer{t: t, bin: bin, args: []string{"--appendfsync", appendfsync}}
	t.Cleanup(srv.kill) // before the machine's unmount
	srv.start(m)
	opts := redisstore.Options{
		Prefix:        fmt.Sprintf("powerloss:%d:", seed),
		Timeout:       10 * time.Second,
		AllowRollback: allowRollback,
		Logger:        slog.New(slog.DiscardHandler),
	}
	client := redisClient(srv.addr())
	store, err := redisstore.New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := store.ProvisionNew(ctx); err != nil {
		t.Fatalf("ProvisionNew: %v", err)
	}
	isLoss := func(err error) bool {
		return errors.Is(err, redisstore.ErrFenced) || errors.Is(err, redisstore.ErrConfig)
	}
	var total tallies
	for round := range cuts(t) {
		step := func(k kind, id string) (bool, error) { return do(ctx, store, nil, k, id) }
		done, _ := load(t, rng, round, false, step, func() {
			srv.kill()
			m.cut()
		})
		store.Close()
		client.Close()
		m.boot()
		srv.start(m)
		client = redisClient(srv.addr())
		if store, err = redisstore.New(client, opts); err != nil {
			t.Fatal(err)
		}
		c, firstErr := decideAll(done, func(k kind, id string) (bool, error) { return again(ctx, store, k, id) }, isLoss)
		c.log(t, fmt.Sprintf("cut %d", round+1), false)
		if firstErr != nil {
			t.Logf("cut %d: first refusal or error: %v (reason: %s)", round+1, firstErr, oneLine(redisstore.Reason(firstErr)))
		}
		total.add(c)
		if c.sum().refusedLoss > 0 {
			// A fenced key space refuses every claim for a horizon: start
			// the next round on a fresh prefix.
			opts.Prefix = fmt.Sprintf("powerloss:%d:%d:", seed, round+1)
			store.Close()
			if store, err = redisstore.New(client, opts); err != nil {
				t.Fatal(err)
			}
			if _, err := store.ProvisionNew(ctx); err != nil {
				t.Fatalf("ProvisionNew: %v", err)
			}
		}
	}
	store.Close()
	client.Close()
	return total
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
