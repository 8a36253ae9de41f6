package pgstore

import (
	"log/slog"
	"strings"

	"github.com/ctoken/ctoken/replay"
)

// risk is one weakness of the server that an Allow* option accepts.
type risk struct{ option, what string }

var (
	riskAsyncCommit = risk{"AllowAsyncCommit", "synchronous_commit is off: a crash of the server forgets the last acknowledged claims, which may then be accepted again"}
	riskFsync       = risk{"AllowRollback", "fsync is off: a crash of the machine can lose acknowledged claims and keep the marker row, so they may be accepted again"}
	riskFullPages   = risk{"AllowRollback", "full_page_writes is off: a crash of the machine can tear pages that recovery cannot repair, losing acknowledged claims"}
	riskStandby     = risk{"AllowAsyncStandby", "the server has (or had) a physical standby that commits do not wait for: a failover to it can accept acknowledged claims again"}
)

// emit reports e, of the store and its table, to the observer and the log.
// It is called by New and by the checker goroutine, once per change (see
// [replay.EventKind]), and by the sweeper.
func (s *Store) emit(e replay.Event) {
	e.Store, e.Table, e.Shard = "pgstore", strings.ReplaceAll(s.table, `"`, ""), -1
	if s.observer != nil {
		s.observer(e)
	}
	attrs := []any{slog.String("event", e.Kind.String()), slog.String("table", e.Table), slog.String("prefix", s.prefix)}
	switch e.Kind {
	case replay.EventRiskAccepted:
		attrs = append(attrs, slog.String("option", e.Option), slog.String("risk", e.Risk))
		s.log.Warn("pgstore: running on a server with a risk to single use, accepted by Options."+e.Option, attrs...)
	case replay.EventRefusing:
		attrs = append(attrs, slog.String("reason", e.Reason.Error()))
		s.log.Warn("pgstore: a recheck of the server failed; refusing claims and lease steps until it holds again", attrs...)
	case replay.EventServing:
		s.log.Info("pgstore: the recheck of the server holds again; serving", attrs...)
	}
}
