package pgstore

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5/pgxpool"
)

// workEndAfterCommit: Commit returns COMMIT's outcome once COMMIT's answer
// is read, and the reset's answer (sent after it, in the same round trip)
// is read after: the connection goes back to the pool only once the reset
// answered, and is closed when that answer fails; a context that ends
// before COMMIT's answer leaves the outcome unknown and the connection
// closed. The server's answers are held back on the connection (see
// holdConn), so each case is reached whatever the machine's speed.
func workEndAfterCommit(t *testing.T) {
	// One connection: the work's, and the next acquire waits for it.
	pool := needServer(t).poolWith(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1
		var dialer net.Dialer
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return newHoldConn(c), nil
		}
	})
	s := storeOn(t, pool)
	table := chargeTable(t, pool)
	until := time.Now().Add(time.Hour)
	// begin begins id's work, charges it and changes its session.
	begin := func(t *testing.T, id string) replay.Work {
		w, _ := acquire(t, s, id, time.Minute)
		ctx := w.Context(bg())
		if err := charge(ctx, table, id, "work"); err != nil {
			t.Fatal(err)
		}
		tx, _ := TxFrom(ctx)
		if _, err := tx.Exec(ctx, `SELECT set_config('application_name', 'dirty', false)`); err != nil {
			t.Fatal(err)
		}
		return w
	}
	// next acquires the pool's connection (waiting for the work's end)
	// and returns it with its application_name.
	next := func(t *testing.T) (net.Conn, string) {
		c, err := pool.Acquire(bg())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		var name string
		if err := c.QueryRow(bg(), `SELECT current_setting('application_name')`).Scan(&name); err != nil {
			t.Fatal(err)
		}
		return c.Conn().PgConn().Conn(), name
	}
	held := func(w replay.Work) *holdConn { return w.(*work).conn.PgConn().Conn().(*holdConn) }
	committed := func(t *testing.T, id string) bool {
		row, _ := rowOf(t, s, id)
		charges := chargesOf(t, pool, table, id)
		if (row.state == "d") != (len(charges) == 1) {
			t.Fatalf("row %+v, charges %q: want both or neither", row, charges)
		}
		return row.state == "d"
	}

	t.Run("reset's answer lost after COMMIT", func(t *testing.T) {
		w := begin(t, "lost-reset")
		c := held(w)
		h := c.arm(holdAfterCommit)
		if err := w.Commit(bg(), until, []byte("fp"), []byte("r")); err != nil {
			t.Fatalf("Commit = %v; want nil (COMMIT answered before the reset's answer was held)", err)
		}
		h.release <- errors.New("connection cut")
		if got, _ := next(t); got == net.Conn(c) {
			t.Fatal("the work's connection was pooled though the reset's answer never came")
		}
		<-c.closed // closed by pgconn, on a goroutine of its own
		if !committed(t, "lost-reset") {
			t.Fatal("Commit = nil, but nothing committed")
		}
	})
	t.Run("context ends after COMMIT's answer", func(t *testing.T) {
		w := begin(t, "cancelled-after")
		c := held(w)
		h := c.arm(holdAfterCommit)
		ctx, cancel := context.WithCancel(bg())
		if err := w.Commit(ctx, until, []byte("fp"), []byte("r")); err != nil {
			t.Fatalf("Commit = %v; want nil", err)
		}
		cancel()
		h.release <- nil
		// The reset's answer is read whatever the caller's context: the
		// connection is pooled, reset.
		if got, name := next(t); got != net.Conn(c) || name == "dirty" {
			t.Fatalf("next acquire: the work's connection %v, application_name %q; want the work's connection, reset", got == net.Conn(c), name)
		}
		if !committed(t, "cancelled-after") {
			t.Fatal("Commit = nil, but nothing committed")
		}
	})
	t.Run("context ends before COMMIT's answer", func(t *testing.T) {
		w := begin(t, "cancelled-before")
		c := held(w)
		h := c.arm(holdAll)
		ctx, cancel := context.WithCancel(bg())
		errc := make(chan error, 1)
		go func() { errc <- w.Commit(ctx, until, []byte("fp"), []byte("r")) }()
		select {
		case <-h.holding:
		case err := <-errc:
			t.Fatalf("Commit = %v before reading its answer", err)
		}
		cancel()
		err := <-errc
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) || errors.Is(err, replay.ErrRolledBack) {
			t.Fatalf("Commit = %v; want ErrUnavailable and context.Canceled, the outcome unknown", err)
		}
		if got, _ := next(t); got == net.Conn(c) {
			t.Fatal("the work's connection was pooled after its context ended mid-commit")
		}
		committed(t, "cancelled-before") // whichever: both or neither
	})
}

