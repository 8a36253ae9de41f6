// Command ctoken-store provisions, inspects and reopens the key space of a
// redisstore store: the deployment and recovery steps that do not belong in
// application start-up (docs/fleet.md, "When the store refuses").
//
//	ctoken-store provision -addr 127.0.0.1:6379 -prefix myapp:replay: -new
//	ctoken-store status    -addr 127.0.0.1:6379 -prefix myapp:replay: [-json]
//	ctoken-store reopen    -addr 127.0.0.1:6379 -prefix myapp:replay: \
//	    -accepted-by "alice (on call)" -reason "INC-123: Redis restarted without persistence"
//
// The server is named by exactly one of -addr host:port, -url
// redis://[user@]host:port/db (rediss:// for TLS), -sentinel a,b,c with
// -master name, or -cluster a,b,c. A password comes only from the
// CTOKEN_REDIS_PASSWORD environment variable or from the file named by
// -password-file (one line; a final newline is dropped), never from the
// command line, which every user of the machine can read (ps,
// /proc/PID/cmdline): a -url that carries one is refused, and so is a
// password given both ways. It is never printed.
//
// -prefix and -horizon must be the applications' own (Options.Prefix,
// Options.Horizon), and so must the durability flags (-replicas,
// -replica-aof, -local-aof and the -allow-* flags mirror Options):
// provision and reopen run the server checks the applications' Open runs,
// and refuse a server it would refuse. status without -horizon shows the
// key space's horizon as provisioned (read from its ledger), or says it is
// unknown, never the flag's default; its -json Horizon is then 0.
//
// provision -new opens a new prefix at once (redisstore.Store.ProvisionNew):
// -new is the operator's statement that the prefix never held claims on
// this server (a first deploy), which nothing in Redis can prove. Without
// -new, provision fences a key space with no marker and no evidence either
// way for one lifetime (redisstore.Store.Provision: the key space's
// recorded lifetime, else -horizon), prints when it serves, and exits 1:
// the safe step after Redis lost a key space nobody watched. When no
// lifetime is recorded (a restart without persistence loses the record
// too) it needs -horizon given explicitly, the longest lifetime of any
// claim under the prefix: without it provision refuses with exit 2 and
// writes nothing, rather than fence for the flag's default. provision
// -new still opens a key space while such a fence is its only history. Both
// refuse when anything shows the prefix or the server had a previous
// life. status
// prints what the store knows: shards open, fenced (until when) and
// missing, the key space's ledger, and each master's identity,
// persistence, eviction settings and loss counters; its verdict is
// REFUSED when the user it runs as lacks a right the applications' Open
// verifies (run it as the applications' user, -url redis://user@host, to
// judge theirs), whatever the shards say. reopen opens every
// fenced or missing shard at once (redisstore.Store.Reopen): IDs claimed
// before the loss and not yet expired are accepted again, so it needs
// -accepted-by (who) and -reason (why), which go into the ledger.
//
// Exit status: 0 done, 1 refused or failed, 2 usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ctoken/ctoken/redisstore"
	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

