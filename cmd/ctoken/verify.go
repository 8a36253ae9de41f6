package main

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/ctoken/ctoken"
)

const verifyUsage = `Usage: ctoken verify [flags] TOKEN|-

Verifies a ctoken token with the keys in an environment variable (a
comma-separated CTOKEN_KEYS list, primary first). On success it prints the
verified payload as JSON and exits 0; on rejection it prints the reason on
standard error and exits 1.

Cursors and one-time tokens name the key that signed them by a key id (8 hex
digits, as ctoken.Keyring.KeyIDs prints it): verify checks them with that
key only, and says which key of the ring it is ("keyInRing": primary,
previous N) or, on rejection, that no key of the ring has the id (a retired
key, another deployment's key, or an altered id) and which ids the ring
holds. Request states carry no key id (their v1./v1e. formats are fixed by
the reference D implementation): every key is tried, and "verifiedBy" names
the one that matched.

Cursors (bare base64url) are checked for MAC, age (-ttl), server session
(-session, the same text as the server's CTOKEN_SESSION) and scope (-tool,
-caller, -args). A cursor (signed or sealed) carries nothing of its tool,
caller and arguments (its MAC, or sealed its XAES-256-GCM tag, covers
them) and only a tag of its session: -tool, -caller and -session are
required, and -args when the cursor was bound to arguments; a wrong one and
a forged cursor give the same "forged or wrong scope". The key id the
cursor names is printed with its place in the ring.

Request states ("v1." signed, "v1e." encrypted) are checked for MAC or GCM
tag, expiry and binding; -subject and -tool must be what the server bound
the state to (with -binding as configured on the server). A flag the binding
does not check (-tool unless -binding subject-and-tool, -subject under
-binding none) is refused. Under subject-and-tool an empty -subject still
binds the tool. A server that sets RequestStateSecurity.Audience binds its
states to it: pass the same -audience. A v1. state of the TypeScript or
Python MCP SDK is named as such in the rejection.

One-time tokens ("ot1.") are checked for MAC, purpose (-purpose, required:
the OneTimeConfig.Purpose of the issuer) and expiry, and their claims are
printed. verify does not consult the replay store: it cannot tell whether
the token was already redeemed, and it does not redeem it.

-method M turns -tool NAME into ctoken.MCPTarget(M, NAME), the tool ID the
MCP integration binds to (for example -method tools/call -tool search).

A TOKEN of "-" is read from standard input.
`

