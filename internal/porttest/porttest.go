// Package porttest picks loopback ports for the servers the tests start,
// and restart on the same port (Redis and its Cluster nodes, PostgreSQL).
package porttest

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// busOffset is how far above its port a Redis Cluster node's bus listens.
const busOffset = 10000

// Port returns a loopback TCP port nothing listened on a moment ago,
// chosen below the kernel's ephemeral range by more than busOffset, so
// that the port and a Cluster bus at port+10000 both lie outside it: a
// server restarted on its port cannot find it taken by the ephemeral port
// of an outgoing connection (the tests' clients open hundreds). Another
// process may still take the port before the server binds it; the caller
// retries a start that fails.
func Port() (string, error) {
	top := ephemeralLow() - busOffset
	const bottom = 10000
	if top-bottom < 1000 {
		return "", errors.New("porttest: the ephemeral port range leaves no room below it")
	}
	for range 100 {
		p := strconv.Itoa(bottom + rand.IntN(top-bottom))
		ln, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			continue
		}
		ln.Close()
		return p, nil
	}
	return "", errors.New("porttest: no free port found in 100 tries")
}

// ephemeralLow is the first port of Linux's ephemeral range, or its
// default where the range cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
