// Command mcptasks is a runnable example of durable MCP tasks (the Tasks
// extension, io.modelcontextprotocol/tasks) with ctoken and mark3labs/mcp-go:
// two server instances share one SQLite file and sit behind one port, and
// the one running a task is killed mid-task.
//
//  1. Instances A and B (this program, started again as child processes)
//     serve the tool "report" as a task tool (ctokenmcpgo.TaskTool) behind
//     mcptoken.Tasks.Handler, its tasks in one SQLite file (sqlitestore).
//     A small proxy on one port forwards to A.
//  2. A client calls "report" with ctokenmcpgo.CallOptions.Task: the
//     server answers with a task whose ID is a sealed ctoken token bound
//     to the caller; the client keeps it (TaskOptions.Started) and polls.
//  3. A is killed (SIGKILL) while the task runs; the proxy now forwards to
//     B. B answers the polls from the shared file: the task is reported
//     failed ("the server running the task stopped") within the lease
//     (3 s here), not left "working" until its TTL, and never run twice.
//  4. A second task runs to its end on B, and a new client (a restarted
//     one) gets its result again from the kept ID (ctokenmcpgo.ResumeTask);
//     another caller's client is refused the same ID (-32602).
//
// Run it with "go run ." in examples/mcptasks. Keys come from CTOKEN_KEYS
// (see "ctoken keygen"); without it one random key is made for both
// instances, as a fleet shares its keys.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcpgo "github.com/ctoken/ctoken/mcpgo"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	_ "modernc.org/sqlite"
)

// serveEnv, when set to "<sqlite file>", makes this program an instance:
// it serves on a free loopback port and prints "listening <addr>".
const serveEnv = "MCPTASKS_SERVE"

// hold is the lease of the running instance: a task whose instance
// stopped is reported failed within it.
const hold = 3 * time.Second

func main() {
	if db := os.Getenv(serveEnv); db != "" {
		log.Fatal(serve(db))
	}
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// keys returns the fleet's keyring: CTOKEN_KEYS, which run sets for its
// instances.
func keys() (*ctoken.Keyring, error) { return ctoken.KeyringFromEnv("CTOKEN_KEYS") }

// serve is one instance: "report" as a task tool, tasks in the SQLite file
// db, on a free loopback port.
func serve(db string) error {
	kr, err := keys()
	if err != nil {
		return err
	}
	ctx := context.Background()
	sqldb, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return err
	}
	if err := sqlitestore.Migrate(ctx, sqldb, ""); err != nil {
		return err
	}
	store, err := sqlitestore.New(ctx, sqldb, sqlitestore.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		return err
	}
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{
		Keys: kr, Store: store, Hold: hold, PollInterval: 200 * time.Millisecond,
		// A real server authenticates the caller; here the bearer token is the user.
		Caller: func(r *http.Request) (string, error) {
			u, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			return u, nil
		},
	})
	if err != nil {
		return err
	}
	s := server.NewMCPServer("mcptasks", "v0", server.WithToolCapabilities(true),
		server.WithExtensions(map[string]any{mcptoken.TasksExtension: map[string]any{}}))
	report := mcp.NewTool("report", mcp.WithDescription("builds a report in the given seconds"), mcp.WithNumber("seconds"))
	h := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		secs := req.GetFloat("seconds", 1)
		select {
		case <-time.After(time.Duration(secs * float64(time.Second))):
			return mcp.NewToolResultText(fmt.Sprintf("report built in %gs by instance %d", secs, os.Getpid())), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.AddTool(report, h)
	if err := tasks.Add(ctokenmcpgo.TaskTool(report.Name, h, true)); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", ln.Addr())
	return http.Serve(ln, tasks.Handler(server.NewStreamableHTTPServer(s)))
}

// instance is a running child: its process and its address.
type instance struct {
	cmd  *exec.Cmd
	addr string
}

// start starts an instance on db and waits until it listens.
func start(db string) (*instance, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), serveEnv+"="+db)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("instance did not start: %q, %v", line, err)
	}
	go io.Copy(io.Discard, out)
	return &instance{cmd: cmd, addr: addr}, nil
}

