package stateclaim

import (
	"context"
	"errors"
	"testing"
)

// Without the root package linked (this test binary does not import it),
// nothing is registered: Open refuses with ErrNotLinked and opens nothing,
// and Store reports no store.
func TestWithoutTheRootPackageNothingOpens(t *testing.T) {
	for _, codec := range []any{nil, "codec", struct{}{}} {
		o, err := Open(context.Background(), codec, "v1.x", "alice", "deploy", nil)
		if !errors.Is(err, ErrNotLinked) || o != (Opened{}) {
			t.Fatalf("%T: %+v, %v; want ErrNotLinked", codec, o, err)
		}
		if Store(codec) != nil {
			t.Fatalf("%T: a store", codec)
		}
	}
}
