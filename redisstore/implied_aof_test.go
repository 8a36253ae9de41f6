package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newWAITAOFServer starts a server that knows WAITAOF (Redis 7.2 or newer,
// Valkey 8) with extraArgs: the default binary (CTOKEN_REDIS_SERVER, else
// redis-server) when it is new enough, else valkey-server
// (CTOKEN_VALKEY_SERVER, else on PATH). Without either the test is
// skipped: the implied wait needs WAITAOF.
func newWAITAOFServer(t *testing.T, extraArgs ...string) *server {
	t.Helper()
	srv := newServer(t, extraArgs...)
	info := mustInfo(t, srv.client(), "server")
	if versionAtLeast(info, 7, 2) {
		return srv
	}
	srv.kill()
	bin := valkeyBinary()
	if bin == "" {
		t.Skipf("redis %s has no WAITAOF and valkey-server is not installed (.ci/backports.sh installs it)", serverVersion(info))
	}
	return newServerBin(t, bin, extraArgs...)
}

// valkeyBinary is CTOKEN_VALKEY_SERVER, else valkey-server on PATH; ""
// when neither exists.
func valkeyBinary() string {
	if env := os.Getenv("CTOKEN_VALKEY_SERVER"); env != "" {
		return env
	}
	bin, _ := exec.LookPath("valkey-server")
	return bin
}

// switchAOFOffBeforeProbe is a client hook that, once armed, switches AOF
// off (through admin) just before the client sends the checks' WAITAOF
// probe (WAITAOF 1 0 1): the ordering of the race, forced.
type switchAOFOffBeforeProbe struct {
	admin *redis.Client
	armed atomic.Bool
	fired atomic.Int32
}

func (h *switchAOFOffBeforeProbe) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *switchAOFOffBeforeProbe) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) == 4 && fmt.Sprint(a) == "[WAITAOF 1 0 1]" && h.armed.CompareAndSwap(true, false) {
			if err := h.admin.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
				return err
			}
			h.fired.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *switchAOFOffBeforeProbe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The race of decideLocalAOF, forced: a server check reads AOF with
// appendfsync always, AOF is switched off, and the check's WAITAOF probe
// fails. The failure is evidence of the switch: the implied wait stays
// on, every claim after the switch is refused (ErrNotDurable, then the
// fence of the check that runs at once), and after kill -9 and a start
// that loads the AOF none of the IDs reported first is accepted again.
// Each run forces the ordering; the runs repeat it on fresh servers.
func aOFProbeFailingAfterAFreshReadKeepsTheWait(t *testing.T) {
	t.Parallel()
	const runs = 5
	for run := range runs {
		t.Run(fmt.Sprint("run ", run), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := newWAITAOFServer(t, "--appendonly", "yes", "--appendfsync", "always")
			c := srv.client()
			hook := &switchAOFOffBeforeProbe{admin: srv.client()}
			c.AddHook(hook)
			opts := Options{Prefix: "race:", Logger: quietLogger(), Timeout: 5 * time.Second, RecheckInterval: time.Hour}
			s := provisioned(t, c, opts)
			before := claimFresh(t, s, "before", 50)
			if !s.dur.implied.on.Load() {
				t.Fatal("the implied local AOF wait is off on a server with AOF always and WAITAOF")
			}
			hook.armed.Store(true)
			must(t, s.checkServer(ctx))
			if hook.fired.Load() != 1 {
				t.Fatal("the hook did not switch AOF off before the probe")
			}
			if !s.dur.implied.on.Load() {
				t.Fatal("a failed WAITAOF probe after a fresh read of AOF always switched the implied wait off")
			}
			var accepted []string
			refused := map[string]int{}
			for i := range 200 {
				id := fmt.Sprint("after-", i)
				first, err := s.Claim(ctx, id, time.Now().Add(10*time.Minute))
				switch {
				case errors.Is(err, ErrNotDurable):
					refused["ErrNotDurable"]++
				case errors.Is(err, ErrFenced):
					refused["ErrFenced"]++
				case err != nil:
					t.Fatalf("claim after the switch: %v", err)
				case first:
					accepted = append(accepted, id)
				}
			}
			s.cancels.wg.Wait() // the check that runs at once, and its fence
			wantRefused(t, s, "after-the-check", time.Now().Add(10*time.Minute), ErrFenced)
			srv.kill()
			twice := acceptedAgainAfterStart(t, srv, "race:", append(before, accepted...))
			t.Logf("after the switch: %d reported first, refused %v; after kill -9 and restart %d of %d accepted twice", len(accepted), refused, twice, len(before)+len(accepted))
			if len(accepted) != 0 || twice != 0 {
				t.Fatalf("%d claims reported first after AOF was switched off, %d IDs accepted twice; want 0 and 0", len(accepted), twice)
			}
		})
	}
}
