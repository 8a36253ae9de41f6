package mcptoken

// A task's input rounds: each round's requests, and each answer, are store
// entries of their own beside the task's.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// input publishes round k's requests and waits for every answer.
func (t *Tasks) input(ctx context.Context, ref taskRef, k int, req map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	if len(req) == 0 || len(req) > maxTaskInputs {
		return nil, fmt.Errorf("mcptoken: %d input requests (1 to %d)", len(req), maxTaskInputs)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if err := t.put(ctx, ref, ref.round(k), b); err != nil {
		return nil, err
	}
	got := make(map[string]json.RawMessage, len(req))
	tick := time.NewTicker(t.poll / 4)
	defer tick.Stop()
	for {
		for key := range req {
			if _, ok := got[key]; ok {
				continue
			}
			v, ok, err := t.peek(ctx, ref, ref.answer(k, key))
			if err != nil {
				return nil, err
			}
			if ok {
				got[key] = v
			}
		}
		if len(got) == len(req) {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
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
