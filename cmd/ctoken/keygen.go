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
ctoken.ParseKeyring. The first key is the primary (it signs); the others
only verify.

  export CTOKEN_KEYS="$(ctoken keygen)"

Rotating a key across a fleet takes two passes, so that no instance ever
signs with a key another instance does not yet accept:

  1. Add the new key as a previous key everywhere: CTOKEN_KEYS=old,new.
     Every instance still signs with old and now also accepts new.
  2. When pass 1 is on every instance, promote it: CTOKEN_KEYS=new,old.
     New tokens are signed with new; outstanding old tokens still verify.

Later, once the longest lifetime of anything signed with old has passed
(cursor TTL, request-state TTL, one-time token TTL), drop it:
CTOKEN_KEYS=new. Deploying new,old straight over old splits a fleet during
a rolling deploy: a token signed by an updated instance is a forgery to one
not yet updated.

  NEW="$(ctoken keygen)"
  CTOKEN_KEYS="$OLD,$NEW"   # pass 1, everywhere
  CTOKEN_KEYS="$NEW,$OLD"   # pass 2, everywhere
  CTOKEN_KEYS="$NEW"        # after the longest token lifetime
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