func main() {
	logging.Disable() // go-redis's own dial logs; run prints each failure once
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// passwordEnv names the environment variable a password may come from.
const passwordEnv = "CTOKEN_REDIS_PASSWORD"

// maxPasswordFileBytes bounds what -password-file reads.
const maxPasswordFileBytes = 4096

const usage = `usage: ctoken-store provision|status|reopen [flags]

  provision   bring a key space into service: -new opens a prefix that never
              held claims at once; without -new, a key space of unknown
              history is fenced for one lifetime and serves from then
              (its recorded lifetime; when none is, give -horizon)
  status      what the store knows: shards, fences, ledger, servers
  reopen      open a fenced or lost key space now (needs -accepted-by, -reason)

Run "ctoken-store <command> -h" for the flags.
`

// config is what the flags say.
type config struct {
	addr, url, sentinel, master, cluster string
	passwordFile                         string
	opts                                 redisstore.Options
	timeout                              time.Duration
	jsonOut                              bool
	horizonGiven                         bool // -horizon was on the command line
	statedNew                            bool // provision -new
	acceptedBy, reason                   string
}

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd := args[0]
	switch cmd {
	case "provision", "status", "reopen":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "ctoken-store: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	var c config
	fs := flag.NewFlagSet("ctoken-store "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "", "Redis `host:port`")
	fs.StringVar(&c.url, "url", "", "Redis `URL`, redis://[user@]host:port/db or rediss://, without a password")
	fs.StringVar(&c.passwordFile, "password-file", "", "read the Redis password from this `file` (else from "+passwordEnv+"; never from the command line)")
	fs.StringVar(&c.sentinel, "sentinel", "", "Sentinel addresses, `a,b,c` (with -master)")
	fs.StringVar(&c.master, "master", "", "Sentinel master `name`")
	fs.StringVar(&c.cluster, "cluster", "", "Redis Cluster node addresses, `a,b,c`")
	fs.StringVar(&c.opts.Prefix, "prefix", redisstore.DefaultPrefix, "the applications' Options.Prefix")
	fs.DurationVar(&c.opts.Horizon, "horizon", redisstore.DefaultHorizon, "the applications' Options.Horizon")
	fs.IntVar(&c.opts.Durability.Replicas, "replicas", 0, "the applications' Durability.Replicas")
	fs.IntVar(&c.opts.Durability.ReplicaAOF, "replica-aof", 0, "the applications' Durability.ReplicaAOF")
	fs.BoolVar(&c.opts.Durability.LocalAOF, "local-aof", false, "the applications' Durability.LocalAOF")
	fs.BoolVar(&c.opts.AllowAsyncReplicas, "allow-async-replicas", false, "the applications' AllowAsyncReplicas")
	fs.BoolVar(&c.opts.AllowFewerReplicas, "allow-fewer-replicas", false, "the applications' AllowFewerReplicas")
	fs.BoolVar(&c.opts.AllowEviction, "allow-eviction", false, "the applications' AllowEviction")
	fs.BoolVar(&c.opts.AllowRollback, "allow-rollback", false, "the applications' AllowRollback")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "bound on the whole command")
	if cmd == "provision" {
		fs.BoolVar(&c.statedNew, "new", false, "state that the prefix never held claims on this server (a first deploy): open it at once; without -new a key space of unknown history is fenced for one lifetime")
	}
	if cmd == "status" {
		fs.BoolVar(&c.jsonOut, "json", false, "print the status as JSON")
	}
	if cmd == "reopen" {
		fs.StringVar(&c.acceptedBy, "accepted-by", "", "who accepts that IDs claimed before the loss are accepted again (required)")
		fs.StringVar(&c.reason, "reason", "", "why, e.g. an incident number (required)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fs.Visit(func(f *flag.Flag) { c.horizonGiven = c.horizonGiven || f.Name == "horizon" })
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ctoken-store %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return 2
	}
	if cmd == "reopen" && (strings.TrimSpace(c.acceptedBy) == "" || strings.TrimSpace(c.reason) == "") {
		fmt.Fprintln(stderr, "ctoken-store reopen: -accepted-by and -reason are required: reopening accepts again every ID claimed before the loss that has not expired")
		return 2
	}
	client, err := c.client()
	if err != nil {
		fmt.Fprintf(stderr, "ctoken-store %s: %v\n", cmd, err)
		return 2
	}
	defer client.Close()
	c.opts.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	c.opts.Timeout = c.timeout
	store, err := redisstore.New(client, c.opts)
	if err != nil {
		fmt.Fprintf(stderr, "ctoken-store %s: %v\n", cmd, err)
		return 2
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	switch cmd {
	case "provision":
		if !c.statedNew && !c.horizonGiven {
			// Provision fences a key space of unknown history for its
			// recorded lifetime, else the Horizon: without -horizon that
			// would be the flag's default, a length nobody chose.
			st, err := store.Status(ctx)
			if err != nil {
				return fail(stderr, cmd, err)
			}
			if historyUnknown(st) && st.Lifetime == 0 {
				fmt.Fprintf(stderr, "ctoken-store provision: prefix %s: history unknown and no lifetime recorded (a restart without persistence loses the record with the data), "+
					"so nothing says how long to fence it: give -horizon <the longest lifetime of any claim under this prefix, e.g. 2m16s for 1-minute claims, 3m31s for one-time tokens with a 1-minute TTL; "+
					"if unsure, the applications' Options.Horizon>, or -new if it never held claims; nothing written\n", store.Prefix())
				return 2
			}
		}
		provision := store.Provision
		if c.statedNew {
			provision = store.ProvisionNew
		}
		n, err := provision(ctx)
		if at, ok := replay.RetryAt(err); ok && errors.Is(err, redisstore.ErrFenced) {
			fmt.Fprintf(stderr, "ctoken-store provision: prefix %s is fenced until %s (in %s): %s\n", store.Prefix(), at.UTC().Format(time.RFC3339), time.Until(at).Round(time.Second), redisstore.Reason(err))
			return 1
		}
		if err != nil {
			return fail(stderr, cmd, err)
		}
		if n == 0 {
			fmt.Fprintf(stdout, "prefix %s: already provisioned, every shard open; nothing written\n", store.Prefix())
		} else {
			fmt.Fprintf(stdout, "prefix %s: provisioned, %d of %d shards opened; applications can Open it now\n", store.Prefix(), n, redisstore.Shards)
		}
	case "status":
		st, err := store.Status(ctx)
		if err != nil {
			return fail(stderr, cmd, err)
		}
		if !c.horizonGiven {
			st.Horizon = 0 // the flag's default, not the key space's: see ProvisionedHorizon
		}
		if c.jsonOut {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(st); err != nil {
				return fail(stderr, cmd, err)
			}
			return 0
		}
		printStatus(stdout, st, time.Now())
	case "reopen":
		n, err := store.Reopen(ctx, c.acceptedBy, c.reason)
		if err != nil {
			return fail(stderr, cmd, err)
		}
		if n == 0 {
			fmt.Fprintf(stdout, "prefix %s: every shard was open; nothing written\n", store.Prefix())
		} else {
			fmt.Fprintf(stdout, "prefix %s: reopened %d of %d shards, accepted by %q (recorded in the ledger); running applications serve again at their next call\n",
				store.Prefix(), n, redisstore.Shards, c.acceptedBy)
		}
	}
	return 0
}

// fail prints err with its reason and returns 1.
func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "ctoken-store %s: refused or failed: %v\n", cmd, err)
	return 1
}

