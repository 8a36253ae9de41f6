package main

import (
	"strings"
	"testing"
)

func TestQuickstartWalkThrough(t *testing.T) {
	t.Setenv("CTOKEN_KEYS", "")
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"page 3: [#109 fleet session #110 panic on nil #111 i18n]",
		"refused: code 1021 (ctoken: invalid cursor: forged or wrong scope (tool, caller or arguments))",
		"refused: code 1020 (ctoken: expired cursor: other server session)",
		`decoded for alice: {"step":2,"env":"staging"}`,
		"done",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestQuickstartRefusesMalformedKeys(t *testing.T) {
	t.Setenv("CTOKEN_KEYS", "not-a-key!")
	var out strings.Builder
	if err := run(&out); err == nil {
		t.Fatal("malformed CTOKEN_KEYS accepted")
	}
}
