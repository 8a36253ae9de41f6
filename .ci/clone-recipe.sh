#!/usr/bin/env bash
# .ci/clone-recipe.sh — runs docs/operations.md's "Using the modules from a
# clone" recipe as a newcomer does (issue 109): in a new module beside a
# clone, before any code, with a `go mod tidy` then; then code importing
# two modules and `go mod tidy` again. The go.mod must then require the
# modules at v0.1.0, so that it differs from a released one only by the
# replace lines (no pseudo-version). (The release check builds consumers.)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
ln -s "$root" "$tmp/ctoken"
mkdir "$tmp/app"
cd "$tmp/app"
export GOWORK=off GOFLAGS=-mod=mod
go mod init example.com/app >/dev/null 2>&1
# The recipe: the first sh block after the section's heading.
awk '/^## Using the modules from a clone/ { on = 1; next }
	on && /^```sh$/ { block = 1; next }
	block && /^```$/ { exit }
	block { print }' "$root/docs/operations.md" >recipe.sh
if [ ! -s recipe.sh ]; then
	echo "clone-recipe: no sh block under docs/operations.md's \"Using the modules from a clone\"" >&2
	exit 1
fi
bash recipe.sh
go mod tidy 2>/dev/null # before any code: must change nothing that matters
cat >main.go <<'GO'
package main

import (
	_ "github.com/ctoken/ctoken"
	_ "github.com/ctoken/ctoken/redisstore"
)

func main() {}
GO
go mod tidy
want='github.com/ctoken/ctoken v0.1.0
github.com/ctoken/ctoken/redisstore v0.1.0'
got=$(go list -m -f '{{if not .Main}}{{.Path}} {{.Version}}{{end}}' all | grep '^github.com/ctoken/' | sort)
if [ "$got" != "$want" ]; then
	echo "clone-recipe: after the recipe and go mod tidy, go.mod requires:" >&2
	echo "$got" >&2
	echo "want:" >&2
	echo "$want" >&2
	cat go.mod >&2
	exit 1
fi
echo "clone-recipe: go.mod requires v0.1.0 of the imported modules"
