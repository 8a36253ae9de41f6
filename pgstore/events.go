package pgstore

import (
	"log/slog"
	"strings"
)

// EventKind names what an [Event] reports.
type EventKind uint8

const (
	// EventRiskAccepted: a check of the server found a risk that an Allow*
	// option of [Options] accepts (synchronous_commit off under
	// AllowAsyncCommit, fsync or full_page_writes off under AllowRollback,
	// a standby that commits do not wait for under AllowAsyncStandby).
	// [Event.Option] names the option and [Event.Risk] the risk. [New]
	// reports every such risk present, and a recheck each one that
	// appears (once per appearance), each together with one Warn line: a
	// dashboard counting them finds every weakened deployment.
	EventRiskAccepted EventKind = iota + 1
	// EventRefusing: a recheck found a check of New failing; Claim,
	// AcquireLease and ConfirmLease refuse until it holds again.
	// [Event.Reason] says why. Reported (with one Warn line) when the
	// reason appears or changes, not at every recheck, nor when only its
	// figures change (how far a clock is behind, how many standbys).
	EventRefusing
	// EventServing: the checks hold again after EventRefusing; calls are
	// served again. Reported with one Info line.
	EventServing

	numEventKinds // not a kind: the size of the set
)

var eventNames = [numEventKinds]string{"", "risk_accepted", "refusing", "serving"}

// String returns the kind's stable label: "risk_accepted", "refusing" or
// "serving" ("" outside the set).
func (k EventKind) String() string {
	if k < numEventKinds {
		return eventNames[k]
	}
	return ""
}

// Event is one occurrence reported to [Options.Observer]. It holds no ID,
// token or key.
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Option is, for EventRiskAccepted, the Options field that accepts the
	// risk ("AllowAsyncCommit", "AllowRollback", "AllowAsyncStandby"); ""
	// otherwise.
	Option string
	// Risk is, for EventRiskAccepted, a fixed description of the risk; ""
	// otherwise.
	Risk string
	// Reason is, for EventRefusing, why calls are refused (the error
	// calls return, which also matches ErrUnavailable); nil otherwise.
	Reason error
}

// risk is one weakness of the server that an Allow* option accepts.
type risk struct{ option, what string }

var (
	riskAsyncCommit = risk{"AllowAsyncCommit", "synchronous_commit is off: a crash of the server forgets the last acknowledged claims, which may then be accepted again"}
	riskFsync       = risk{"AllowRollback", "fsync is off: a crash of the machine can lose acknowledged claims and keep the marker row, so they may be accepted again"}
	riskFullPages   = risk{"AllowRollback", "full_page_writes is off: a crash of the machine can tear pages that recovery cannot repair, losing acknowledged claims"}
	riskStandby     = risk{"AllowAsyncStandby", "the server has (or had) a physical standby that commits do not wait for: a failover to it can accept acknowledged claims again"}
)

// emit reports e to the observer and the log. It is called by New and by
// the checker goroutine, once per change (see [EventKind]).
func (s *Store) emit(e Event) {
	if s.observer != nil {
		s.observer(e)
	}
	attrs := []any{slog.String("event", e.Kind.String()), slog.String("table", strings.ReplaceAll(s.table, `"`, "")), slog.String("prefix", s.prefix)}
	switch e.Kind {
	case EventRiskAccepted:
		attrs = append(attrs, slog.String("option", e.Option), slog.String("risk", e.Risk))
		s.log.Warn("pgstore: running on a server with a risk to single use, accepted by Options."+e.Option, attrs...)
	case EventRefusing:
		attrs = append(attrs, slog.String("reason", e.Reason.Error()))
		s.log.Warn("pgstore: a recheck of the server failed; refusing claims and lease steps until it holds again", attrs...)
	case EventServing:
		s.log.Info("pgstore: the recheck of the server holds again; serving", attrs...)
	}
}
