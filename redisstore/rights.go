package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A Store runs its checks, scripts and loss path under the application's
// own Redis user, whose ACL may forbid some of their commands. A command
// refused while the store serves would leave a guard blind (a check that
// cannot read the counters or keep a baseline, a fence that cannot be
// written), so every check verifies first that the user may run every
// command this configuration runs ([Store.rights]), and refuses the server
// ([ErrConfig], naming the ACL line to add) while it may not.
//
// The rights are asked of the server, not tried: one script calls
// redis.acl_check_cmd (Redis 7.0, Valkey) for each command with the
// arguments and keys the store sends, which answers for the user running
// the script exactly as the server would answer the command, key patterns
// and subcommand rules included, and runs nothing. Trying each command
// instead would run BGREWRITEAOF, and ACL DRYRUN and ACL GETUSER need
// administrative rights an application's user should not have.

// right is one command a Store of this configuration runs: the ACL rule
// that allows it and the command as the store sends it (its keys are the
// key space's). whenKnown: a server that does not know the command does
// not need the right (WAITAOF on Redis 7.0, where the store does not wait
// for it: see [Store.decideLocalAOF]; Durability's WAITAOF is refused
// there by its own check).
type right struct {
	rule      string
	cmd       []any
	whenKnown bool
}

// rights lists every command the store's calls, checks, loss path and
// operator reads ([Store.Status], [Store.Reopen]) run under its user, for
// its Options and client. CONFIG GET is not among them: the facts it
// reads are judged without it where the server shows them otherwise, and
// refused unless an Allow* option accepts the risk (see
// [Store.checkMaster]). Neither is SCAN, which only
// [Store.ReprovisionNeverUsed] runs, an operator's step.
func (s *Store) rights() []right {
	marker := s.tags[0]
	entry := marker + ":r"
	side, staging := sideKey(marker, "r"), stagingKey(marker, "r")
	rs := []right{
		// Every step is a script (EVALSHA, EVAL when the server does not
		// know it yet); the scripts run these under the same user.
		{rule: "+evalsha", cmd: []any{"evalsha", claimLua.sha, "2", marker, entry}},
		{rule: "+eval", cmd: []any{"eval", "return 1", "2", marker, entry}},
		{rule: "+time", cmd: []any{"time"}},
		{rule: "+get", cmd: []any{"get", entry}},
		{rule: "+mget", cmd: []any{"mget", marker, entry}},
		{rule: "+set", cmd: []any{"set", entry, "v"}},
		{rule: "+del", cmd: []any{"del", entry, side}},
		{rule: "+pttl", cmd: []any{"pttl", entry}},
		{rule: "+rename", cmd: []any{"rename", staging, side}},
		{rule: "+pexpireat", cmd: []any{"pexpireat", side, "1"}},
		// The checks: role and replicas, identity, loss counters and
		// persistence, the clock, the markers, the server baselines.
		{rule: "+role", cmd: []any{"role"}},
		{rule: "+info", cmd: []any{"info", "server"}},
		{rule: "+info", cmd: []any{"info", "replication"}},
		{rule: "+info", cmd: []any{"info", "stats"}},
		{rule: "+info", cmd: []any{"info", "commandstats"}},
		{rule: "+info", cmd: []any{"info", "errorstats"}}, // the key space's reset witness (readWitness), in the checks and the scripts
		{rule: "+info", cmd: []any{"info", "persistence"}},
		{rule: "+exists", cmd: []any{"exists", marker}},
		{rule: "+hget", cmd: []any{"hget", s.serversKey(), "r"}},
		{rule: "+hset", cmd: []any{"hset", s.serversKey(), "r", "v"}},
		{rule: "+hlen", cmd: []any{"hlen", s.serversKey()}},
		{rule: "+hgetall", cmd: []any{"hgetall", s.serversKey()}},
		{rule: "+hdel", cmd: []any{"hdel", s.serversKey(), "r"}},
		// The loss path: the ledger, and the AOF rewrite after AOF was
		// switched off; Status and Reopen read the ledger.
		{rule: "+rpush", cmd: []any{"rpush", s.ledgerKey(), "v"}},
		{rule: "+ltrim", cmd: []any{"ltrim", s.ledgerKey(), "0", "1"}},
		{rule: "+llen", cmd: []any{"llen", s.ledgerKey()}},
		{rule: "+lrange", cmd: []any{"lrange", s.ledgerKey(), "0", "-1"}},
		{rule: "+bgrewriteaof", cmd: []any{"bgrewriteaof"}},
	}
	if s.dur.wait != nil {
		rs = append(rs, right{rule: "+wait", cmd: []any{"wait", "1", "1"}})
	}
	if s.dur.waitAOF != nil || s.dur.implied != nil {
		rs = append(rs, right{rule: "+waitaof", cmd: []any{"waitaof", "1", "0", "1"}, whenKnown: true})
	}
	if _, ok := s.client.(*redis.ClusterClient); ok {
		rs = append(rs, right{rule: "+cluster|slots", cmd: []any{"cluster", "slots"}})
	}
	return rs
}

