# .ci/portclass.sh — sourced by .ci/redis.sh and .ci/redis-cluster.sh.
#
# CTOKEN_PORT_CLASS=k/n (as in the Go tests' belowEphemeral) keeps a
# script to the ports whose remainder by n is k, so that suites run side
# by side (.ci/run, .ci/fleet.sh) never pick one another's. n divides
# 10000, so a Cluster node's bus port (its port + 10000) is of its class.
# Sets class and of (0 and 1 when unset); exits 2 on a malformed value.
class=0 of=1
if [ -n "${CTOKEN_PORT_CLASS:-}" ]; then
	class="${CTOKEN_PORT_CLASS%/*}" of="${CTOKEN_PORT_CLASS#*/}"
	if ! [[ "$class" =~ ^[0-9]+$ && "$of" =~ ^[0-9]+$ ]] || [ "$of" -lt 1 ] || [ $((10000 % of)) != 0 ] || [ "$class" -ge "$of" ]; then
		echo "$(basename "$0"): CTOKEN_PORT_CLASS=$CTOKEN_PORT_CLASS: want k/n, n dividing 10000 and 0 <= k < n" >&2
		exit 2
	fi
fi
