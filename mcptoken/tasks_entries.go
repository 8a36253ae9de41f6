package mcptoken

// Durable tasks (the MCP Tasks extension, io.modelcontextprotocol/tasks).
//
// A task's ID is a sealed ctoken cursor (format 3) bound to the caller, whose
// opaque state names the task's store entries, the tool and the lease token
// of the instance that runs it; it expires with the task. Its state lives in
// a replay.Recorder that is also a replay.Renewer, in entries of its own:
//
//	mcpt:<n>        the task: leased by the running instance (renewed every
//	                Hold/3), done with its sealed outcome
//	mcpt:<n>:q<k>   the input requests of round k, done with them sealed
//	mcpt:<n>:a<k>:<h> the answer to the request whose key hashes to h
//	mcpt:<n>:b      its run began (begin)
//	mcpt:<n>:c      a cancel made on an instance that does not run it
//	mcpt:<n>:e      the outcome a Transactional task's runner records after
//	                its rollback freed the task's entry
//	mcpt:<n>:r      AllowRerun let a keyed task's failed run be followed
//
// so that any instance answers tasks/get: a live lease is working (or
// input_required while a round's requests lack answers), a done entry is the
// outcome, and a lapsed lease (its instance stopped) is recorded as failed by
// the first instance that finds it. tasks/cancel stops a local task's tool at
// once; on another instance it leaves the cancel mark, which the running
// instance looks for every PollInterval.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ctoken/ctoken/replay"
)

func (r taskRef) entry() string { return "mcpt:" + base64.RawURLEncoding.EncodeToString(r.Nonce) }

func (r taskRef) round(k int) string { return fmt.Sprintf("%s:q%d", r.entry(), k) }

func (r taskRef) answer(k int, key string) string {
	h := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s:a%d:%s", r.entry(), k, hex.EncodeToString(h[:12]))
}

func (r taskRef) created() time.Time { return time.UnixMilli(r.Created) }

func (r taskRef) cancelMark() string { return r.entry() + ":c" }

// endedMark is the entry where a Transactional task's runner leaves its
// outcome before its rollback frees the task's entry, so that a poll that
// finds the entry free before the runner records the outcome there
// records that outcome, not a stopped instance's.
func (r taskRef) endedMark() string { return r.entry() + ":e" }

// beganMark is the entry that records that a task's run began (begin).
func (r taskRef) beganMark() string { return r.entry() + ":b" }

// rerunMark is the entry by which [Tasks.AllowRerun] lets a keyed task's
// failed run be followed by another.
func (r taskRef) rerunMark() string { return r.entry() + ":r" }

// fp is the fingerprint the task's entry is recorded with: taskFP, and for
// a keyed task its arguments' fingerprint and creation time, which a
// retry of its call reads back from the lease or the outcome.
func (r taskRef) fp() []byte {
	if len(r.Args) == 0 {
		return taskFP
	}
	b := append(append([]byte{}, taskFP...), 1)
	b = append(b, r.Args...)
	return binary.BigEndian.AppendUint64(b, uint64(r.Created))
}

// put records value, sealed, under id, unless id is already recorded.
func (t *Tasks) put(ctx context.Context, ref taskRef, id string, value []byte) error {
	_, err := t.putOnce(ctx, ref, id, value)
	return err
}

// putOnce records value, sealed, under id and returns nil; or, when id is
// already recorded, the value recorded there. A record being written
// meanwhile (a live lease on id) is waited for.
func (t *Tasks) putOnce(ctx context.Context, ref taskRef, id string, value []byte) (json.RawMessage, error) {
	for {
		rec, err := t.store.AcquireRecord(ctx, id, t.hold, nil)
		if err != nil {
			return nil, err
		}
		switch rec.State {
		case replay.LeaseDone:
			prior, err := t.seal.open(id, nil, rec.Result)
			if err != nil {
				return nil, fmt.Errorf("mcptoken: task record %w", err)
			}
			return prior, nil
		case replay.LeaseBusy:
			if err := sleepCtx(ctx, min(max(rec.Wait, time.Millisecond), t.poll)); err != nil {
				return nil, err
			}
			continue
		}
		sealed, err := t.seal.seal(id, nil, value)
		if err == nil {
			err = t.store.ConfirmRecord(ctx, id, rec.Token, ref.created().Add(t.ttl), nil, sealed)
		}
		if err != nil {
			_ = t.store.ReleaseLease(context.WithoutCancel(ctx), id, rec.Token)
		}
		return nil, err
	}
}

// peek reads the sealed value recorded under id, writing nothing: ok is
// false when nothing is recorded there (yet).
func (t *Tasks) peek(ctx context.Context, ref taskRef, id string) (json.RawMessage, bool, error) {
	rec, err := t.read.ReadRecord(ctx, id)
	if err != nil || rec.State != replay.LeaseDone {
		return nil, false, err
	}
	v, err := t.seal.open(id, nil, rec.Result)
	if err != nil {
		return nil, false, fmt.Errorf("mcptoken: task record %w", err)
	}
	return v, true, nil
}
