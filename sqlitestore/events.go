package sqlitestore

// EventKind names what an [Event] reports.
type EventKind uint8

const (
	// EventRiskAccepted: New accepted the risk an option names (Warn).
	EventRiskAccepted EventKind = iota + 1
	// EventRefusing: every call refuses, for [Event.Reason], until the
	// checks hold again or, after a loss, [Rearm] (Warn, when it changes).
	EventRefusing
	// EventServing: calls are served again (Info).
	EventServing

	numEventKinds // not a kind: the size of the set
)

var eventNames = [numEventKinds]string{"", "risk_accepted", "refusing", "serving"}

// String returns the kind's stable label ("" outside the set).
func (k EventKind) String() string {
	if k < numEventKinds {
		return eventNames[k]
	}
	return ""
}

// Event is one occurrence reported to [Options.Observer]. It holds no ID,
// token or key.
type Event struct {
	Kind   EventKind // what happened
	Option string    // EventRiskAccepted: the Options field that accepts Risk
	Risk   string    // EventRiskAccepted: the risk
	Reason error     // EventRefusing: the error calls return
}

const riskNormalSync = "synchronous=NORMAL: a power cut or a crash of the machine forgets the last acknowledged claims, which may then be accepted again"

func (s *Store) observe(e Event) {
	if s.observer != nil {
		s.observer(e)
	}
}
