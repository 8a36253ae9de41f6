#!/usr/bin/env bash
# Cross-checks ctoken's webhook schemes with the senders' own npm packages,
# both ways (see webhook/senders_test.go, TestSendersCrossCheck, and
# .ci/senders/senders.mjs):
#
#   - deliveries signed by standardwebhooks, svix, stripe
#     (webhooks.generateTestHeaderString), @octokit/webhooks-methods and
#     node:crypto Ed25519 are verified by ctoken;
#   - deliveries signed by ctoken are verified by standardwebhooks, svix,
#     stripe (webhooks.constructEvent), @octokit/webhooks-methods,
#     @slack/bolt (verifySlackRequest) and node:crypto Ed25519,
#
# at pinned clocks on both sides of the tolerance edges, tampered copies
# refused by both sides. The packages are pinned below and installed into a
# temporary folder (removed on exit) with npm's configured registry; nothing
# else is fetched. Node and npm are installed with apt-get when missing.
#
#   bash .ci/webhook-senders.sh
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$PATH:/usr/local/go/bin"

echo "--- webhook sender cross-check"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "node/npm not found: installing with apt-get"
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs npm >/dev/null
fi
echo "node $(node --version), npm $(npm --version)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Exact versions, so a run is reproducible; bump deliberately.
cat >"$tmp/package.json" <<'JSON'
{
  "private": true,
  "type": "module",
  "dependencies": {
    "standardwebhooks": "1.1.1",
    "svix": "1.99.1",
    "stripe": "23.1.0",
    "@octokit/webhooks-methods": "6.0.0",
    "@slack/bolt": "5.1.0"
  }
}
JSON
cp .ci/senders/senders.mjs "$tmp/"
(cd "$tmp" && timeout 300 npm install --no-audit --no-fund --ignore-scripts --prefer-offline --loglevel=error >/dev/null)

out="$tmp/go-test.log"
if ! CTOKEN_SENDERS_SCRIPT="$tmp/senders.mjs" go test -count=1 -run '^TestSendersCrossCheck$' -v ./webhook/ >"$out" 2>&1; then
	cat "$out"
	echo "webhook-senders.sh: cross-check failed" >&2
	exit 1
fi
cat "$out"
# The test skips without CTOKEN_SENDERS_SCRIPT; make sure it really ran.
if ! grep -q -- '^--- PASS: TestSendersCrossCheck ' "$out"; then
	echo "webhook-senders.sh: TestSendersCrossCheck did not run" >&2
	exit 1
fi
