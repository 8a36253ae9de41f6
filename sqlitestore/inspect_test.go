package sqlitestore

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRefusalNamesHiddenFilesAndTheCommandThatLiftsIt: a loss's refusal
// names the store's hidden files beside the database (not another
// table's, not the database's own), that claims may be lost, and the
// command line with the stores' Horizon, its path quoted for a shell when
// it must be; a refusal whose files prove nothing was lost says so and
// fences for 0; other errors, and a refusal already named, pass
// unchanged.
func TestRefusalNamesHiddenFilesAndTheCommandThatLiftsIt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "it's here")
	must(t, os.Mkdir(dir, 0o755))
	path := filepath.Join(dir, "app.db")
	for _, f := range []string{".app.db-ctoken", ".app.db-ctoken.wal-1", ".app.db-ctoken.orders", "app.db", "app.db-wal"} {
		must(t, os.WriteFile(filepath.Join(dir, f), nil, 0o644))
	}
	p := place{path, `main."ctoken_replay"`, 90 * time.Minute}
	loss := fmt.Errorf("%w: gone", ErrForgotten)
	err := p.lift(loss)
	want := "found beside it: " + filepath.Join(dir, ".app.db-ctoken") + ", " + filepath.Join(dir, ".app.db-ctoken.wal-1") +
		"; acknowledged claims may be lost, so the fence is the stores' Horizon, 1h30m0s: nothing is accepted until every claim the lost rows could hold has expired" +
		"; once you have decided, stop every program on the file and run: ctoken-sqlite rearm -db '" +
		strings.ReplaceAll(path, "'", `'\''`) + "' -table ctoken_replay -fence 1h30m0s"
	if !errors.Is(err, ErrForgotten) || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("lift = %v; want it to end with %q", err, want)
	}
	if again := p.lift(err); again.Error() != err.Error() {
		t.Fatalf("a second lift = %v; want it unchanged", again)
	}
	if kept := p.lift(nothingLost{loss}); !errors.Is(kept, ErrForgotten) || !strings.Contains(kept.Error(), "; nothing was lost, so the fence is 0;") || !strings.HasSuffix(kept.Error(), "-table ctoken_replay -fence 0s") {
		t.Fatalf("lift of a refusal that lost nothing = %v; want it to say so and fence for 0", kept)
	}
	orders := place{path, `main."orders"`, time.Hour}.lift(loss)
	if !strings.Contains(orders.Error(), "found beside it: "+filepath.Join(dir, ".app.db-ctoken.orders")+";") || !strings.HasSuffix(orders.Error(), "-table orders -fence 1h0m0s") {
		t.Fatalf("another table's lift = %v; want its own sidecar and table", orders)
	}
	none := place{filepath.Join(dir, "new.db"), `main."ctoken_replay"`, time.Hour}.lift(loss)
	if !strings.Contains(none.Error(), "no hidden file of the store's beside it ("+filepath.Join(dir, ".new.db-ctoken")+"*)") {
		t.Fatalf("lift with no hidden file = %v; want it to say so", none)
	}
	for _, other := range []error{nil, ErrUnavailable, ErrConfig, fmt.Errorf("%w: busy", ErrUnavailable)} {
		if got := p.lift(other); got != other {
			t.Errorf("lift(%v) = %v; want it unchanged", other, got)
		}
	}
	if got := (place{}).lift(loss); got != loss {
		t.Errorf("lift without a path = %v; want it unchanged", got)
	}
}

func TestShellQuoteQuotesWhatAShellWouldSplit(t *testing.T) {
	for in, want := range map[string]string{
		"/var/lib/api/replay.db": "/var/lib/api/replay.db",
		"/data/my db":            "'/data/my db'",
		"/data/it's":             `'/data/it'\''s'`,
		"/data/$HOME":            "'/data/$HOME'",
		"":                       "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s; want %s", in, got, want)
		}
	}
}

func TestInspectRefusesNoDatabaseAndABadTable(t *testing.T) {
	if _, err := Inspect(t.Context(), nil, Options{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("Inspect(nil) = %v; want ErrConfig", err)
	}
	if _, err := Inspect(t.Context(), new(sql.DB), Options{Table: "Bad-Name"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("Inspect of table Bad-Name = %v; want ErrConfig", err)
	}
}
