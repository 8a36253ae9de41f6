package sqlitestore

// EventKind names what an [Event] reports.
type EventKind uint8

const (
	// EventRiskAccepted: New found a risk that an option of [Options]
	// accepts (synchronous=NORMAL under AllowNormalSync). [Event.Option]
	// names the option and [Event.Risk] the risk; reported with one Warn
	// line.
	EventRiskAccepted EventKind = iota + 1
	// EventRefusing: a check found the store's database lost, replaced or
	// unfit (or a call found it so), and every call refuses until it holds
	// again, or, for a loss ([ErrForgotten]), until [Rearm] and a new
	// Store. [Event.Reason] says why. Reported (with one Warn line) when
	// the reason appears or changes, not at every check.
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
	// risk ("AllowNormalSync"); "" otherwise.
	Option string
	// Risk is, for EventRiskAccepted, a fixed description of the risk; ""
	// otherwise.
	Risk string
	// Reason is, for EventRefusing, why calls are refused (the error calls
	// return, which also matches ErrUnavailable); nil otherwise.
	Reason error
}

// riskNormalSync is what AllowNormalSync accepts.
const riskNormalSync = "synchronous=NORMAL: a power cut or a crash of the machine forgets the last acknowledged claims, which may then be accepted again"

// observe reports e to the Observer, if any.
func (s *Store) observe(e Event) {
	if s.observer != nil {
		s.observer(e)
	}
}