// client connects as the flags say: exactly one of -addr, -url, -sentinel
// (with -master) and -cluster.
func (c *config) client() (redis.UniversalClient, error) {
	n := 0
	for _, v := range []string{c.addr, c.url, c.sentinel, c.cluster} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("name the server with exactly one of -addr, -url, -sentinel (with -master) or -cluster")
	}
	if (c.sentinel != "") != (c.master != "") {
		return nil, errors.New("-sentinel and -master go together")
	}
	password, err := c.password()
	if err != nil {
		return nil, err
	}
	switch {
	case c.addr != "":
		return redis.NewClient(&redis.Options{Addr: c.addr, Password: password, ContextTimeoutEnabled: true}), nil
	case c.url != "":
		o, err := redis.ParseURL(c.url)
		if err != nil {
			return nil, errors.New("-url is not a valid redis:// or rediss:// URL") // never echo it: it may hold a password
		}
		if o.Password != "" {
			return nil, errors.New("-url carries a password, which every user of this machine can read in the process table: give it in " + passwordEnv + " or a -password-file, and the URL without it")
		}
		o.Password = password
		o.ContextTimeoutEnabled = true
		return redis.NewClient(o), nil
	case c.sentinel != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: c.master, SentinelAddrs: split(c.sentinel),
			Password: password, ContextTimeoutEnabled: true}), nil
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: split(c.cluster), Password: password, ContextTimeoutEnabled: true}), nil
}

