package mcptoken

// A task's input rounds: each round's requests, and each answer, are store
// entries of their own beside the task's.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
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
