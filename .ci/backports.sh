#!/usr/bin/env bash
# Sourced by .ci/redis.sh and .ci/fleet.sh: adds bookworm-backports to apt's
# sources when it is missing, on the same mirror the machine's own sources
# name (deb822 debian.sources or a one-line sources.list), so no mirror's
# host name is written here. Needs $sudo set by the caller ("" or "sudo").
ensure_backports() {
	if grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
		return 0
	fi
	local uri
	# deb822: the first "URIs:" line whose archive is debian (not -security).
	uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
	if [ -z "$uri" ]; then
		# one-line format: "deb [opts] URI suite components".
		uri=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
			sed -E 's/^deb (\[[^]]*\] )?//' | awk '$2 == "bookworm" {print $1}' | head -n1 || true)
	fi
	if [ -z "$uri" ]; then
		echo "backports.sh: no Debian bookworm source in /etc/apt to derive bookworm-backports from" >&2
		return 1
	fi
	echo "deb $uri bookworm-backports main" | $sudo tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
}
