package drivertest

// A server restart, as a client meets it: an idempotent, Transactional
// MCP tool on a sqlitestore runs in a child process (this test binary
// started again), which is SIGKILLed while the tool is inside its
// transaction, its row written and not committed; the answer never
// comes. ctokenmcp.CallTool, with its default budget, meets refused
// connections while the server is down, and the child is started again
// on the same file and the same address. The call must succeed without a
// second call from the application, with one row.

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// restartChildEnv holds a restartJob (JSON) and makes the test binary
// serve it instead of running its tests.
const restartChildEnv = "CTOKEN_DRIVERTEST_MCP_RESTART_CHILD"

// restartJob is what a server child serves.
type restartJob struct {
	DB   string `json:"db"`
	Addr string `json:"addr"`
	// Hang makes the tool's first run stop inside its transaction, after
	// its insert, and say "acting": it is killed there.
	Hang bool `json:"hang"`
}

func init() {
	if spec := os.Getenv(restartChildEnv); spec != "" {
		if err := restartChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, "restart child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// restartChild serves the tool "pay" over stateless streamable HTTP on
// job.Addr until it is killed (or 60 s pass), and says "ready" once it
// listens.
func restartChild(spec string) error {
	var job restartJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		return err
	}
	ctx := context.Background()
	db, err := sql.Open(driver.SQLName, driver.DSN(job.DB, Safe))
	if err != nil {
		return err
	}
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS payments (key TEXT, cents INTEGER)`); err != nil {
		return err
	}
	if err := sqlitestore.Migrate(ctx, db, ""); err != nil {
		return fmt.Errorf("Migrate: %w", err)
	}
	store, err := sqlitestore.New(ctx, db, sqlitestore.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		return fmt.Errorf("New: %w", err)
	}
	idem, err := ctokenmcp.NewIdempotency(ctokenmcp.IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: idemKeys, Store: store, KeyFromMeta: true, Transactional: true},
		Caller:            ctokenmcp.FixedCaller("alice"),
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "payer", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: "pay", InputSchema: json.RawMessage(`{"type":"object","properties":{"cents":{"type":"integer"}}}`)},
		idem.Wrap(func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			tx, err := sqlitestore.TxFrom(ctx)
			if err != nil {
				return nil, err
			}
			var in struct {
				Cents int `json:"cents"`
			}
			json.Unmarshal(req.Params.Arguments, &in)
			key, _ := mcptoken.MetaKeyOf(req.Params.Meta).(string)
			if _, err := tx.ExecContext(ctx, `INSERT INTO payments (key, cents) VALUES (?, ?)`, key, in.Cents); err != nil {
				return nil, err
			}
			if job.Hang {
				os.Stdout.WriteString("acting\n")
				select {} // killed here, the row not committed
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("paid %d", in.Cents)}}}, nil
		}))
	ln, err := net.Listen("tcp", job.Addr)
	if err != nil {
		return err
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	go http.Serve(ln, h)
	os.Stdout.WriteString("ready\n")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	select {
	case <-sig:
	case <-time.After(60 * time.Second):
	}
	return nil
}

// restartProc is one server child.
type restartProc struct {
	cmd    *exec.Cmd
	said   chan string // each line the child prints
	exited chan struct{}
}

func startRestartChild(t *testing.T, job restartJob) *restartProc {
	t.Helper()
	spec, _ := json.Marshal(job)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &restartProc{cmd: exec.Command(exe, "-test.run=^$"), said: make(chan string, 8), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), restartChildEnv+"="+string(spec))
	p.cmd.Stderr = os.Stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		for sc := bufio.NewScanner(out); sc.Scan(); {
			p.said <- sc.Text()
		}
		p.cmd.Wait()
	}()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.exited })
	p.await(t, "ready")
	return p
}

// await waits for the child to say want.
func (p *restartProc) await(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-p.said:
		if got != want {
			t.Fatalf("the child said %q; want %q", got, want)
		}
	case <-p.exited:
		t.Fatalf("the child exited before it said %q", want)
	case <-time.After(failsafe):
		t.Fatalf("the child did not say %q in %v", want, failsafe)
	}
}

// failsafe bounds every wait for an event that must come.
const failsafe = 30 * time.Second

// refusingDialer counts the connections refused while the server is
// down, and tells refused of each.
type refusingDialer struct {
	refused chan struct{}
	n       atomic.Int32
}

func (d *refusingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if errors.Is(err, syscall.ECONNREFUSED) {
		d.n.Add(1)
		select {
		case d.refused <- struct{}{}:
		default:
		}
	}
	return c, err
}

// TestCallToolRidesOutARestart: the server is SIGKILLed inside the tool's
// transaction and started again on the same file once the client has met
// down refused connections (CI: 1 and 4, about 0.1 s and 1 s of backoff;
// CTOKEN_RESTART_DOWNTIMES, e.g. "2s,5s,10s", adds downtimes measured by
// the clock, for a manual run). One call, one row.
func TestCallToolRidesOutARestart(t *testing.T) {
	type downtime struct {
		refusals int
		clock    time.Duration
	}
	downs := []downtime{{refusals: 1}, {refusals: 4}}
	if env := os.Getenv("CTOKEN_RESTART_DOWNTIMES"); env != "" {
		for _, f := range strings.Split(env, ",") {
			d, err := time.ParseDuration(f)
			if err != nil {
				t.Fatalf("CTOKEN_RESTART_DOWNTIMES: %v", err)
			}
			downs = append(downs, downtime{clock: d})
		}
	}
	for _, down := range downs {
		name := fmt.Sprintf("after %d refused connections", down.refusals)
		if down.clock > 0 {
			name = "after " + down.clock.String()
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "payments.db")
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			first := startRestartChild(t, restartJob{DB: path, Addr: addr, Hang: true})

			dialer := &refusingDialer{refused: make(chan struct{}, 1)}
			hc := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil).Connect(context.Background(),
				&mcp.StreamableClientTransport{Endpoint: "http://" + addr, HTTPClient: hc, MaxRetries: -1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			type answer struct {
				res *mcp.CallToolResult
				err error
			}
			done := make(chan answer, 1)
			start := time.Now()
			go func() {
				res, err := ctokenmcp.CallTool(context.Background(), cs, &mcp.CallToolParams{Name: "pay", Arguments: map[string]any{"cents": 500}}, ctokenmcp.CallOptions{})
				done <- answer{res, err}
			}()
			first.await(t, "acting")
			first.cmd.Process.Kill() // SIGKILL, inside the transaction
			<-first.exited
			killed := time.Now()
			if down.clock > 0 {
				time.Sleep(down.clock) // the downtime itself, asked for by a manual run
			} else {
				for dialer.n.Load() < int32(down.refusals) {
					select {
					case <-dialer.refused:
					case a := <-done:
						t.Fatalf("the call ended while the server was down: %+v", a)
					case <-time.After(failsafe):
						t.Fatalf("%d refused connections in %v; want %d", dialer.n.Load(), failsafe, down.refusals)
					}
				}
			}
			startRestartChild(t, restartJob{DB: path, Addr: addr})
			var a answer
			select {
			case a = <-done:
			case <-time.After(2 * failsafe):
				t.Fatal("the call did not end")
			}
			if a.err != nil {
				t.Fatalf("after a restart %v after the kill: %v", time.Since(killed), a.err)
			}
			if rows := countRows(t, driver.Open(t, path), `SELECT count(*) FROM payments`); rows != 1 {
				t.Fatalf("%d rows; want 1", rows)
			}
			t.Logf("down %v (%d refused connections); the call took %v", time.Since(killed).Round(time.Millisecond), dialer.n.Load(), time.Since(start).Round(time.Millisecond))
		})
	}
}
