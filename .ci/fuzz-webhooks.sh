#!/usr/bin/env bash
# Short fuzzing pass over the webhook, one-time token and signature-header
# decoders. FUZZTIME (default 5s) per target. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-5s}"
for target in FuzzParseStandardSignatures FuzzParseSHA256Signature \
	FuzzStandardWebhookVerify FuzzSHA256WebhookVerify \
	FuzzOneTimeRedeem FuzzDecodeOneTimePayload; do
	echo "--- fuzz $target ($fuzztime)"
	go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" .
done
