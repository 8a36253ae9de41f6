package main

// The consumer module's program and test. They use only names that the
// release check needs to prove importable; the library's behaviour is tested
// in the repository.

const consumerMain = `// Command consumer imports the ctoken modules as a user outside the
// repository would.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"connectrpc.com/connect"
	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	ctokenmcpgo "github.com/ctoken/ctoken/mcpgo"
	ctokenotel "github.com/ctoken/ctoken/otel"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/connectpage"
	"github.com/ctoken/ctoken/protopage/grpcpage"
	"github.com/ctoken/ctoken/pgstore"
	"github.com/ctoken/ctoken/redisstore"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric/noop"
)

func run() (string, error) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		return "", err
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Session: []byte("release-check")})
	if err != nil {
		return "", err
	}
	scope := ctoken.CursorScope{ToolID: "search", CallerID: "alice"}
	cursor, err := issuer.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 2})
	if err != nil {
		return "", err
	}
	p, err := issuer.Verify(cursor, scope)
	if err != nil || p.Page != 2 {
		return "", fmt.Errorf("verify: page %d, %v", p.Page, err)
	}
	if _, err := issuer.Verify(cursor, ctoken.CursorScope{ToolID: "search", CallerID: "bob"}); !errors.Is(err, ctoken.ErrCursorInvalid) {
		return "", fmt.Errorf("another caller's cursor: %v", err)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keys, Binding: ctoken.BindSubjectAndTool})
	if err != nil {
		return "", err
	}
	wire, err := codec.Encode("step 1", "alice", "deploy")
	if err != nil {
		return "", err
	}
	state, err := codec.Decode(wire, "alice", "deploy")
	if err != nil || state != "step 1" {
		return "", fmt.Errorf("decode: %q, %v", state, err)
	}
	if _, err := ctokenmcp.NewCursors(issuer, nil); err != nil {
		return "", err
	}
	if _, err := ctokenmcpgo.NewCursors(issuer, nil); err != nil {
		return "", err
	}
	if _, err := ctokenotel.New(noop.NewMeterProvider()); err != nil {
		return "", err
	}
	if _, err := protopage.New(protopage.Config{Issuer: issuer, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		return "", err
	}
	if _, err := grpcpage.UnaryServerInterceptor(func(context.Context) (string, error) { return "alice", nil }); err != nil {
		return "", err
	}
	if _, err := connectpage.NewInterceptor(func(context.Context, connect.AnyRequest) (string, error) { return "alice", nil }); err != nil {
		return "", err
	}
	// go-redis dials lazily: nothing connects here.
	if _, err := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redisstore.Options{}); err != nil {
		return "", err
	}
	// Schema only writes SQL: nothing connects here either.
	if sql, err := pgstore.Schema(""); err != nil || sql == "" {
		return "", fmt.Errorf("pgstore.Schema: %v", err)
	}
	if sql, err := sqlitestore.Schema(""); err != nil || sql == "" {
		return "", fmt.Errorf("sqlitestore.Schema: %v", err)
	}
	return "cursor, request state, mcp, mcpgo, otel, protopage, redisstore, pgstore and sqlitestore ok", nil
}

func main() {
	msg, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
	fmt.Println(msg)
}
`

const consumerTest = `package main

import "testing"

func TestRun(t *testing.T) {
	msg, err := run()
	if err != nil {
		t.Fatal(err)
	}
	if msg != "cursor, request state, mcp, mcpgo, otel, protopage, redisstore, pgstore and sqlitestore ok" {
		t.Fatalf("run() = %q", msg)
	}
}
`
