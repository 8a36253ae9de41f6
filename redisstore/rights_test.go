package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// documentedACL reads the fleet's ACL from docs/fleet-reference.md ("The
// fleet's ACL"): its rules, with the example prefix's key pattern
// (~myapp:replay:*) replaced by prefix's, and +waitaof, which the doc
// adds where the server knows WAITAOF, when c's server does (Valkey 8, not
// Redis 7.0, whose ACL refuses the rule); c nil leaves it out.
func documentedACL(t *testing.T, prefix string, c *redis.Client) []string {
	t.Helper()
	doc, err := os.ReadFile("../docs/fleet-reference.md")
	must(t, err)
	_, para, ok := strings.Cut(string(doc), "**The fleet's ACL.**")
	if !ok {
		t.Fatal(`docs/fleet-reference.md has no "The fleet's ACL" paragraph`)
	}
	m := regexp.MustCompile("`(-@all[^`]*)`").FindStringSubmatch(para)
	if m == nil {
		t.Fatal(`"The fleet's ACL" names no ACL line (` + "`-@all ...`" + `)`)
	}
	rules := strings.Fields(m[1])
	for i, r := range rules {
		if r == "~myapp:replay:*" {
			rules[i] = "~" + prefix + "*"
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(para), " "), "`+waitaof` on a server that knows it") {
		t.Fatal(`"The fleet's ACL" does not add +waitaof where the server knows it`)
	}
	if c != nil {
		info, err := c.Do(context.Background(), "COMMAND", "INFO", "waitaof").Slice()
		must(t, err)
		if len(info) == 1 && info[0] != nil {
			rules = append(rules, "+waitaof")
		}
	}
	return rules
}

// aclUser creates user on admin's server with rules and returns a client
// logged in as it, closed when the test ends.
func aclUser(t *testing.T, srv *server, admin *redis.Client, user string, rules []string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw"}
	args = append(args, anySlice(rules)...)
	must(t, admin.Do(context.Background(), args...).Err())
	// DisableIdentity: go-redis greets each connection with CLIENT SETINFO
	// (Valkey 8 and Redis 7.2 know it) and ignores a refusal, which ACL
	// LOG would still record; the store never sends it.
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), Username: user, Password: "pw", ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// deniedCommands is what ACL LOG holds of commands or keys refused on
// admin's server: none when every command the store ran was allowed.
func deniedCommands(t *testing.T, admin *redis.Client) []string {
	t.Helper()
	entries, err := admin.Do(context.Background(), "ACL", "LOG").Slice()
	must(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, fmt.Sprint(e))
	}
	return out
}

