package pgstore

// What the tests of several instances on one table share. (Exactly once
// across instances: TestStore; calls failing closed while the database
// is down: TestFaults; acknowledged claims through a server killed
// mid-load: TestLoad.)

import (
	"testing"
	"time"
)

const whSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// fleetStores returns three Stores on p's default table sharing one prefix,
// each with a pool of its own.
func fleetStores(t *testing.T, p *pgServer, timeout time.Duration) []*Store {
	t.Helper()
	prefix := uniquePrefix()
	var ss []*Store
	for range 3 {
		ss = append(ss, storeOn(t, p.pool(t), func(o *Options) { o.Prefix = prefix; o.Timeout = timeout }))
	}
	return ss
}
