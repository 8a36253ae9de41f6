package redisstore

import "strings"

// Every claim and lease step is one Lua script on two keys of one hash slot
// (see the key layout in keyspace.go): KEYS[1] the shard's fence marker, KEYS[2]
// the ID's entry. The script first runs the guard: it reads Redis's clock
// (TIME; Redis 7 replicates a script by its effects, so reading the clock
// is allowed and replicas see only the writes), refuses when the caller's
// clock (ARGV[1], Unix ms) is behind it by more than ARGV[2] ms, and checks
// the marker:
//
//	absent        Redis lost data (or the key space is new): write
//	              "F<now + bound>" (ARGV[3] ms: the key space's lifetime,
//	              see lifetime.go) and, in <marker>f, when it was raised;
//	              refuse
//	"F<ms>"       fenced: refuse until Redis's clock reaches ms, then "O";
//	              a caller whose bound reaches past ms from when the
//	              fence was raised lengthens it to that (the longer
//	              lifetime wins)
//	"O"           open
//
// An entry (KEYS[2]) is one of:
//
//	free      no key, or "X" + token (a cancel note, below)
//	leased    "L" + token, expiring lease after it was taken (PX, Redis's
//	          clock); "L" + token + fingerprint from AcquireRecord
//	done      "D" + token, expiring at the confirmed until (PXAT);
//	          "D" + token + (0x80|n) + fingerprint + size + crc from
//	          ConfirmRecord, whose result is in a side key (record.go)
//	claimed   "1" + nonce from Claim (or "1" from older versions), which
//	          AcquireLease reports as done
//
// A lease step identifies the caller's own lease by its "L" + token
// prefix, so ConfirmLease, RenewLease and ReleaseLease work on a lease
// taken by AcquireRecord too; every other step looks only at the first
// byte.
//
// The token is 32 hex digits from crypto/rand, minted per AcquireLease
// before the script is sent, so a client that resends a script whose reply
// was lost gets the same answer: an acquire finds its own lease, a confirm
// its own done entry, a renewal its own lease (renewed again, from that
// later now), a release nothing left to do. A cancel note
// "X" + token is written by the release of an acquire whose outcome is
// unknown when it finds the ID free: should that acquire reach Redis later,
// it finds its own note and takes nothing. Every other step treats a note
// as free.
//
// Replies are {code, value}, or a bare code (the claim's replies, and the
// common ones of acquire and confirm: the cheapest to encode and decode);
// negative codes, always {code, value}, are the guard's refusals:
//
//	-1 fence raised now, value = fenced until (ms)
//	-2 fenced, value = fenced until (ms)
//	-3 caller's clock behind, value = Redis's now (ms)
//	-4 marker holds an unknown value
//	-5 until not after Redis's now, value = Redis's now (ms)
//	-6 until or lease past Redis's now + bound, value = Redis's now (ms)
//	-8 the server's loss counters moved since the store's last check
//	   (countersLua)
const guardLua = guardClock + `local m = redis.call('GET', KEYS[1])
` + guardMarker

// guardBothLua is guardLua for a step that reads the entry on its common
// path (acquire, confirm, renew): one MGET reads the marker and the entry
// (v) at once, one call instead of two. The entry is read before the
// guard may write the marker, which is another key: v is the same either
// way. MGET reads a key of another type as nil where GET fails
// (WRONGTYPE): a nil marker is read again with GET, so that a foreign
// value under the marker's name is refused as GET refuses it, not taken
// for a lost key space; each script does the same for a nil entry before
// writing one.
const guardBothLua = guardClock + `local mv = redis.call('MGET', KEYS[1], KEYS[2])
local m, v = mv[1], mv[2]
if not m then m = redis.call('GET', KEYS[1]) end
` + guardMarker

// guardClock reads Redis's clock and refuses a caller's clock behind it.
const guardClock = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(ARGV[1]) < now - tonumber(ARGV[2]) then return {-3, now} end
`

// guardMarker checks the marker m.
const guardMarker = `if not m then
  local f = now + tonumber(ARGV[3])
  redis.call('SET', KEYS[1], string.format('F%.0f', f))
  redis.call('SET', KEYS[1] .. 'f', string.format('%.0f', now))
  return {-1, f}
end
if m ~= 'O' then
  local f = tonumber(string.sub(m, 2))
  if string.sub(m, 1, 1) ~= 'F' or not f then return {-4, 0} end
  if now < f then
` + lengthenLua + `    return {-2, f}
  end
  redis.call('SET', KEYS[1], 'O')
