package redisstore

// Idempotent MCP tool calls (mcptoken.Idempotency, the engine under
// ctokenmcp's and ctokenmcpgo's Idempotency.Wrap) on a real Redis: the
// retry of a lost response is the same call made again, and gets the
// first result without a second effect.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/ctoken/ctoken"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/mcptoken"
)

// mcpIdemKeys seal the recorded results of the tests' idempotent tools.
var mcpIdemKeys = func() *ctoken.Keyring {
	kr, err := ctoken.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		panic(err)
	}
	return kr
}()

func TestMCPIdempotencyOnRedis(t *testing.T) {
	store, _ := newTestStore(t)
	idem, err := mcptoken.NewIdempotency(mcptoken.IdempotencyConfig{Keys: mcpIdemKeys, Store: store, KeyArgument: "key", Lease: 5 * time.Second}, &mcptoken.Integration{
		Name:     "test",
		NoCaller: func() error { return errors.New("no caller") },
		Refused:  func(mcptoken.Refusal) error { return errors.New("refused") },
	})
	if err != nil {
		t.Fatal(err)
	}
	var effects atomic.Int32
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	pay := func(ctx context.Context) ([]byte, error) {
		n := effects.Add(1)
		started <- struct{}{}
		<-gate
		return []byte(fmt.Sprintf(`{"content":[{"type":"text","text":"payment %d"}]}`, n)), nil
	}
	ctx := context.Background()
	args := []byte(`{"key":"pay-1","amount":5}`)
	var wg sync.WaitGroup
	var first []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		first, err = idem.Call(ctx, "alice", "pay", args, nil, pay) // its response is lost
	}()
	<-started
	t.Run("a concurrent duplicate is busy", func(t *testing.T) {
		_, err := idem.Call(ctx, "alice", "pay", args, nil, pay)
		if d, ok := mcptoken.RetryAfter(err); !errors.Is(err, mcptoken.ErrInProgress) || !ok || d <= 0 {
			t.Fatalf("err = %v, retry after %v", err, d)
		}
	})
	close(gate)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the retry gets the first result", func(t *testing.T) {
		again, err := idem.Call(ctx, "alice", "pay", args, nil, pay)
		if err != nil || !bytes.Equal(again, first) || effects.Load() != 1 {
			t.Fatalf("%q, %v; %d effects", again, err, effects.Load())
		}
	})
	t.Run("changed arguments are refused", func(t *testing.T) {
		if _, err := idem.Call(ctx, "alice", "pay", []byte(`{"key":"pay-1","amount":6}`), nil, pay); !errors.Is(err, mcptoken.ErrKeyReused) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("another caller's key is its own", func(t *testing.T) {
		if _, err := idem.Call(ctx, "bob", "pay", args, nil, pay); err != nil || effects.Load() != 2 {
			t.Fatalf("%v; %d effects", err, effects.Load())
		}
	})
}
