package mcptoken

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ctoken/ctoken/replay"
)

func TestAnswerJSON(t *testing.T) {
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	// sealed returns States that answer retries and a state they sealed
	// for alice's deploy with args.
	sealed := func(t *testing.T) (*States, *bytes.Buffer, string) {
		t.Helper()
		s, log := retryStates(t, replay.NewMemoryStore(0), StatesConfig{})
		wire, err := s.Seal("alice", "tools/call", "deploy", args, "confirmed")
		if err != nil {
			t.Fatal(err)
		}
		return s, log, wire
	}
	decode := func(b []byte) (*toolResult, error) {
		var r toolResult
		return &r, json.Unmarshal(b, &r)
	}
	t.Run("answers the retry with the recorded result, decoded", func(t *testing.T) {
		s, _, wire := sealed(t)
		runs := 0
		round := func(_ context.Context, plain string) (any, error) {
			runs++
			return &toolResult{N: runs}, nil
		}
		for range 2 {
			res, err := AnswerJSON(ctx, s, "alice", "tools/call", "deploy", args, wire, round, decode)
			if err != nil || res.N != 1 || runs != 1 {
				t.Fatalf("AnswerJSON = %+v, %v after %d runs; want run 1's result, one run", res, err, runs)
			}
		}
	})
	t.Run("a result that does not encode is the round's error", func(t *testing.T) {
		s, _, wire := sealed(t)
		_, err := AnswerJSON(ctx, s, "alice", "tools/call", "deploy", args, wire, func(context.Context, string) (any, error) {
			return func() {}, nil
		}, decode)
		var je *json.UnsupportedTypeError
		if !errors.As(err, &je) || !strings.Contains(err.Error(), "encoding the tool result") {
			t.Fatalf("AnswerJSON = %v; want the encoding error", err)
		}
	})
	t.Run("a record that does not decode is an Internal refusal, logged", func(t *testing.T) {
		s, log, wire := sealed(t)
		_, err := AnswerJSON(ctx, s, "alice", "tools/call", "deploy", args, wire, func(context.Context, string) (any, error) {
			return undecodable{N: 1}, nil
		}, func(b []byte) (undecodable, error) {
			var u undecodable
			return u, json.Unmarshal(b, &u)
		})
		var r *refusedErr
		if !errors.As(err, &r) || !r.r.Internal || r.r.Message != "server error answering requestState" {
			t.Fatalf("AnswerJSON = %v; want an Internal refusal", err)
		}
		if !strings.Contains(log.String(), "a recorded tool result does not decode") || !strings.Contains(log.String(), "tool=deploy") {
			t.Fatalf("log %q; want the decoding failure with the tool", log)
		}
	})
}
