package porttest

import (
	"net"
	"strconv"
	"testing"
)

// A port is free, on loopback, and it and its Cluster bus port are below
// the ephemeral range.
func TestPortIsFreeAndBelowTheEphemeralRange(t *testing.T) {
	for range 20 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(p)
		if n < 10000 || n+busOffset >= ephemeralLow() {
			t.Fatalf("port %d: its bus %d is not below the ephemeral range at %d", n, n+busOffset, ephemeralLow())
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			t.Fatalf("port %s is not free: %v", p, err)
		}
		ln.Close()
	}
}
