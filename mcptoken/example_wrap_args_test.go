package mcptoken_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
)

// A request state bound to the caller, the tool and the call's arguments,
// as an MCP integration seals it; the retried call with other arguments is
// refused with code 1023, and the reason goes to the server log only.
func ExampleWrapArgs() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	if err != nil {
		log.Fatal(err)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keys, Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool})
	if err != nil {
		log.Fatal(err)
	}
	target := ctoken.MCPTarget("tools/call", "deploy")
	args := json.RawMessage(`{"service":"api","version":"v3"}`)

	// First round: seal the state with the input-required result.
	plain, err := mcptoken.WrapArgs(args, "awaiting confirmation")
	if err != nil {
		log.Fatal(err)
	}
	wire, err := codec.Encode(plain, "alice", target)
	if err != nil {
		log.Fatal(err)
	}

	// Second round: open the state the client echoed with its retried call.
	open := func(args json.RawMessage) {
		plain, err := codec.DecodeContext(context.Background(), wire, "alice", target)
		if err == nil {
			var state string
			if state, err = mcptoken.UnwrapArgs(args, plain); err == nil {
				fmt.Printf("state %q\n", state)
				return
			}
		}
		r := mcptoken.RefuseState(err)
		fmt.Printf("client: %q (ctokenCode %d); log: %s\n", r.Message, r.Code, r.Reason)
	}
	open(json.RawMessage(`{"version":"v3","service":"api"}`))
	open(json.RawMessage(`{"service":"api","version":"v4"}`))
	// Output:
	// state "awaiting confirmation"
	// client: "invalid requestState" (ctokenCode 1023); log: arguments differ from the sealed call
}