// holdConn is a connection whose answers a test holds back once armed:
// holdAfterCommit passes the server's bytes on up to the end of COMMIT's
// answer (its CommandComplete) and holds the rest, holdAll holds all.
// A held read waits until the test sends on the hold's release (nil: the
// bytes pass on; an error: the read fails with it) or a deadline is set
// on the connection (pgx's context watcher, for an ended context: the
// read fails as the deadline makes it). Reads are pgconn's, one at a
// time.
type holdConn struct {
	net.Conn
	hold    atomic.Pointer[hold] // nil: not armed
	closed  chan struct{}
	once    sync.Once
	seen    []byte // read since armed with holdAfterCommit
	pending []byte // to return before reading again
	held    []byte // read, held until released
}

// hold is one arming of a holdConn.
type hold struct {
	mode                      atomic.Int32
	holding                   chan struct{} // closed when a read first waits
	release                   chan error
	deadline                  chan struct{} // closed by a deadline set while armed
	holdingOnce, deadlineOnce sync.Once
}

const (
	holdAfterCommit = iota + 1
	holdAll
)

func newHoldConn(c net.Conn) *holdConn {
	return &holdConn{Conn: c, closed: make(chan struct{})}
}

// arm holds the answers to come (see holdConn); no answer is being read.
func (c *holdConn) arm(mode int32) *hold {
	h := &hold{holding: make(chan struct{}), release: make(chan error, 1), deadline: make(chan struct{})}
	h.mode.Store(mode)
	c.seen = nil
	c.hold.Store(h)
	return h
}

func (c *holdConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	h := c.hold.Load()
	if h == nil {
		return c.Conn.Read(p)
	}
	if h.mode.Load() == holdAfterCommit {
		n, err := c.Conn.Read(p)
		c.seen = append(c.seen, p[:n]...)
		if end := commitEnd(c.seen); end >= 0 {
			pass := n - (len(c.seen) - end) // this read's bytes up to COMMIT's answer's end
			c.held = append(c.held, p[pass:n]...)
			h.mode.Store(holdAll)
			return pass, err
		}
		return n, err
	}
	h.holdingOnce.Do(func() { close(h.holding) })
	select {
	case err := <-h.release:
		c.hold.Store(nil) // later reads read the connection
		if err != nil {
			c.held = nil
			return 0, err
		}
		c.pending, c.held = c.held, nil
		return c.Read(p)
	case <-h.deadline:
		c.hold.Store(nil)
		c.held = nil
		return 0, os.ErrDeadlineExceeded
	}
}

// commitEnd returns the offset after the first CommandComplete "COMMIT"
// among the backend messages of b, or -1.
func commitEnd(b []byte) int {
	for off := 0; off+5 <= len(b); {
		end := off + 1 + int(binary.BigEndian.Uint32(b[off+1:]))
		if end > len(b) {
			break
		}
		if b[off] == 'C' && string(b[off+5:end]) == "COMMIT\x00" {
			return end
		}
		off = end
	}
	return -1
}

func (c *holdConn) SetDeadline(t time.Time) error { c.deadlineSet(t); return c.Conn.SetDeadline(t) }
func (c *holdConn) SetReadDeadline(t time.Time) error {
	c.deadlineSet(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *holdConn) deadlineSet(t time.Time) {
	if h := c.hold.Load(); h != nil && !t.IsZero() && !t.After(time.Now()) {
		h.deadlineOnce.Do(func() { close(h.deadline) })
	}
}

func (c *holdConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
