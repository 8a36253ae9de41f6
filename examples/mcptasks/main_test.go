package main

import (
	"log"
	"os"
	"strings"
	"testing"
)

// TestMain makes the test binary an instance when run starts it as one.
func TestMain(m *testing.M) {
	if db := os.Getenv(serveEnv); db != "" {
		log.Fatal(serve(db))
	}
	os.Exit(m.Run())
}

func TestKilledInstanceWalkThrough(t *testing.T) {
	t.Setenv("CTOKEN_KEYS", "")
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"task created on A",
		"A killed mid-task; the proxy now forwards to B",
		"the server running the task stopped",
		"second task: report built in 0.5s by instance",
		"a new client resumes it from the kept ID: report built in 0.5s",
		"bob presenting alice's task ID: refused",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q\n%s", want, out.String())
		}
	}
}
