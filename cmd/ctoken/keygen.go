package main

import (
	"fmt"
	"strings"

	"github.com/ctoken/ctoken"
)

// maxKeygen caps -n: a keyring is a primary key plus a few previous keys.
const maxKeygen = 16

const keygenUsage = `Usage: ctoken keygen [-n N]

Prints N fresh random 32-byte keys (crypto/rand), base64url without padding,
as one comma-separated line: the format of CTOKEN_KEYS and
ctoken.ParseKeyring. The first key is the primary; to rotate, put a new key in
front of the current list and drop the oldest once its tokens have expired.

  export CTOKEN_KEYS="$(ctoken keygen)"
`

func cmdKeygen(args []string, e *env) int {
	fs := newFlagSet("keygen", keygenUsage, e)
	n := fs.Int("n", 1, fmt.Sprintf("number of keys to generate (1..%d)", maxKeygen))
	if done, status := parseFlags(fs, args, e); done {
		return status
	}
	if fs.NArg() > 0 {
		return usageError(fs, e, "unexpected argument %q", fs.Arg(0))
	}
	if *n < 1 || *n > maxKeygen {
		return usageError(fs, e, "-n must be between 1 and %d", maxKeygen)
	}
	keys := make([]string, *n)
	for i := range keys {
		keys[i] = ctoken.EncodeKey(ctoken.RandomKey())
	}
	fmt.Fprintln(e.stdout, strings.Join(keys, ","))
	return exitOK
}
