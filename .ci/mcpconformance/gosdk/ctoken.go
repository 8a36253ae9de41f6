package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// fixtureKey is the fixed, public test key of the conformance fixture. It
// protects nothing: a real server loads its keys (ctoken.KeyringFromEnv,
// docs/keys.md).
var fixtureKey = []byte("ctoken-conformance-fixture-key!!") // 32 bytes

// fixtureCaller is the caller every request is sealed for: the suite
// authenticates no one, so the fixture names one caller (a real server
// reads its authenticated user, ctokenmcp.TokenUserID).
const fixtureCaller = "conformance-suite"

// secure installs ctokenmcp.SecureRequestState on server: every requestState
// the server sends is encrypted (ctoken.Encrypted), bound to the caller, the
// tool and the call's arguments (ctoken.BindSubjectAndTool), and opens once
// (a replay.MemoryStore).
func secure(server *mcp.Server) error {
	keys, err := ctoken.NewKeyring(fixtureKey)
	if err != nil {
		return err
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys:    keys,
		Mode:    ctoken.Encrypted,
		Binding: ctoken.BindSubjectAndTool,
		TTL:     10 * time.Minute,
		Replay:  replay.NewMemoryStore(0),
	})
	if err != nil {
		return err
	}
	return ctokenmcp.SecureRequestState(server, codec, &ctokenmcp.StateOptions{Caller: ctokenmcp.FixedCaller(fixtureCaller)})
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
			return fmt.Errorf("writing -addr-file: %w", err)
		}
	}
	log.Printf("Conformance server (requestState sealed by ctoken) listening at %s", ln.Addr())
	return http.Serve(ln, h)
}