func cmdVerify(args []string, e *env) int {
	fs := newFlagSet("verify", verifyUsage, e)
	keysEnv := fs.String("keys-env", "CTOKEN_KEYS", "environment variable holding the keys")
	tool := fs.String("tool", "", "tool ID the token must be bound to")
	method := fs.String("method", "", "MCP method; with it the tool ID is ctoken.MCPTarget(method, tool)")
	caller := fs.String("caller", "", "cursor: caller ID the cursor must be bound to")
	argsJSON := fs.String("args", "", "cursor: the call's arguments as JSON; compared by ctoken.ArgsFingerprint")
	session := fs.String("session", "", "cursor: server session, as in CTOKEN_SESSION (default: taken from the token, unchecked)")
	ttl := fs.Duration("ttl", ctoken.DefaultCursorTTL, "cursor: maximum age; negative means no limit")
	subject := fs.String("subject", "", "request state: subject the state is bound to")
	mode := fs.String("mode", "auto", "request state: auto (from the prefix), signed or encrypted")
	binding := fs.String("binding", "subject", "request state: subject, subject-and-tool or none")
	audience := fs.String("audience", "", "request state: the server's RequestStateSecurity.Audience, if it sets one")
	maxBytes := fs.Int("max-bytes", 0, "request state: size cap in bytes (0 means the library default)")
	purpose := fs.String("purpose", "", "one-time token: the issuer's purpose (required)")
	if done, status := parseFlags(fs, args, e); done {
		return status
	}
	tok, err := tokenArg(fs.Args(), e)
	if err != nil {
		return usageError(fs, e, "%v", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["method"] && !set["tool"] {
		return usageError(fs, e, "-method needs -tool")
	}
	toolID := *tool
	if *method != "" {
		toolID = ctoken.MCPTarget(*method, *tool)
	}

	keys := strings.TrimSpace(e.getenv(*keysEnv))
	if keys == "" {
		return usageError(fs, e, "%s is not set: export the server's keys (see ctoken keygen)", *keysEnv)
	}
	kr, err := ctoken.ParseKeyring(keys)
	if err != nil {
		return usageError(fs, e, "%s: %v", *keysEnv, err)
	}

	if classify(tok) == kindOneTime {
		for _, f := range []string{"tool", "method", "caller", "args", "session", "ttl", "subject", "mode", "binding", "audience", "max-bytes"} {
			if set[f] {
				return usageError(fs, e, "-%s does not apply to one-time tokens", f)
			}
		}
		if !set["purpose"] {
			return usageError(fs, e, "a one-time token needs -purpose (the issuer's OneTimeConfig.Purpose)")
		}
		return verifyOneTime(tok, kr, *keysEnv, *purpose, e)
	}
	if set["purpose"] {
		return usageError(fs, e, "-purpose applies to one-time tokens")
	}

	if kind := classify(tok); kind != kindCursor {
		for _, f := range []string{"caller", "args", "session", "ttl"} {
			if set[f] {
				return usageError(fs, e, "-%s applies to cursors, and this token is a request state", f)
			}
		}
		sec := ctoken.RequestStateSecurity{Keys: kr, MaxBytes: *maxBytes, Audience: *audience}
		if sec.Mode, err = parseMode(*mode, kind); err != nil {
			return usageError(fs, e, "%v", err)
		}
		if sec.Binding, err = parseBinding(*binding); err != nil {
			return usageError(fs, e, "%v", err)
		}
		// Refuse what the binding would ignore rather than print it in a
		// verified payload as if it had been checked. Under
		// subject-and-tool the tool is bound even for an empty subject.
		if set["subject"] && sec.Binding == ctoken.BindNone {
			return usageError(fs, e, "-subject is not checked under -binding none")
		}
		if set["tool"] && sec.Binding != ctoken.BindSubjectAndTool {
			return usageError(fs, e, "-tool is not checked: only -binding subject-and-tool binds the tool")
		}
		return verifyState(tok, sec, *subject, toolID, *binding, *keysEnv, e)
	}

	for _, f := range []string{"subject", "mode", "binding", "audience", "max-bytes"} {
		if set[f] {
			return usageError(fs, e, "-%s applies to request states, and this token is a cursor", f)
		}
	}
	c := cursorCheck{ttl: *ttl, toolSet: set["tool"], tool: toolID, callerSet: set["caller"], caller: *caller}
	if set["args"] {
		fp, err := ctoken.ArgsFingerprint(json.RawMessage(*argsJSON))
		if err != nil {
			return usageError(fs, e, "-args is not valid JSON")
		}
		c.args = fp
	}
	if set["session"] {
		if c.session, err = decodeSession(*session); err != nil {
			return usageError(fs, e, "%v", err)
		}
	}
	return verifyCursor(tok, kr, *keysEnv, c, e)
}

func parseMode(s string, kind tokenKind) (ctoken.RequestStateMode, error) {
	switch s {
	case "auto":
		if kind == kindEncryptedState {
			return ctoken.Encrypted, nil
		}
		return ctoken.Signed, nil
	case "signed":
		return ctoken.Signed, nil
	case "encrypted":
		return ctoken.Encrypted, nil
	}
	return 0, fmt.Errorf("-mode must be auto, signed or encrypted")
}

func parseBinding(s string) (ctoken.RequestStateBinding, error) {
	switch s {
	case "subject":
		return ctoken.BindSubject, nil
	case "subject-and-tool":
		return ctoken.BindSubjectAndTool, nil
	case "none":
		return ctoken.BindNone, nil
	}
	return 0, fmt.Errorf("-binding must be subject, subject-and-tool or none")
}

// decodeSession reads -session as the server reads CTOKEN_SESSION: its
// bytes, as given.
func decodeSession(s string) ([]byte, error) {
	switch {
	case s == "":
		return nil, fmt.Errorf("-session is empty (give the server's CTOKEN_SESSION)")
	case len(s) > ctoken.MaxSessionBytes:
		return nil, fmt.Errorf("-session is longer than %d bytes", ctoken.MaxSessionBytes)
	}
	return []byte(s), nil
}

// rejected reports a verification failure: the error's class and the
// library's log-safe reason. Neither contains the token or a key.
func rejected(e *env, err error) int {
	fmt.Fprintf(e.stderr, "ctoken verify: REJECTED: %v\n", err)
	if r := ctoken.Reason(err).String(); r != "" {
		fmt.Fprintf(e.stderr, "reason: %s\n", r)
	}
	return exitRejected
}

// rejectedKey is rejected, followed by which key of the ring in keysEnv the
// token names (see explainKey).
func rejectedKey(e *env, err error, tok string, kr *ctoken.Keyring, keysEnv string) int {
	status := rejected(e, err)
	explainKey(e, tok, kr, keysEnv)
	return status
}

// cursorCheck is what a cursor is verified against.
type cursorCheck struct {
	ttl                time.Duration
	toolSet, callerSet bool
	tool, caller       string
	args               ctoken.Fingerprint
	session            []byte // nil: the token's own
}

// cursorResult is what verify prints for an authentic cursor.
type cursorResult struct {
	Kind            string   `json:"kind"`
	Verified        bool     `json:"verified"`
	Tool            string   `json:"tool"`
	ToolMethod      string   `json:"toolMethod,omitempty"`
	ToolName        string   `json:"toolName,omitempty"`
	Caller          string   `json:"caller"`
	ArgsFingerprint string   `json:"argsFingerprint"`
	Page            uint32   `json:"page"`
	IssuedAt        string   `json:"issuedAt"`
	Session         string   `json:"session"`
	SessionBase64   string   `json:"sessionBase64"`
	State           string   `json:"state,omitempty"`
	StateBytes      int      `json:"stateBytes"`
	Unchecked       []string `json:"unchecked,omitempty"`
	keyReport
}

func verifyCursor(tok string, kr *ctoken.Keyring, keysEnv string, c cursorCheck, e *env) int {
	want := ctoken.CursorScope{ToolID: c.tool, CallerID: c.caller, Args: c.args}
	var unchecked []string
	session := c.session
	if !c.toolSet || !c.callerSet || session == nil {
		// A cursor carries nothing of the tool, caller and arguments and
		// only a tag of the session: none of them can be read back to fill
		// a flag.
		fmt.Fprintln(e.stderr, "ctoken verify: a cursor does not carry its tool, caller or session: give -tool, -caller and -session (and -args if it was bound)")
		return exitUsage
	}
	if want.ToolID == "" {
		// No cursor is bound to an empty tool (Issue refuses it).
		fmt.Fprintln(e.stderr, "ctoken verify: -tool is empty: every cursor is bound to a tool, operation or route; give -tool, -caller and -session")
		return exitUsage
	}
	if c.args.IsZero() {
		unchecked = append(unchecked, "args")
	}
	if len(session) == 0 {
		// A token with no session cannot verify; an explicit empty one is
		// refused by decodeSession. Use a fixed placeholder so the issuer
		// does not mint a random one and Verify reports the real failure.
		session = []byte{0}
	}
	seen := &keySeen{}
	iss, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, TTL: c.ttl, Session: session, Observer: seen})
	if err != nil {
		// Only a session over the library's cap gets here.
		return rejectedKey(e, fmt.Errorf("%w: %v", ctoken.ErrCursorInvalid, err), tok, kr, keysEnv)
	}
	p, err := iss.Verify(tok, want)
	if err != nil {
		return rejectedKey(e, err, tok, kr, keysEnv)
	}
	res := cursorResult{
		Kind:          "cursor",
		Verified:      true,
		Tool:          p.ToolID,
		Caller:        p.CallerID,
		Page:          p.Page,
		IssuedAt:      p.IssuedAt.UTC().Format(time.RFC3339),
		Session:       sessionText(session),
		SessionBase64: b64.EncodeToString(session),
		State:         b64.EncodeToString(p.State),
		StateBytes:    len(p.State),
		Unchecked:     unchecked,
		keyReport:     seen.verified(tok, kr),
	}
	if method, name, ok := strings.Cut(p.ToolID, "\x00"); ok {
		res.ToolMethod, res.ToolName = method, name
	}
	if p.Args.IsZero() {
		res.ArgsFingerprint = "unbound"
	} else {
		res.ArgsFingerprint = hex.EncodeToString(p.Args[:])
	}
	if err := writeJSON(e.stdout, res); err != nil {
		fmt.Fprintf(e.stderr, "ctoken verify: %v\n", err)
		return exitUsage
	}
	if len(unchecked) > 0 {
		fmt.Fprintf(e.stderr, "note: authentic, but not checked against an expected %s (no flag given)\n", strings.Join(unchecked, ", "))
	}
	return exitOK
}