// The ACL docs/fleet-reference.md documents is exactly what the store
// verifies (the rules of Store.rights for the default Options, and
// +config|get for the facts it reads), and under it, on a real server, a
// store opens and serves claims, leases, records, Status and Release,
// and its loss path runs: a FLUSHALL is found by the recheck, every
// shard is fenced and the ledger notes it. Nothing is refused (ACL LOG
// stays empty).
func TestDocumentedACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const prefix = "acl:"
	// The store on a *redis.Client, unconnected: what it verifies.
	unconnected := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer unconnected.Close()
	probe := closing(t, mustNew(t, unconnected, Options{Prefix: prefix}))
	want := strings.Fields("-@all " + probe.aclLine(probe.rights()) + " +config|get")
	if doc := append(documentedACL(t, prefix, nil), "+waitaof"); !sameSet(doc, want) {
		t.Fatalf("docs/fleet-reference.md's ACL, with +waitaof, is\n  %s\nthe store verifies\n  %s", strings.Join(doc, " "), strings.Join(want, " "))
	}
	srv := newServer(t)
	admin := srv.client()
	rules := documentedACL(t, prefix, admin)
	c := aclUser(t, srv, admin, "fleet", rules)
	// Provisioning is the operator's deploy step, under its own user
	// (ctoken-store provision); the fleet's user opens and claims.
	provisioned(t, admin, Options{Prefix: prefix, Logger: quietLogger()})
	must(t, admin.Do(ctx, "ACL", "LOG", "RESET").Err())
	s := closing(t, mustOpen(t, c, Options{Prefix: prefix, Logger: quietLogger()}))
	wantClaim(t, s, "x", time.Now().Add(time.Minute), true)
	wantClaim(t, s, "x", time.Now().Add(time.Minute), false)
	must(t, s.Release(ctx, "x"))
	recheckNow(t, s)
	// A webhook delivery's lease steps.
	l := acquireLease(t, s, "d", time.Minute, replay.LeaseAcquired)
	must(t, s.RenewLease(ctx, "d", l.Token, time.Minute))
	must(t, s.ConfirmLease(ctx, "d", l.Token, time.Now().Add(time.Minute)))
	// An idempotency record, written and replayed.
	r := acquireRecord(t, s, "k", []byte("fp"), replay.LeaseAcquired)
	must(t, s.ConfirmRecord(ctx, "k", r.Token, time.Now().Add(time.Minute), []byte("fp"), []byte("result")))
	if got, err := s.AcquireRecord(ctx, "k", time.Minute, []byte("fp")); err != nil || got.State != replay.LeaseDone || string(got.Result) != "result" {
		t.Fatalf("replay under the ACL = %+v, %v", got, err)
	}
	if n, err := admin.HLen(ctx, s.serversKey()).Result(); err != nil || n == 0 {
		t.Fatalf("%d baselines in <prefix>servers (%v); want the fleet user's", n, err)
	}
	mustStatus(t, s)
	// The loss path: found, fenced and noted under the fleet's user.
	must(t, admin.FlushAll(ctx).Err())
	wantRefused(t, s, "y", time.Now().Add(time.Minute), ErrFenced) // its shard's marker is gone: fenced
	s.Claim(ctx, "y", time.Now().Add(time.Minute))                 // starts the check the fence asked for
	waitChecks(t, s)
	st := mustStatus(t, s)
	if st.Fenced != Shards || !lossNoted(t, s) {
		t.Fatalf("after FLUSHALL: %d of %d shards fenced, loss noted %v; want every shard fenced and noted", st.Fenced, Shards, lossNoted(t, s))
	}
	if d := deniedCommands(t, admin); len(d) > 0 {
		t.Fatalf("the fleet's user was refused %d times under the documented ACL: %v", len(d), d)
	}
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// Open refuses a user that lacks any one rule of the documented ACL with
// ErrConfig whose Reason names that rule (the ACL line to add), on a real
// server, before it runs anything but the rights check; so do the users
// the review tried: +@all without the dangerous commands (no INFO, ROLE),
// -info -config, and -@dangerous with AllowAsyncReplicas. Durability's
// WAIT is verified too.
func TestOpenRefusesUserWithoutRight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const prefix = "acl:"
	srv := newServer(t)
	admin := srv.client()
	rules := documentedACL(t, prefix, admin)
	provisioned(t, admin, Options{Prefix: prefix, Logger: quietLogger()})
	refused := func(t *testing.T, user string, rules []string, opts Options, named ...string) {
		t.Helper()
		c := aclUser(t, srv, admin, user, rules)
		opts.Prefix, opts.Logger = prefix, quietLogger()
		s, err := Open(ctx, c, opts)
		if err == nil {
			s.Close()
			t.Fatalf("Open as a user with %s: served; want ErrConfig", strings.Join(rules, " "))
		}
		if !errors.Is(err, ErrConfig) {
			t.Fatalf("Open = %v; want ErrConfig", err)
		}
		for _, n := range named {
			if !strings.Contains(Reason(err)+" ", " "+n+" ") {
				t.Fatalf("Reason %q; want it to name %s", Reason(err), n)
			}
		}
	}
	for i, r := range rules {
		if !strings.HasPrefix(r, "+") {
			continue
		}
		t.Run("without "+r, func(t *testing.T) {
			without := slices.Delete(slices.Clone(rules), i, i+1)
			switch r {
			case "+config|get": // the facts it reads are the risks Allow* accept
				refused(t, "no-config", without, Options{}, "AllowEviction")
				refused(t, "no-config-eviction", without, Options{AllowEviction: true}, "AllowRollback")
			default:
				refused(t, fmt.Sprint("no", i), without, Options{}, r)
			}
		})
	}
	t.Run("without +wait, with Durability", func(t *testing.T) {
		refused(t, "no-wait", rules, Options{Durability: Durability{Replicas: 1}}, "+wait")
	})
	t.Run("without the key pattern", func(t *testing.T) {
		keys := slices.Index(rules, "~"+prefix+"*")
		refused(t, "no-keys", append(slices.Delete(slices.Clone(rules), keys, keys+1), "~other:*"), Options{}, "~"+prefix+"*")
	})
	for _, tt := range []struct {
		name  string
		rules []string
		opts  Options
		named []string
	}{
		{"+@all -@dangerous +role", []string{"+@all", "-@dangerous", "+role", "~*"}, Options{}, []string{"+info"}},
		{"+@all -info -config", []string{"+@all", "-info", "-config", "~*"}, Options{}, []string{"+info"}},
		{"-@dangerous, AllowAsyncReplicas", []string{"+@all", "-@dangerous", "~*"}, Options{AllowAsyncReplicas: true}, []string{"+info", "+role"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			refused(t, strings.NewReplacer(" ", "", "@", "", "+", "", "-", "_", ",", "").Replace(tt.name), tt.rules, tt.opts, tt.named...)
		})
	}
}

