// Package mcptokentest checks a replay store under idempotent MCP tool
// calls and durable MCP tasks as a fleet makes them: [RunContract] and
// [RunTasksContract] serve from two server instances, each with its own
// store value on one backend. Every store of this repository runs both;
// the author of another store can too (ExampleRunContract shows the call
// from a test).
package mcptokentest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
)

// RunContract runs the scenarios of idempotent tool calls
// ([mcptoken.Idempotency], the engine under ctokenmcp's and ctokenmcpgo's
// Idempotency.Wrap) across two server instances against a store:
// newStores returns two store values on one backend (two processes'
// stores, or two Stores in one process on the same server, table or
// file), and the instances share a keyring, as a fleet does. A call made
// on both instances at once runs the tool once, every other copy is
// refused as in progress with a retry time, and every retry after it gets
// the first result byte for byte; a key used again with other arguments
// is refused on the other instance; another caller's key of the same
// name is its own; a failed call frees the key for a retry on the other
// instance. Every store of this repository runs it.
func RunContract(t *testing.T, newStores func(t *testing.T) (a, b replay.Recorder)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b *instance)
	}{
		{"ConcurrentCallsAcrossInstancesRunOnce", concurrentCallsRunOnce},
		{"ChangedArgumentsRefusedOnTheOtherInstance", changedArgumentsRefused},
		{"AnotherCallersKeyIsItsOwn", anotherCallersKey},
		{"FailureFreesTheKeyForTheOtherInstance", failureFreesTheKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sa, sb := newStores(t)
			keys, err := ctoken.NewKeyring(ctoken.RandomKey())
			if err != nil {
				t.Fatal(err)
			}
			pay := &tool{}
			tc.fn(t, newInstance(t, sa, keys, pay), newInstance(t, sb, keys, pay))
		})
	}
}

// tool is the tool both instances serve: "pay" makes one payment per run,
// answering with its run number, or fails while fail is set. A run that
// finds hold set waits until hold is closed.
type tool struct {
	runs  atomic.Int32
	fail  atomic.Bool
	hold  chan struct{}
	stuck atomic.Bool // a held run gave up waiting for the other copies
}

// holdLimit bounds how long a held run waits for the other copies to
// answer: a store under which a duplicate waits for the call in progress
// would otherwise deadlock the contract. It breaks a deadlock; no answer
// of a correct store comes near it.
const holdLimit = time.Minute

func (p *tool) run(context.Context) ([]byte, error) {
	n := p.runs.Add(1)
	if p.fail.Load() {
		return nil, errPaymentFailed
	}
	if p.hold != nil && n == 1 {
		select {
		case <-p.hold:
		case <-time.After(holdLimit):
			p.stuck.Store(true) // see concurrentCallsRunOnce
		}
	}
	return fmt.Appendf(nil, `{"content":[{"type":"text","text":"payment %d"}]}`, n), nil
}

// errPaymentFailed is the tool's own failure.
var errPaymentFailed = errors.New("payment failed")

// instance is one server process: its Idempotency on its store.
type instance struct {
	idem *mcptoken.Idempotency
	pay  *tool
}

func newInstance(t *testing.T, s replay.Recorder, keys *ctoken.Keyring, pay *tool) *instance {
	t.Helper()
	idem, err := mcptoken.NewIdempotency(mcptoken.IdempotencyConfig{Keys: keys, Store: s, KeyArgument: "key", Lease: time.Minute},
		&mcptoken.Integration{
			Name:     "mcptokentest",
			NoCaller: func() error { return errors.New("no caller") },
			Refused:  func(mcptoken.Refusal) error { return errors.New("refused") },
		})
	if err != nil {
		t.Fatal(err)
	}
	return &instance{idem: idem, pay: pay}
}

// call makes caller's call of the tool with args.
func (in *instance) call(caller, args string) ([]byte, error) {
	return in.idem.Call(context.Background(), caller, "pay", []byte(args), nil, in.pay.run)
}

const (
	args1 = `{"key":"pay-1","amount":5}`
	args2 = `{"key":"pay-1","amount":6}` // the same key, other arguments
)

