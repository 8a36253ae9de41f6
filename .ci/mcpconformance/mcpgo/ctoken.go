package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcpgo "github.com/ctoken/ctoken/mcpgo"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/mark3labs/mcp-go/server"
)

// fixtureKey is the fixed, public test key of the conformance fixture. It
// protects nothing: a real server loads its keys (ctoken.KeyringFromEnv,
// docs/keys.md).
var fixtureKey = []byte("ctoken-conformance-fixture-key!!") // 32 bytes

// fixtureCaller is the caller every request is sealed for: the suite
// authenticates no one, so the fixture names one caller (a real server puts
// its authenticated user in the context, ctokenmcpgo.WithCaller).
const fixtureCaller = "conformance-suite"

// secure returns ctokenmcpgo.SecureRequestState: every requestState the
// server sends is encrypted (ctoken.Encrypted), bound to the caller, the
// tool and the call's arguments (ctoken.BindSubjectAndTool), and opens once
// (a replay.MemoryStore). A key or codec it cannot build stops the fixture.
func secure() server.ServerOption {
	keys, err := ctoken.NewKeyring(fixtureKey)
	if err != nil {
		log.Fatal(err)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys:    keys,
		Mode:    ctoken.Encrypted,
		Binding: ctoken.BindSubjectAndTool,
		TTL:     10 * time.Minute,
		Replay:  replay.NewMemoryStore(0),
	})
	if err != nil {
		log.Fatal(err)
	}
	states, err := ctokenmcpgo.NewStates(codec, &ctokenmcpgo.StateOptions{Caller: ctokenmcpgo.FixedCaller(fixtureCaller)})
	if err != nil {
		log.Fatal(err)
	}
	return ctokenmcpgo.SecureRequestState(states)
}

// newTasks returns the fixture's durable tasks (the MCP Tasks extension):
// task IDs sealed under the fixture key and bound to fixtureCaller, tasks
// kept in a replay.MemoryStore (one process; a fleet shares sqlitestore,
// pgstore or redisstore). A task outlives its last poll by a minute.
func newTasks() *mcptoken.Tasks {
	keys, err := ctoken.NewKeyring(fixtureKey)
	if err != nil {
		log.Fatal(err)
	}
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{
		Keys:         keys,
		Store:        replay.NewMemoryStore(0),
		TTL:          10 * time.Minute,
		PollInterval: 200 * time.Millisecond,
		Caller:       func(*http.Request) (string, error) { return fixtureCaller, nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	return tasks
}

// serve listens on addr (127.0.0.1:0: a free port), writes the address it
// got to addrFile (when set) once listening, and serves h.
func serve(addr, addrFile string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if addrFile != "" {
		if err := os.WriteFile(addrFile, []byte(ln.Addr().String()), 0o600); err != nil {
			return fmt.Errorf("writing CONFORMANCE_ADDR_FILE: %w", err)
		}
	}
	log.Printf("MCP conformance server (requestState sealed by ctoken) listening on %s", ln.Addr())
	return http.Serve(ln, h)
}