// password is the server's password: from -password-file or
// CTOKEN_REDIS_PASSWORD (not both), "" when neither is set. Its errors
// never hold the password.
func (c *config) password() (string, error) {
	env := os.Getenv(passwordEnv)
	if c.passwordFile == "" {
		return env, nil
	}
	if env != "" {
		return "", errors.New("the password is given twice: use " + passwordEnv + " or -password-file, not both")
	}
	f, err := os.Open(c.passwordFile)
	if err != nil {
		return "", fmt.Errorf("-password-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPasswordFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("-password-file: %w", err)
	}
	if len(b) > maxPasswordFileBytes {
		return "", fmt.Errorf("-password-file %s: over %d bytes; it must hold the password alone", c.passwordFile, maxPasswordFileBytes)
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	switch {
	case pw == "":
		return "", fmt.Errorf("-password-file %s is empty", c.passwordFile)
	case strings.ContainsAny(pw, "\r\n"):
		return "", fmt.Errorf("-password-file %s holds more than one line; it must hold the password alone", c.passwordFile)
	}
	return pw, nil
}

// split splits a,b,c, dropping empty parts.
func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// printStatus prints st for a person: the verdict and next step first.
func printStatus(w io.Writer, st redisstore.Status, now time.Time) {
	fmt.Fprintf(w, "prefix   %s\nhorizon  %s\n", st.Prefix, horizonLine(st))
	fmt.Fprintf(w, "shards   %d open, %d fenced, %d missing (of %d)\n", st.Open, st.Fenced, st.Missing, redisstore.Shards)
	if st.Lifetime > 0 {
		fmt.Fprintf(w, "lifetime %s (the longest any application of the key space claims for: a fence lasts this long)\n", st.Lifetime)
	} else {
		fmt.Fprintln(w, "lifetime unknown (none recorded: no claim yet, or lost with the data)")
	}
	if !st.FencedUntil.IsZero() {
		fmt.Fprintf(w, "fenced until %s (in %s)\n", st.FencedUntil.UTC().Format(time.RFC3339), st.FencedUntil.Sub(now).Round(time.Second))
	}
	if !st.ReopenSafeAt.IsZero() {
		fmt.Fprintf(w, "safe to reopen from %s (in %s): from then `reopen` accepts nothing twice; before then it accepts IDs claimed before the loss again\n",
			st.ReopenSafeAt.UTC().Format(time.RFC3339), st.ReopenSafeAt.Sub(now).Round(time.Second))
	}
	fmt.Fprintf(w, "verdict  %s\n", verdict(st, now))
	fmt.Fprintln(w, "ledger (oldest first):")
	if len(st.Ledger) == 0 {
		fmt.Fprintln(w, "  (empty)")
	}
	for _, e := range st.Ledger {
		at := "?"
		if !e.At.IsZero() {
			at = e.At.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "  %s  %-11s  %s\n", at, e.Kind, e.Detail)
	}
	fmt.Fprintln(w, "servers:")
	for _, s := range st.Servers {
		fmt.Fprintf(w, "  run_id %s  role %s\n", s.RunID, s.Role)
		if !s.StartedAt.IsZero() {
			fmt.Fprintf(w, "    started      %s (%s ago)\n", s.StartedAt.UTC().Format(time.RFC3339), now.Sub(s.StartedAt).Round(time.Second))
		}
		fmt.Fprintf(w, "    persistence  appendonly %s, appendfsync %s, save %q\n", orUnknown(s.AppendOnly), orUnknown(s.AppendFsync), s.Save)
		fmt.Fprintf(w, "    eviction     maxmemory-policy %s, maxmemory %s\n", orUnknown(s.MaxmemoryPolicy), orUnknown(s.Maxmemory))
		fmt.Fprintf(w, "    since start  evicted_keys %d, FLUSHALL %d, FLUSHDB %d, SWAPDB %d\n", s.EvictedKeys, s.Flushall, s.Flushdb, s.Swapdb)
	}
}

// horizonLine says which horizon status knows and where it comes from:
// the key space's as provisioned (st.ProvisionedHorizon), and -horizon
// when given (st.Horizon, zero when not).
func horizonLine(st redisstore.Status) string {
	switch {
	case st.Horizon == 0 && st.ProvisionedHorizon == 0:
		return "unknown: the ledger records none (trimmed or lost) and -horizon was not given; the key space's is the applications' Options.Horizon"
	case st.Horizon == 0:
		return st.ProvisionedHorizon.String() + " (as provisioned, from the ledger)"
	case st.ProvisionedHorizon == 0:
		return st.Horizon.String() + " (-horizon; the ledger records none)"
	case st.ProvisionedHorizon != st.Horizon:
		return st.Horizon.String() + " (-horizon; provisioned with " + st.ProvisionedHorizon.String() + ")"
	}
	return st.Horizon.String() + " (-horizon, as provisioned)"
}

// verdict says what applications do with the key space and the next step.
func verdict(st redisstore.Status, now time.Time) string {
	switch {
	case st.Refusal != "":
		return "REFUSED: Open refuses the user this command runs as, whatever the shards say (run status as the applications' user to judge theirs): " + st.Refusal
	case st.Open == redisstore.Shards:
		return "serving"
	case historyUnknown(st) && st.Lifetime == 0 && st.Horizon == 0:
		return "HISTORY UNKNOWN: no shard marker and no ledger entry: never provisioned, or Redis lost the key space" + lostAt(st, now) +
			"; Open refuses. No lifetime is recorded (lost with the data, or never written), so `ctoken-store provision` needs " +
			"-horizon <the longest lifetime of any claim under this prefix, e.g. 2m16s for 1-minute claims>: it fences the key space for that long and the applications serve from then " +
			"(run status with the same -horizon to see when); only for a prefix that never held claims, `ctoken-store provision -new` opens it at once"
	case historyUnknown(st):
		return "HISTORY UNKNOWN: no shard marker and no ledger entry: never provisioned, or Redis lost the key space" + lostAt(st, now) +
			"; Open refuses. `ctoken-store provision` fences it for one lifetime (" + fenceFor(st) + ") and the applications serve from then: safe to serve from " +
			now.Add(fenceLength(st)).UTC().Format(time.RFC3339) + " if provisioned now; only for a prefix that never held claims, `ctoken-store provision -new` opens it at once"
	case st.Open == 0 && st.Fenced == 0:
		return "LOST: no shard marker, but the ledger shows a previous life; Open refuses. Wait for every ID claimed before the loss to expire, or accept the risk: ctoken-store reopen -accepted-by ... -reason ..."
	case st.Open == 0:
		return "FENCED: Open refuses until the fences end, then the applications serve by themselves (safe to reopen from: above); to serve before then, accept the risk: ctoken-store reopen -accepted-by ... -reason ..."
	}
	return "partly fenced: the open shards serve; the others refuse until their fence ends (missing ones fence at their next claim), or ctoken-store reopen"
}

// lostAt says when a server without persistence last started: a key
// space it held was lost then.
func lostAt(st redisstore.Status, now time.Time) string {
	for _, s := range st.Servers {
		if s.AppendOnly == "no" && strings.TrimSpace(s.Save) == "" && !s.StartedAt.IsZero() {
			return fmt.Sprintf(" (this server keeps no data across a restart and started %s, %s ago: if the prefix served before, that restart lost it)",
				s.StartedAt.UTC().Format(time.RFC3339), now.Sub(s.StartedAt).Round(time.Second))
		}
	}
	return ""
}

// historyUnknown reports whether st is a key space with no shard marker
// and no ledger entry: never provisioned, or lost while no store watched.
func historyUnknown(st redisstore.Status) bool {
	return st.Open == 0 && st.Fenced == 0 && len(st.Ledger) == 0
}

// fenceLength is how long `provision` would fence the key space: its
// recorded lifetime, else -horizon (st.Horizon is zero without it, and
// provision then refuses: see run).
func fenceLength(st redisstore.Status) time.Duration {
	if st.Lifetime > 0 {
		return st.Lifetime
	}
	return st.Horizon
}

// fenceFor names fenceLength and where it comes from.
func fenceFor(st redisstore.Status) string {
	if st.Lifetime > 0 {
		return st.Lifetime.String() + ", the recorded lifetime"
	}
	return st.Horizon.String() + ", -horizon: no lifetime recorded"
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
