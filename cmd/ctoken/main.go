// Command ctoken generates keys for, inspects and verifies ctoken tokens:
// pagination cursors, MCP request states ("v1." signed, "v1e." encrypted)
// and one-time tokens ("ot1.").
//
//	ctoken keygen [-n N]           print N fresh keys as a CTOKEN_KEYS list
//	ctoken inspect TOKEN|-         decode a token WITHOUT checking it
//	ctoken verify [flags] TOKEN|-  check a token with the keys in $CTOKEN_KEYS
//
// Every command takes -h. A token argument of "-" reads the token from
// standard input, which keeps it out of shell history and process listings.
//
// Exit status: 0 on success, 1 when verify rejects a token (the reason is
// printed on standard error), 2 on a usage or input error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Exit statuses.
const (
	exitOK       = 0
	exitRejected = 1
	exitUsage    = 2
)

// env is the command's view of its environment: arguments aside, everything
// a command reads or writes goes through it, so tests run it in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

func main() {
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(run(os.Args[1:], e))
}

const topUsage = `ctoken: generate keys for, inspect and verify ctoken tokens

Usage:
  ctoken keygen [-n N]            print N fresh 32-byte keys as a CTOKEN_KEYS list
  ctoken inspect TOKEN|-          decode a cursor, request state or one-time token WITHOUT verifying it
  ctoken verify [flags] TOKEN|-   verify a token with the keys in $CTOKEN_KEYS

Run "ctoken COMMAND -h" for a command's flags. A token of "-" is read from
standard input.
`

// maxCommandEcho is the longest unknown command echoed in an error: far
// longer than any command, far shorter than any token.
const maxCommandEcho = 16

// run executes the command line args (without the program name) and returns
// the exit status.
func run(args []string, e *env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, topUsage)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "keygen":
		return cmdKeygen(rest, e)
	case "inspect":
		return cmdInspect(rest, e)
	case "verify":
		return cmdVerify(rest, e)
	case "-h", "-help", "--help", "help":
		if len(rest) > 0 && cmd == "help" {
			return run([]string{rest[0], "-h"}, e)
		}
		fmt.Fprint(e.stdout, topUsage)
		return exitOK
	default:
		// Name a mistyped command, but not a token pasted in its place.
		if len(cmd) > maxCommandEcho {
			fmt.Fprintf(e.stderr, "ctoken: unknown command (%d bytes; a token goes after inspect or verify)\n\n%s", len(cmd), topUsage)
			return exitUsage
		}
		fmt.Fprintf(e.stderr, "ctoken: unknown command %q\n\n%s", cmd, topUsage)
		return exitUsage
	}
}

// newFlagSet returns a flag set whose usage text starts with usage. Parse
// errors are reported by parseFlags.
func newFlagSet(name, usage string, e *env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprint(out, usage)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(out, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses args into fs. It returns done == true with the exit
// status when the command must stop: -h (usage on stdout, status 0) or a
// parse error (usage on stderr, status 2).
func parseFlags(fs *flag.FlagSet, args []string, e *env) (done bool, status int) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return false, exitOK
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(e.stdout)
		fs.Usage()
		return true, exitOK
	default:
		// The flag package has already printed the error and the usage.
		return true, exitUsage
	}
}

// usageError prints msg and a pointer to the command's help on stderr and
// returns the usage exit status.
func usageError(fs *flag.FlagSet, e *env, format string, a ...any) int {
	fmt.Fprintf(e.stderr, "ctoken %s: %s\nRun \"ctoken %s -h\" for usage.\n", fs.Name(), fmt.Sprintf(format, a...), fs.Name())
	return exitUsage
}
