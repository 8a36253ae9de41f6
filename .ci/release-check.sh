#!/usr/bin/env bash
# Release check: proves the modules install outside this repository at the
# versions their go.mod files name. Called from .ci/run; see RELEASING.md.
#
#   .ci/release-check.sh              # the check, then its three negative controls
#   .ci/release-check.sh -keep        # the check only; keep and print its temp dir
#
# The Go program in .ci/releasecheck packs every module at HEAD (git archive:
# committed files only) with golang.org/x/mod/zip into a throwaway file proxy,
# and builds, vets, runs and tests a consumer module outside the repository
# with GOWORK=off against it. The negative controls plant a go.mod that only
# works in-repo (a replace; a pseudo-version requirement) or leave a module
# out of the proxy, and pass only when the check fails on them.
set -euo pipefail
cd "$(dirname "$0")/releasecheck"

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/releasecheck" .

if [ $# -gt 0 ]; then
	"$bin/releasecheck" "$@"
	exit
fi
"$bin/releasecheck"
for b in replace pseudo unpacked; do
	"$bin/releasecheck" -break="$b"
done