func (i *instance) kill() {
	i.cmd.Process.Kill() // by its PID
	i.cmd.Wait()
}

// connect returns an mcp-go client of the endpoint as user.
func connect(ctx context.Context, endpoint, user string) (*client.Client, error) {
	tr, err := transport.NewStreamableHTTP(endpoint, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + user}))
	if err != nil {
		return nil, err
	}
	c := client.NewClient(tr)
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "mcptasks-client", Version: "v0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func report(seconds float64) mcp.CallToolRequest {
	req := mcp.CallToolRequest{}
	req.Params.Name = "report"
	req.Params.Arguments = map[string]any{"seconds": seconds}
	return req
}

// run is the demo; it writes what happens to w.
func run(w io.Writer) error {
	if os.Getenv("CTOKEN_KEYS") == "" {
		os.Setenv("CTOKEN_KEYS", ctoken.EncodeKey(ctoken.RandomKey()))
	}
	dir, err := os.MkdirTemp("", "mcptasks")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db := filepath.Join(dir, "tasks.db")
	a, err := start(db)
	if err != nil {
		return err
	}
	defer a.kill()
	b, err := start(db)
	if err != nil {
		return err
	}
	defer b.kill()

	// One port: the proxy forwards to the current instance.
	var backend atomic.Pointer[url.URL]
	backend.Store(&url.URL{Scheme: "http", Host: a.addr})
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(backend.Load()) }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(ln, proxy)
	defer ln.Close()
	endpoint := "http://" + ln.Addr().String() + "/mcp"
	fmt.Fprintf(w, "instances A (pid %d) and B (pid %d) share %s behind %s\n", a.cmd.Process.Pid, b.cmd.Process.Pid, filepath.Base(db), endpoint)

	ctx := context.Background()
	alice, err := connect(ctx, endpoint, "alice")
	if err != nil {
		return err
	}
	defer alice.Close()

	// 2-3: a task on A, and A killed while it runs.
	var killed time.Time
	_, err = ctokenmcpgo.CallTool(ctx, alice, report(30), ctokenmcpgo.CallOptions{Task: &ctokenmcpgo.TaskOptions{
		Started: func(id string) {
			fmt.Fprintf(w, "task created on A (its ID, %d characters, is what the client keeps)\n", len(id))
			a.kill()
			backend.Store(&url.URL{Scheme: "http", Host: b.addr})
			killed = time.Now()
			fmt.Fprintln(w, "A killed mid-task; the proxy now forwards to B")
		},
	}})
	var failure *mcptoken.TaskFailure
	if !errors.As(err, &failure) {
		return fmt.Errorf("the task of the killed instance ended with %v, want a failure", err)
	}
	fmt.Fprintf(w, "B reports the task failed %s after the kill (lease %s): %s\n", time.Since(killed).Round(100*time.Millisecond), hold, failure.Message)

	// 4: a task that B runs to its end, then resumed from its kept ID.
	var kept string
	res, err := ctokenmcpgo.CallTool(ctx, alice, report(0.5), ctokenmcpgo.CallOptions{Task: &ctokenmcpgo.TaskOptions{Started: func(id string) { kept = id }}})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "second task: %s\n", text(res))
	restarted, err := connect(ctx, endpoint, "alice")
	if err != nil {
		return err
	}
	defer restarted.Close()
	if res, err = ctokenmcpgo.ResumeTask(ctx, restarted, kept, ctokenmcpgo.TaskOptions{}); err != nil {
		return err
	}
	fmt.Fprintf(w, "a new client resumes it from the kept ID: %s\n", text(res))
	bob, err := connect(ctx, endpoint, "bob")
	if err != nil {
		return err
	}
	defer bob.Close()
	_, err = ctokenmcpgo.ResumeTask(ctx, bob, kept, ctokenmcpgo.TaskOptions{})
	if !errors.Is(err, mcp.ErrInvalidParams) {
		return fmt.Errorf("another caller's resume ended with %v, want -32602", err)
	}
	fmt.Fprintf(w, "bob presenting alice's task ID: refused (%v)\n", err)
	return nil
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}