// aclLine is the ACL rules of rs, each once, in order, and the key
// pattern of the store's prefix: what a user needs for this
// configuration (docs/fleet-reference.md, "The fleet's ACL").
func (s *Store) aclLine(rs []right) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, r := range rs {
		if !seen[r.rule] {
			seen[r.rule] = true
			b.WriteString(r.rule)
			b.WriteByte(' ')
		}
	}
	b.WriteString("~" + globEscape(s.prefix) + "*")
	return b.String()
}

// rightsScript answers, for the user running it, which commands of ARGV
// it may not run: ARGV is each command as its argument count followed by
// its arguments. It returns -1 on a server without redis.acl_check_cmd
// (older than Redis 7.0), else the 1-based index of each command refused
// by the user's ACL, negated when the server does not know the command
// (renamed away, or not in this version).
const rightsScript = `if not redis.acl_check_cmd then return -1 end
local out, i, k = {}, 1, 0
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  k = k + 1
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(ARGV, i + 1, i + n))
  if not ok then out[#out + 1] = -k elseif not allowed then out[#out + 1] = k end
  i = i + n + 1
end
return out`

// checkRights verifies that the user may run every command of
// [Store.rights] on one master, through do. It returns an [ErrConfig]
// refusal whose Reason names the ACL line to add (or the command renamed
// away), nil when every right is there, or err when the server could not
// answer.
func (s *Store) checkRights(ctx context.Context, do func(args ...any) (any, error)) (cond, err error) {
	rs := s.rights()
	args := []any{"EVAL", rightsScript, 0}
	for _, r := range rs {
		args = append(args, len(r.cmd))
		args = append(args, r.cmd...)
	}
	v, err := do(args...)
	if err != nil {
		msg := strings.ToLower(err.Error())
		switch {
		case strings.Contains(msg, "unknown command"):
			return refuse(ErrConfig, "the server does not know EVAL (renamed away?): every step of the store is a Lua script; undo the rename-command of EVAL and EVALSHA", nil), nil
		case isRefused(err):
			return refuse(ErrConfig, "the Redis user may not run EVAL, which every step of the store needs: add to its ACL (ACL SETUSER <user> ...): "+s.aclLine(rs), nil), nil
		}
		return nil, s.wrapErr(ctx, err)
	}
	if n, ok := v.(int64); ok && n == -1 {
		return refuse(ErrConfig, "Redis older than 7.0: the store cannot verify that its user may run the commands it needs (redis.acl_check_cmd); use Redis 7.0 or newer, or Valkey", nil), nil
	}
	out, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: unexpected reply to the rights check", ErrUnavailable)
	}
	var missing, unknown []right
	for _, x := range out {
		k, ok := x.(int64)
		i := k
		if i < 0 {
			i = -i
		}
		if !ok || i < 1 || int(i) > len(rs) {
			return nil, fmt.Errorf("%w: unexpected reply to the rights check", ErrUnavailable)
		}
		switch r := rs[i-1]; {
		case k > 0:
			missing = append(missing, r)
		case !r.whenKnown:
			unknown = append(unknown, r)
		}
	}
	var why []string
	if len(missing) > 0 {
		why = append(why, "the Redis user may not run commands the store needs (its checks, scripts and loss path): add to its ACL (ACL SETUSER <user> ...): "+s.aclLine(missing))
	}
	if len(unknown) > 0 {
		names := make([]string, 0, len(unknown))
		for _, r := range unknown {
			names = append(names, strings.TrimPrefix(r.rule, "+"))
		}
		why = append(why, "the server does not know commands the store needs (renamed away?): "+strings.Join(dedupe(names), ", ")+"; undo their rename-command")
	}
	if len(why) == 0 {
		return nil, nil
	}
	return refuse(ErrConfig, strings.Join(why, "; "), nil), nil
}

// dedupe drops repeated strings, keeping the first of each in order.
func dedupe(ss []string) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
