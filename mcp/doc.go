// Package ctokenmcp connects ctoken to the Go MCP SDK
// (github.com/modelcontextprotocol/go-sdk): a sealed requestState for multi
// round-trip requests (MRTR, SEP-2322), and signed continuation cursors for
// paginated tools.
// Most servers need two calls, [SecureRequestState] and
// [SecureListCursors] (ExampleSecureRequestState, ExampleSecureListCursors);
// a tool that pages its own results adds [Cursors] (ExampleCursors).
//
// A server whose list cursors are sealed and bound to the caller: a client
// follows them page by page, and a forged one is refused with ctoken's
// code 1021 (ExampleSecureListCursors):
//
//	kr, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
//	issuer, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Seal: true})
//
//	s := mcp.NewServer(&mcp.Implementation{Name: "server", Version: "v0"}, &mcp.ServerOptions{PageSize: 2})
//	for _, name := range []string{"alpha", "beta", "gamma"} {
//		s.AddPrompt(&mcp.Prompt{Name: name}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
//			return &mcp.GetPromptResult{}, nil
//		})
//	}
//	if err := ctokenmcp.SecureListCursors(s, issuer, &ctokenmcp.CursorOptions{Caller: ctokenmcp.FixedCaller("alice")}); err != nil {
//		log.Fatal(err)
//	}
//
//	ctx := context.Background()
//	st, ct := mcp.NewInMemoryTransports() // in memory here; a real server serves HTTP or stdio
//	if _, err := s.Connect(ctx, st, nil); err != nil {
//		log.Fatal(err)
//	}
//	cs, err := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "v0"}, nil).Connect(ctx, ct, nil)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer cs.Close()
//	for p, err := range cs.Prompts(ctx, nil) { // follows every cursor
//		if err != nil {
//			log.Fatal(err)
//		}
//		fmt.Println(p.Name)
//	}
//	_, err = cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: "forged"})
//	fmt.Println(err, ctokenmcp.TokenErrorCode(err))
//
// One call secures the requestState of a whole server:
//
//	codec, _ := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
//		Keys: keys, Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool,
//	})
//	err := ctokenmcp.SecureRequestState(server, codec, nil)
//
// From then on every tool, prompt and resource handler of server returns
// and receives its requestState as plaintext; the middleware seals it on
// the way out and opens and checks it on the way in (see
// [SecureRequestState]).
//
// The package lives in the nested module github.com/ctoken/ctoken/mcp so
// that the root ctoken module does not depend on the SDK. Its name is
// ctokenmcp, so it can be imported next to the SDK's mcp package.
//
// # Who is calling
//
// Every token this package mints is bound to the authenticated caller of the
// request, found by a CallerFunc. The default, TokenUserID, reads
// auth.TokenInfo.UserID, which the SDK's streamable HTTP transport fills
// from auth.RequireBearerToken. A transport without per-request
// authentication (stdio, in-memory) has to say who its peer is with
// FixedCaller. A request without a caller is refused (fail closed): a token
// bound to nobody would be usable by anybody.
//
// # Cursors
//
// Cursors wraps a ctoken.CursorIssuer. A cursor it issues is bound to the
// tool (ctoken.MCPTarget("tools/call", name)), the caller and, when given,
// the arguments of the call (ctoken.ArgsFingerprint), so it cannot be
// replayed by another user, against another tool, or with other arguments.
// A cursor that does not verify is answered with JSON-RPC error -32602
// (invalid params), as the MCP specification asks for invalid cursors; its
// data member carries ctoken's code (1020 expired: start over, 1021
// invalid), never the reason, which goes to the server log only.
//
// A handler turns a page with [Cursors.Turn]: it verifies the cursor the
// client sent (none is the first page, Page 0) and keeps the scope, so
// Turn.Next issues the next cursor without fingerprinting the arguments
// again. [Cursors.Resume] and [Cursors.Next] do the same in two calls.
//
// # List cursors
//
// [SecureListCursors] seals the SDK's own cursors of tools/list,
// prompts/list, resources/list and resources/templates/list, bound to the
// list method, the caller and the session (the caller alone on a transport
// without sessions), without changing what the lists return. A refused
// list cursor is -32602 with the same data member.
//
// # Request state
//
// [SecureRequestState] installs go-sdk receiving middleware covering
// tools/call, prompts/get and resources/read, the methods that carry
// requestState in go-sdk v1.8.0 (protocol 2026-07-28). A state is bound to
// the caller, to ctoken.MCPTarget(method, name-or-uri) and, by default, to
// the fingerprint of the call's arguments. A state that does not open is
// JSON-RPC error -32602 and never reaches the handler; a replay store that
// cannot answer is -32603. A client before protocol 2026-07-28 that cannot
// be asked for input (for example over stateless HTTP) gets -32021
// (mcp.CodeMissingRequiredClientCapabilities) with a message saying what the
// request needs and what the server saw of the client, instead of the SDK's
// JSON-RPC error with code 0.
//
// With StateOptions.UnboundArgs and a ctoken.BindSubjectAndTool codec, the
// middleware seals exactly as the reference D dispatch does (subject, method
// "\x00" name, no argument wrapper): the interop mode for a mixed fleet.
//
// The per-handler API stays for handlers that want it: States wraps a
// ctoken.RequestStateCodec. A tool that needs input from the user returns a
// CallToolResult with InputRequests and a RequestState sealed by
// States.Seal; the SDK (v1.8.0 and later) sends it as an input_required
// result, the client fulfils the requests and retries the call echoing the
// state, and States.Open checks it: bound to the caller (subject), to
// ctoken.MCPTarget("tools/call", name) and, unless disabled, to the
// fingerprint of the call's arguments, so a client can neither edit the
// state, nor hand it to another user or tool, nor keep the state and change
// the arguments. A state that does not open is JSON-RPC error -32602 (a
// failing replay store of a single-use codec is -32603: the state was not
// consumed; nor is a state refused for its caller, tool, arguments or
// audience). [NewStates] refuses a codec that does not bind the tool unless
// StateOptions.InsecureSkipToolBinding.
//
// # Retries of a continuation
//
// A single-use state is accepted once, so the client of a two-round tool
// whose second response was lost (the deploy ran) used to be told its retry
// was invalid, and its user had to confirm and deploy again. With
// StateOptions.AnswerRetries (and a single-use codec whose store is a
// replay.Recorder: replay.MemoryStore, redisstore, pgstore, sqlitestore),
// [SecureRequestState] records the result of each tools/call round with
// the state, sealed under the codec's own keys, and answers the honest
// retry (same caller, tool, arguments and state) with it, the same JSON on
// the wire, without running the round again; a retry while the round runs
// is -32602 with {"ctokenCode":1027,"retryAfterMs":N} ([StateBusy]), to
// retry after N ms (at most 1000). Everywhere the result cannot be
// answered (the round failed, the record is gone or does not open,
// AnswerRetries is off) an
// authentic state of the same call is {"ctokenCode":1026} ([StateUsed]),
// which a client tells from a forged or misdirected state (1023).
//
// With the argument binding (the default), the text States (and the
// middleware) hands the codec
// is the JSON object {"a":<hex SHA-256 ArgsFingerprint of the call's
// arguments, absent arguments taken as {}; a prompt's arguments object; {}
// for a resource>,"s":<the application's state as a JSON string>}; with
// StateOptions.UnboundArgs it is the application's
// state itself. Either way the codec's wire format (v1. or v1e.) is
// unchanged, so the CLI's "ctoken verify" opens these states.
//
// # Durable tasks
//
// [TaskTool] makes a tool handler task-augmented (the MCP Tasks extension,
// io.modelcontextprotocol/tasks) on an [mcptoken.Tasks]: the go-sdk routes
// none of the extension's methods, so Tasks.Handler answers them, and the
// tools/call of the tools it holds, in front of the streamable HTTP
// handler. Task IDs are sealed ctoken cursors bound to the caller; each
// task lives in the replay store, so any instance of a fleet answers for
// it, and a task whose instance stopped is reported failed within the
// lease.
//
// Everything that does not touch a go-sdk type (the cursor scope and page
// turn, sealing and opening states, the argument wrapper, the codes and the
// mapping of ctoken's errors to them, the caller check, the older-client
// refusal) comes from package github.com/ctoken/ctoken/mcptoken, which the
// mcp-go integration (github.com/ctoken/ctoken/mcpgo) shares: this package
// converts go-sdk's requests and results and installs the middleware, so
// both integrations behave and word alike.
//
// All types are safe for concurrent use.
package ctokenmcp
