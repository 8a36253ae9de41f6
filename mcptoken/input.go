package mcptoken

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
)

// InputRequestsVersion is the first MCP protocol version in which a result
// asks the client for input (an input-required result with a requestState);
// a client on an earlier version can only be asked in process, over a
// connection that carries server-to-client requests.
const InputRequestsVersion = "2026-07-28"

// SpeaksInputRequests reports whether a client on the protocol version
// answers input-required results itself: version is InputRequestsVersion or
// later. An unknown version ("") does not.
func SpeaksInputRequests(version string) bool { return version >= InputRequestsVersion }

// The client capabilities a server's input requests need, by name.
const (
	CapElicitation = "elicitation" // elicitation/create
	CapRoots       = "roots"       // roots/list
	CapSampling    = "sampling"    // sampling/createMessage
)

// Declared is what a server saw of a client's capability declaration.
type Declared struct {
	Elicitation, Roots, Sampling bool
}

// has reports whether d declares the capability name.
func (d *Declared) has(name string) bool {
	switch name {
	case CapElicitation:
		return d.Elicitation
	case CapRoots:
		return d.Roots
	case CapSampling:
		return d.Sampling
	}
	return false
}

// ErrClientCannotAnswer reports a request that needs input (elicitation,
// sampling or roots) which its client did not declare it can provide. Every
// [*InputRefusal] matches it with errors.Is, and its message begins with
// this error's text.
var ErrClientCannotAnswer = errors.New("input required: the client cannot answer this server's input requests")

// InputRefusal is the refusal of a request that needs input its client
// cannot give. Both integrations send its message; package ctokenmcp sends
// it as JSON-RPC error -32021 with [InputRefusal.Data].
type InputRefusal struct {
	// Version is the client's protocol version, "" when unknown.
	Version string
	// Seen reports whether the server saw the client's capability
	// declaration. Over stateless HTTP a client before
	// InputRequestsVersion declares its capabilities to no server that
	// handles the request: the server cannot see a declaration.
	Seen bool
	// Required lists the capabilities the request needs and the client did
	// not declare (or that the server could not see), sorted, each once.
	Required []string
}

// CannotAnswer returns the refusal of a request that needs the capabilities
// needs (CapElicitation, CapRoots, CapSampling; repeats allowed) from a
// client on protocol version that declared declared, or nil when the client
// declared all of them. A nil declared is a declaration the server did not
// see, which declares nothing.
func CannotAnswer(version string, declared *Declared, needs ...string) *InputRefusal {
	var missing []string
	for _, n := range needs {
		if (declared == nil || !declared.has(n)) && !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	return &InputRefusal{Version: version, Seen: declared != nil, Required: missing}
}

// Error says what the request needs, what the server saw of the client, and
// what would work. It begins with the text of [ErrClientCannotAnswer].
func (r *InputRefusal) Error() string {
	version := r.Version
	if version == "" {
		version = "of an unknown version"
	}
	caps := strings.Join(r.Required, " and ")
	noun := "capability"
	if len(r.Required) > 1 {
		noun = "capabilities"
	}
	var b strings.Builder
	b.WriteString(ErrClientCannotAnswer.Error())
	b.WriteString(": this request needs the " + caps + " " + noun)
	if r.Seen {
		b.WriteString(", and the client (MCP " + version + ") declared no " + strings.Join(r.Required, " or ") + " capability")
		b.WriteString("; use a client that speaks MCP " + InputRequestsVersion + ", or one that declares " + caps)
	} else {
		b.WriteString(", and the server saw no capability declaration from the client (MCP " + version + "): over stateless HTTP the server cannot see a declaration")
		b.WriteString("; use a client that speaks MCP " + InputRequestsVersion + ", or one that declares " + caps + " on a stateful connection")
	}
	return b.String()
}

// Unwrap returns [ErrClientCannotAnswer].
func (r *InputRefusal) Unwrap() error { return ErrClientCannotAnswer }

// Data returns the data member of the JSON-RPC error -32021 (missing
// required client capabilities) for r: {"requiredCapabilities":{...}} with
// one empty object per required capability and nothing else.
func (r *InputRefusal) Data() json.RawMessage {
	caps := make(map[string]struct{}, len(r.Required))
	for _, c := range r.Required {
		caps[c] = struct{}{}
	}
	b, _ := json.Marshal(map[string]any{"requiredCapabilities": caps}) // cannot fail
	return b
}
