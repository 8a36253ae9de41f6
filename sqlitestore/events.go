package sqlitestore

import "github.com/ctoken/ctoken/replay"

const riskNormalSync = "synchronous=NORMAL: a power cut or a crash of the machine forgets the last acknowledged claims, which may then be accepted again"

// observe reports e, of this store and its table, to the observer.
func (s *Store) observe(e replay.Event) {
	if s.observer != nil {
		e.Store, e.Table, e.Shard = "sqlitestore", unquote(s.table), -1
		s.observer(e)
	}
}
