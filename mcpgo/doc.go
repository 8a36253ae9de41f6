// Package ctokenmcpgo connects ctoken to mark3labs/mcp-go
// (github.com/mark3labs/mcp-go, built and tested against v1.2.1): signed
// continuation cursors for paginated tools, and a sealed requestState for
// multi round-trip requests (MRTR, SEP-2322, protocol 2026-07-28).
// Most servers need two server options, [SecureRequestState] and
// [SecureListCursors] (ExampleSecureListCursors); a tool that pages its own
// results adds [Cursors].
//
// A server whose list cursors are sealed and bound to the caller: a client
// follows them page by page, and a forged one is refused
// (ExampleSecureListCursors):
//
//	kr, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
//	issuer, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Seal: true})
//	lists, err := ctokenmcpgo.SecureListCursors(issuer, nil)
//	if err != nil {
//		log.Fatal(err)
//	}
//	s := server.NewMCPServer("server", "v0", server.WithPaginationLimit(2), lists)
//	for _, name := range []string{"alpha", "beta", "gamma"} {
//		s.AddTool(mcp.NewTool(name), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
//			return mcp.NewToolResultText("ok"), nil
//		})
//	}
//
//	ctx := ctokenmcpgo.WithCaller(context.Background(), "alice")
//	c, err := client.NewInProcessClient(s)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer c.Close()
//	if err := c.Start(ctx); err != nil {
//		log.Fatal(err)
//	}
//	init := mcp.InitializeRequest{}
//	init.Params.ClientInfo = mcp.Implementation{Name: "client", Version: "v0"}
//	if _, err := c.Initialize(ctx, init); err != nil {
//		log.Fatal(err)
//	}
//	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{}) // follows every cursor
//	if err != nil {
//		log.Fatal(err)
//	}
//	for _, t := range tools.Tools {
//		fmt.Println(t.Name)
//	}
//	forged := mcp.ListToolsRequest{}
//	forged.Params.Cursor = "forged"
//	_, err = c.ListToolsByPage(ctx, forged)
//	fmt.Println(err)
//
// It lives in the nested module github.com/ctoken/ctoken/mcpgo so that the
// root ctoken module does not depend on mcp-go. It mirrors package ctokenmcp
// (the official go-sdk integration, module github.com/ctoken/ctoken/mcp) and
// differs only where mcp-go requires it; see "Differences from ctokenmcp".
//
// # Who is calling
//
// Every token this package mints is bound to the authenticated caller of the
// request, found by a [CallerFunc]. mcp-go has no authentication of its own,
// so the default, [ContextCaller], reads the caller that [WithCaller] put in
// the request's context: over streamable HTTP, set it in a
// server.WithHTTPContextFunc after checking the request's credentials; an
// in-process client sets it on the context of its calls; a stdio server uses
// [FixedCaller]. A request without a caller is refused (fail closed) with
// [ErrNoCaller]: a token bound to nobody would be usable by anybody.
//
// # Cursors
//
// [Cursors] wraps a ctoken.CursorIssuer. A cursor it issues is bound to the
// tool (ctoken.MCPTarget("tools/call", name)), the caller and, when given, the
// arguments of the call (ctoken.ArgsFingerprint), so it cannot be replayed by
// another user, against another tool, or with other arguments. A cursor that
// does not verify is a [*Rejection] carrying ctoken's code (1020 expired:
// start over; 1021 invalid), never the reason, which goes to the logger only.
// [ToolResult] turns it into the tool's result.
//
// A handler turns a page with [Cursors.Turn]: it verifies the cursor the
// client sent (none is the first page, Page 0) and keeps the scope, so
// Turn.Next issues the next cursor without fingerprinting the arguments
// again. [Cursors.Resume] and [Cursors.Next] do the same in two calls.
//
// # List cursors
//
// [SecureListCursors] is one server option that seals mcp-go's own cursors
// of tools/list, prompts/list, resources/list and
// resources/templates/list, bound to the list method, the caller and the
// session (the caller alone without a session), without changing what the
// lists return. mcp-go lets only hooks see a list, and a hook cannot fail a
// request: a refused list cursor is mcp-go's own -32602, without ctoken's
// code, which goes to the log.
//
// # Request state
//
// [SecureRequestState] is one server option that seals requestState in
// dispatch: handlers for tools and prompts return and receive plaintext
// state, and every state on the wire is a ctoken request state (v1. or v1e.)
// bound to the caller, to ctoken.MCPTarget(method, name) and, unless
// [StateOptions.UnboundArgs], to the fingerprint of the call's arguments.
// With a single-use codec (ctoken.RequestStateSecurity.Replay) a state opens
// once, and a state refused for its caller, tool, arguments or audience is
// not consumed; presented again, an authentic state of the same call is
// 1026 ([StateUsed]), not 1023. With [StateOptions.AnswerRetries] a
// tools/call round runs once per state and its honest retry (same caller,
// tool, arguments and state, after a lost response) gets the recorded
// result, the same JSON, recorded sealed under the codec's own keys; a
// retry while the round runs is 1027 ([StateBusy]), its message carrying
// when to retry ([StateRetryAfter]). [NewStates] refuses a codec that does not bind the tool
// unless [StateOptions.InsecureSkipToolBinding]. The per-handler form is [States.SealTool] and [States.OpenTool].
//
// With the argument binding (the default) the text sealed is the JSON object
// {"a":<hex ArgsFingerprint of the arguments, absent arguments taken as
// {}>,"s":<the application's state>}, as in ctokenmcp; with UnboundArgs it is
// the application's state itself, which is what the reference D dispatch
// seals (use a codec with ctoken.BindSubjectAndTool for that).
//
// Coverage in mcp-go v1.2.1: tools/call and prompts/get, in and out;
// resources/read in only (mcp-go's resource handlers return contents, so
// they cannot ask for input). Task tools (mcp-go's AddTaskTool, and calls
// answered with a task by [TaskTool]'s Tasks.Handler) bypass mcp-go's tool
// middleware and are not covered. Clients on protocol versions before
// 2026-07-28 never see a state: mcp-go asks them with server-initiated
// requests and re-runs the handler in process, through the same middleware.
//
// # Durable tasks
//
// [TaskTool] makes a tool handler task-augmented (the MCP Tasks extension,
// io.modelcontextprotocol/tasks) on an [mcptoken.Tasks], whose Handler
// answers the extension's methods, and the tools/call of the tools it
// holds, in front of mcp-go's streamable HTTP handler (mcp-go routes none
// of them to application code, and no handler of it can answer a
// CreateTaskResult or a -32021). Task IDs are sealed ctoken tokens bound
// to the caller; each task lives in the replay store, so any instance of a
// fleet answers for it, and a task whose instance stopped is reported
// failed within the lease. On the client, [CallOptions].Task makes
// [CallTool] drive a task to its result, and [ResumeTask] gets it later
// from the kept task ID (docs/mcp-tasks.md).
//
// # Older clients
//
// A tool or prompt that asks for input a client did not declare it can give
// (the elicitation, sampling or roots capability; for example a 2025-11-25
// client over stateless HTTP, which has no session to be asked on) gets a
// tool error result, or for a prompt a JSON-RPC error -32603, whose message
// names the missing capability, the client's protocol version and what the
// server saw (a declaration without the capability, or over stateless HTTP
// none at all), in the words of ctokenmcp's -32021 error (see
// [ErrClientCannotAnswer]); it never fails with code 0.
//
// # Differences from ctokenmcp
//
//   - Refusals: mcp-go sends every error a tool, prompt or resource handler
//     returns as JSON-RPC -32603 and offers no way to choose the code or the
//     data member, so a refused cursor or state cannot be the -32602 with
//     {"ctokenCode":N} in data that ctokenmcp sends. A requestState refused
//     by [SecureRequestState], for a tool, a prompt or a resource, is a
//     JSON-RPC error -32603 with the fixed message, which carries the code
//     ("invalid requestState (ctokenCode 1023)"): an error and not a result,
//     as ctokenmcp's, and as the official conformance suite requires. A
//     refused cursor, a tool argument a model can correct, is a tool error
//     result made by [ToolResult] (isError, the fixed message, _meta
//     {"ctokenCode":N}; read it with [TokenCode]). mcp-go's client drops the
//     data member of every error anyway.
//   - No caller, or a replay store that cannot answer: -32603 in both.
//   - Caller: ctokenmcp reads the go-sdk's auth.TokenInfo; mcp-go has none,
//     so the caller comes from the context ([WithCaller]).
//   - Request state: both seal every requestState in dispatch with one call
//     named SecureRequestState; ctokenmcp installs go-sdk receiving
//     middleware, this package a server option ([SecureRequestState]).
//     ctokenmcp also seals resources/read results; here resources/read is
//     opened only (see Coverage above).
//   - Client: [CallTool] is ctokenmcp.CallTool for mcp-go's client, with
//     the same key, budget, [ErrOutcomeUnknown] and [RetryKey]. The
//     refusals it retries arrive as this package sends them: 1025 and
//     1028 as tool error results, which it never returns as the call's
//     result; 1027 and a failed idempotency store as -32603 errors. Once
//     an attempt may have run the tool, a later tool error result with a
//     ctoken code is no result of the call either.
//     mcp-go's client drives the rounds of a multi round-trip call
//     itself, so a retry starts again at round one.
//
// The codes 1022 ([StateExpired]), 1023 ([StateInvalid]), 1026
// ([StateUsed]), 1027 ([StateBusy]) and 1029 ([RoundInterrupted]) are
// local to ctoken; 1020 and 1021
// are the reference protocol's cursor codes.
// Everything that does not touch an mcp-go type (the cursor scope and page
// turn, sealing and opening states, the argument wrapper, the codes and the
// mapping of ctoken's errors to them, the caller check, the older-client
// refusal) comes from package github.com/ctoken/ctoken/mcptoken, which
// ctokenmcp shares: this package converts mcp-go's requests and results and
// installs the middleware, so both integrations behave and word alike.
//
// All types are safe for concurrent use.
package ctokenmcpgo