end
`

// lengthenLua lengthens the running fence f (ms) of the marker KEYS[1]
// to when it was raised (<marker>f) plus ARGV[3], the caller's bound,
// when that is later: the longer lifetime wins. It is the guard's, and
// lengthenScript's (lifetime.go).
const lengthenLua = `    local r = tonumber(redis.call('GET', KEYS[1] .. 'f'))
    if r and r + tonumber(ARGV[3]) > f then
      f = r + tonumber(ARGV[3])
      redis.call('SET', KEYS[1], string.format('F%.0f', f))
    end
`

// countersLua defines moved(cb), the guard of the steps that can take a
// free ID (a claim, an acquisition), called only where they would take
// one: cb, an ARGV, is the loss counters the store's last check read on
// the master that serves the key, "<evicted_keys>
// <total_commands_processed> <errs> <code>" ("-" for evicted_keys under
// AllowEviction; errs the count of the key space's reset witness, the
// error code <code> in INFO errorstats, 0 when the server does not count
// it: see [Store.readWitness]), or "-" when the store has none. It reads
// them again (INFO stats and INFO errorstats, each field found by a plain
// search, cheaper than a pattern tried at every position; Redis evicts
// before a command runs, never inside a script) and reports true when
// evicted_keys differs, or the witness went down (CONFIG RESETSTAT,
// another server: only the checks of this key space bump it), or, where
// the witness is not counted, the commands went down: the script then
// answers -8, so an ID that eviction took since that check is never
// answered free before the check that fences for it has run, even after a
// reset and more commands than the server had run before it (issue 105).
// INFO stats is read only where evicted_keys is compared or the witness
// is not counted. The store then refuses every step that can take a free
// ID until a check has run, at once (see [Store.holdForCheck]); the check
// takes the counters as the new baseline only after fencing for them.
const countersLua = `local function field(i, name)
  local p = string.find(i, name, 1, true)
  return p and string.match(i, '^%d+', p + #name)
end
local function moved(cb)
  if cb == '-' then return false end
  local be, bc, bw, code = string.match(cb, '^(%S+) (%d+) (%d+) (%S+)$')
  if not code then return true end
  if be ~= '-' or bw == '0' then
    local i = redis.call('INFO', 'stats')
    if (be ~= '-' and field(i, '\nevicted_keys:') ~= be) or (tonumber(field(i, '\ntotal_commands_processed:')) or 0) < tonumber(bc) then return true end
  end
  return bw ~= '0' and (tonumber(field(redis.call('INFO', 'errorstats'), '\nerrorstat_' .. code .. ':count=')) or 0) < tonumber(bw)
end
`

// untilLua checks ARGV[4], an absolute expiry in Unix ms, against Redis's
// clock and the bound (ARGV[3]).
const untilLua = `local u = tonumber(ARGV[4])
if u <= now then return {-5, now} end
if u > now + tonumber(ARGV[3]) then return {-6, now} end
`

// Claim: ARGV[4] until (ms), ARGV[5] the entry's value, "1" + the claim's
// nonce, ARGV[6] the loss counters (countersLua). The first claim of an ID costs one SET NX after the guard; only a
// taken ID is read. Replies 1 first, 0 taken, 2 the entry is this claim's
// own (a client resent the script after its reply was lost): written again
// so that the WAIT pipelined after it covers it on this connection too. A
// bare integer, not {code, 0}, so the common reply is the cheapest to
// encode and to decode; the guard's refusals stay {code, value}.
const claimScript = countersLua + guardLua + untilLua + `if moved(ARGV[6]) then return {-8, 0} end
if redis.call('SET', KEYS[2], ARGV[5], 'NX', 'PXAT', ARGV[4]) then return 1 end
local v = redis.call('GET', KEYS[2])
if v == ARGV[5] then
  redis.call('SET', KEYS[2], v, 'PXAT', ARGV[4])
  return 2
end
if v and string.sub(v, 1, 1) ~= 'X' then return 0 end
redis.call('SET', KEYS[2], ARGV[5], 'PXAT', ARGV[4])
return 1`

// Acquire: ARGV[4] lease (ms), ARGV[5] token, ARGV[6] the loss counters
// (countersLua). 1 (bare: a new lease) or
// {1, 0} acquired, {2, pttl} busy, {3, 0} done, {4, 0} cancelled by this
// token's own note. The entry (v) is read with the marker (guardBothLua).
const acquireScript = countersLua + guardBothLua + `if tonumber(ARGV[4]) > tonumber(ARGV[3]) then return {-6, now} end
if not v then
  if moved(ARGV[6]) then return {-8, 0} end
  if redis.call('SET', KEYS[2], 'L' .. ARGV[5], 'NX', 'PX', ARGV[4]) then return 1 end
  v = redis.call('GET', KEYS[2])
end
if v == 'X' .. ARGV[5] then return {4, 0} end
if string.sub(v, 1, 1) == 'X' then
  if moved(ARGV[6]) then return {-8, 0} end
  redis.call('SET', KEYS[2], 'L' .. ARGV[5], 'PX', ARGV[4])
  return {1, 0}
end
if v == 'L' .. ARGV[5] then
  -- A resent script (a client retry on another connection) finds its own
  -- lease: write it again with its remaining time, so that the WAIT
  -- pipelined after this script covers it on this connection too.
  local p = redis.call('PTTL', KEYS[2])
  if p <= 0 then return {-4, now} end
  redis.call('SET', KEYS[2], v, 'PX', p)
  return {1, 0}
end
if string.sub(v, 1, 1) == 'L' then return {2, redis.call('PTTL', KEYS[2])} end
return {3, 0}`

// Confirm: ARGV[4] until (ms), ARGV[5] token. 1 recorded, 0 lost (bare
// codes, as the claim's). The entry (v) is read with the marker
// (guardBothLua); the token's own lease, the common case, is tested first.
// The last test, reached only when the others fail, finds the token's
// lease taken by AcquireRecord ("L" + token + fingerprint): confirmed
// without a record.
const confirmScript = guardBothLua + untilLua + `if not v then v = redis.call('GET', KEYS[2]) end
if v == 'L' .. ARGV[5] or (not v) or string.sub(v, 1, 1) == 'X' or v == 'D' .. ARGV[5]
  or (#ARGV[5] == 32 and string.sub(v, 1, 33) == 'L' .. ARGV[5]) then
  redis.call('SET', KEYS[2], 'D' .. ARGV[5], 'PXAT', ARGV[4])
  return 1
end
return 0`

// Renew: ARGV[4] lease (ms), ARGV[5] token (32 hex digits). {1, 0}
// renewed, {0, 0} lost. Only the token's own live lease is renewed, with
// or without a fingerprint, which it keeps: the entry is written again as
// it is, expiring lease from Redis's now. A lease that has ended is gone
// (Redis expires it by its own clock), and an entry of another holder, a
// done entry, a claim or a cancel note is not the token's: lost.
const renewScript = guardBothLua + `if tonumber(ARGV[4]) > tonumber(ARGV[3]) then return {-6, now} end
if not v then v = redis.call('GET', KEYS[2]) end
if v and #ARGV[5] == 32 and string.sub(v, 1, 33) == 'L' .. ARGV[5] then
  redis.call('SET', KEYS[2], v, 'PX', ARGV[4])
  return {1, 0}
end
return {0, 0}`

// Release: KEYS[1] the entry, ARGV[1] token (32 hex digits). Deletes only
// the token's own lease, with or without a fingerprint; needs no guard (it
// can only free what the caller holds).
const releaseScript = `local v = redis.call('GET', KEYS[1])
if #ARGV[1] == 32 and v and string.sub(v, 1, 33) == 'L' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0`

// Cancel: KEYS[1] the entry, ARGV[1] token (32 hex digits), ARGV[2] note
// lifetime (ms). The release of an acquire (AcquireLease or AcquireRecord)
// whose outcome is unknown: 1 freed the token's lease, 2 wrote a cancel
// note (the acquire has not landed), 0 the ID is someone else's (or
// already noted).
const cancelScript = `local v = redis.call('GET', KEYS[1])
if #ARGV[1] == 32 and v and string.sub(v, 1, 33) == 'L' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if not v then
  redis.call('SET', KEYS[1], 'X' .. ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0`

// script is a Lua script and its SHA-1, which names it to EVALSHA. The
// digests are constants rather than computed with crypto/sha1, which panics
// under GODEBUG=fips140=only (SHA-1 here only names a script to Redis; it
// protects nothing). TestScriptDigestsAreSHA1 checks them.
type script struct{ src, sha string }

var (
	claimLua   = script{claimScript, "58aa016403c8226d7791cd711696d23bc99edb1e"}
	acquireLua = script{acquireScript, "ccc5a5e2c83db6757aa28fcc9a30686d6ce55f86"}
	confirmLua = script{confirmScript, "8cc16be5696e0640f980b1c4edc79b0bfcd3667f"}
	renewLua   = script{renewScript, "f41ed12b68a87e1400924f30f1d379e8ffbdf654"}
	releaseLua = script{releaseScript, "ceebdb2925cc262b305c5842627a87fc430e8e06"}
	cancelLua  = script{cancelScript, "325482a3386a4a9411b106d1d57679f91eb8a05f"}
)

func isNoScript(err error) bool { return strings.Contains(err.Error(), "NOSCRIPT") }