// With CONFIG renamed away (managed services), the facts it showed are
// judged from what the user can read, on a real server: the eviction
// policy, which nothing else shows, is refused unless AllowEviction; the
// persistence is read from INFO persistence, and refused unless
// AllowRollback wherever it cannot rule out a rollback: RDB snapshots
// configured but none taken yet, one taken (rdb_saves), AOF whose
// appendfsync is unread. With both options the store serves and reports
// both risks.
func TestOpenJudgesUnreadFactsWithoutConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const prefix = "noconf:"
	open := func(t *testing.T, srv *server, opts Options, named ...string) {
		t.Helper()
		opts.Prefix, opts.Logger = prefix, quietLogger()
		s, err := Open(ctx, srv.client(), opts)
		if err == nil {
			s.Close()
			t.Fatal("Open served; want ErrConfig")
		}
		if !errors.Is(err, ErrConfig) {
			t.Fatalf("Open = %v; want ErrConfig", err)
		}
		for _, n := range named {
			if !strings.Contains(Reason(err), n) {
				t.Fatalf("Reason %q; want it to name %q", Reason(err), n)
			}
		}
	}
	both := Options{AllowEviction: true, AllowRollback: true}
	rdb := newServer(t, "--rename-command", "CONFIG", "", "--save", "3600 1")
	provisioned(t, rdb.client(), Options{Prefix: prefix, Logger: quietLogger(), AllowEviction: true, AllowRollback: true})
	t.Run("policy unread", func(t *testing.T) {
		open(t, rdb, Options{}, "maxmemory-policy cannot be read", "AllowEviction")
	})
	t.Run("snapshots configured, none taken", func(t *testing.T) {
		open(t, rdb, Options{AllowEviction: true}, "whether RDB snapshots are on cannot be read", "AllowRollback")
	})
	t.Run("a snapshot taken", func(t *testing.T) {
		c := rdb.client()
		must(t, c.Do(ctx, "SAVE").Err())
		open(t, rdb, Options{AllowEviction: true}, "rdb_saves", "AllowRollback")
	})
	t.Run("both risks accepted", func(t *testing.T) {
		var ev events
		opts := both
		opts.Prefix, opts.Logger, opts.Observer = prefix, quietLogger(), ev.observe
		s := closing(t, mustOpen(t, rdb.client(), opts))
		wantClaim(t, s, "x", time.Now().Add(time.Minute), true)
		if n := ev.count(replay.EventRiskAccepted); n != 2 {
			t.Fatalf("%d risks reported; want AllowEviction's and AllowRollback's", n)
		}
	})
	t.Run("AOF, appendfsync unread", func(t *testing.T) {
		srv := newServer(t, "--rename-command", "CONFIG", "", "--appendonly", "yes", "--appendfsync", "always")
		provisioned(t, srv.client(), Options{Prefix: prefix, Logger: quietLogger(), AllowEviction: true, AllowRollback: true})
		open(t, srv, Options{AllowEviction: true}, "appendfsync cannot be read", "AllowRollback")
	})
}

// A right revoked while the store serves (here +hget, which the checks
// need to read the server baselines) is found by the next check: every
// call refuses with ErrConfig naming the rule, with one Error line,
// instead of failing NOPERM for good; given back, the next check serves
// again. Real server.
func TestRevokedRightRefusesUntilGivenBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const prefix = "revoke:"
	srv := newServer(t)
	admin := srv.client()
	c := aclUser(t, srv, admin, "fleet", documentedACL(t, prefix, admin))
	provisioned(t, admin, Options{Prefix: prefix, Logger: quietLogger()})
	var logs syncBuffer
	s := closing(t, mustOpen(t, c, Options{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(&logs, nil)), RecheckInterval: time.Hour}))
	wantClaim(t, s, "a", time.Now().Add(time.Minute), true)
	must(t, admin.Do(ctx, "ACL", "SETUSER", "fleet", "-hget").Err())
	recheckNow(t, s)
	err := wantRefused(t, s, "b", time.Now().Add(time.Minute), ErrConfig)
	if !strings.Contains(Reason(err), "+hget ") {
		t.Fatalf("refusal %q; want it to name +hget", Reason(err))
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "+hget") {
		t.Fatalf("no Error line naming +hget:\n%s", logs.String())
	}
	must(t, admin.Do(ctx, "ACL", "SETUSER", "fleet", "+hget").Err())
	recheckNow(t, s)
	wantClaim(t, s, "b", time.Now().Add(time.Minute), true)
}
