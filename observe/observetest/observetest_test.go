package observetest

import (
	"sync"
	"testing"

	"github.com/ctoken/ctoken/observe"
)

func TestRecorderTakesWhatWasObservedOnce(t *testing.T) {
	var r Recorder
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Observe(observe.Event{Kind: observe.KindCursor})
		}()
	}
	wg.Wait()
	if got := r.Take(); len(got) != 8 {
		t.Fatalf("Take = %d events, want 8", len(got))
	}
	if got := r.Take(); len(got) != 0 {
		t.Fatalf("second Take = %d events, want none", len(got))
	}
	want := observe.Event{Kind: observe.KindWebhook, Outcome: observe.OutcomeVerified}
	r.Observe(want)
	if got := r.Only(t, "one event"); got != want {
		t.Fatalf("Only = %+v, want %+v", got, want)
	}
}