// stateResult is what verify prints for an authentic request state.
type stateResult struct {
	Kind      string `json:"kind"`
	Mode      string `json:"mode"`
	Verified  bool   `json:"verified"`
	Subject   string `json:"subject"`
	Tool      string `json:"tool"`
	Binding   string `json:"binding"`
	Audience  string `json:"audience,omitempty"`
	State     string `json:"state"`
	ExpiresAt string `json:"expiresAt,omitempty"`
	keyReport
}

func verifyState(tok string, sec ctoken.RequestStateSecurity, subject, tool, binding, keysEnv string, e *env) int {
	seen := &keySeen{}
	sec.Observer = seen
	codec, err := ctoken.NewRequestStateCodec(sec)
	if err != nil {
		fmt.Fprintf(e.stderr, "ctoken verify: %v\n", err)
		return exitUsage
	}
	state, err := codec.Decode(tok, subject, tool)
	if err != nil {
		if sdk := foreignState(tok); sdk != "" {
			fmt.Fprintf(e.stderr, "ctoken verify: not a ctoken request state: looks like a %s state (a v1. format of its own, which ctoken does not read; see docs/wire-format.md)\n", sdk)
		}
		return rejectedKey(e, err, tok, sec.Keys, keysEnv)
	}
	res := stateResult{
		Kind:      "request-state",
		Mode:      "signed",
		Verified:  true,
		Subject:   subject,
		Tool:      tool,
		Binding:   binding,
		Audience:  sec.Audience,
		State:     state,
		keyReport: seen.verified(tok, sec.Keys),
	}
	if sec.Mode == ctoken.Encrypted {
		res.Mode = "encrypted"
	} else if p, _, _, err := parseSigned(tok); err == nil {
		// Decode has authenticated this payload, so its expiry is real.
		res.ExpiresAt = time.Unix(*p.Exp, 0).UTC().Format(time.RFC3339)
	}
	if err := writeJSON(e.stdout, res); err != nil {
		fmt.Fprintf(e.stderr, "ctoken verify: %v\n", err)
		return exitUsage
	}
	return exitOK
}