func concurrentCallsRunOnce(t *testing.T, a, b *instance) {
	const copies = 16
	a.pay.hold = make(chan struct{})
	// The call that runs the tool holds it until every other copy has
	// answered, so that each of them meets the call in progress.
	var answered atomic.Int32
	results := make([][]byte, copies)
	errs := make([]error, copies)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range copies {
		in := a
		if i%2 == 1 {
			in = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = in.call("alice", args1)
			if answered.Add(1) == copies-1 {
				close(a.pay.hold)
			}
		}()
	}
	close(start)
	wg.Wait()
	if a.pay.stuck.Load() {
		t.Fatalf("the other copies did not answer within %v while the first call ran: a copy waited for the call in progress instead of answering ErrInProgress", holdLimit)
	}
	if n := a.pay.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times for one call made %d times on two instances", n, copies)
	}
	var first []byte
	for i, err := range errs {
		switch {
		case err == nil && first == nil:
			first = results[i]
		case err == nil:
			t.Fatalf("copy %d answered %q beside %q: two copies ran", i, results[i], first)
		case errors.Is(err, mcptoken.ErrInProgress):
			if d, ok := mcptoken.RetryAfter(err); !ok || d <= 0 {
				t.Errorf("copy %d: in progress without a retry time (%v, %v)", i, d, ok)
			}
		default:
			t.Fatalf("copy %d: %v; want the result or ErrInProgress", i, err)
		}
	}
	if first == nil {
		t.Fatal("no copy answered with the result")
	}
	for _, in := range []*instance{a, b} {
		again, err := in.call("alice", args1)
		if err != nil || !bytes.Equal(again, first) {
			t.Fatalf("a retry got %q, %v; want the first result %q", again, err, first)
		}
	}
	if n := a.pay.runs.Load(); n != 1 {
		t.Fatalf("the retries ran the tool again: %d runs", n)
	}
}

func changedArgumentsRefused(t *testing.T, a, b *instance) {
	first, err := a.call("alice", args1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.call("alice", args2); !errors.Is(err, mcptoken.ErrKeyReused) {
		t.Fatalf("the key with other arguments on the other instance: %v; want ErrKeyReused", err)
	}
	again, err := b.call("alice", args1)
	if err != nil || !bytes.Equal(again, first) || a.pay.runs.Load() != 1 {
		t.Fatalf("the retry after the refusal got %q, %v (%d runs); want the first result %q, one run", again, err, a.pay.runs.Load(), first)
	}
}

func anotherCallersKey(t *testing.T, a, b *instance) {
	alices, err := a.call("alice", args1)
	if err != nil {
		t.Fatal(err)
	}
	bobs, err := b.call("bob", args1)
	if err != nil || bytes.Equal(bobs, alices) || a.pay.runs.Load() != 2 {
		t.Fatalf("bob's call with alice's key got %q, %v (%d runs); want a run of its own", bobs, err, a.pay.runs.Load())
	}
	again, err := b.call("alice", args1)
	if err != nil || !bytes.Equal(again, alices) || a.pay.runs.Load() != 2 {
		t.Fatalf("alice's retry got %q, %v (%d runs); want her first result %q", again, err, a.pay.runs.Load(), alices)
	}
}

func failureFreesTheKey(t *testing.T, a, b *instance) {
	a.pay.fail.Store(true)
	if _, err := a.call("alice", args1); !errors.Is(err, errPaymentFailed) {
		t.Fatalf("a failing call: %v; want the tool's error", err)
	}
	a.pay.fail.Store(false)
	res, err := b.call("alice", args1)
	if err != nil || a.pay.runs.Load() != 2 {
		t.Fatalf("the retry on the other instance: %q, %v (%d runs); want the tool run again", res, err, a.pay.runs.Load())
	}
	again, err := a.call("alice", args1)
	if err != nil || !bytes.Equal(again, res) || a.pay.runs.Load() != 2 {
		t.Fatalf("a retry after the success got %q, %v (%d runs); want %q", again, err, a.pay.runs.Load(), res)
	}
}
