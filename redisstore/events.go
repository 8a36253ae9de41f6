package redisstore

import (
	"log/slog"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// observe reports e, of this store, to the observer alone.
func (s *Store) observe(e replay.Event) {
	if s.opts.Observer != nil {
		e.Store = "redisstore"
		s.opts.Observer(e)
	}
}

// emit reports e to the observer and, at most once a minute per kind (every
// time for a fence raised), to the log.
func (s *Store) emit(e replay.Event) {
	s.observe(e)
	now := time.Now().UnixMilli()
	if e.Kind != replay.EventFenceRaised && e.Kind != replay.EventRiskAccepted {
		if int(e.Kind) >= len(s.logged) {
			return
		}
		last := s.logged[e.Kind].Load()
		if now-last < time.Minute.Milliseconds() || !s.logged[e.Kind].CompareAndSwap(last, now) {
			return
		}
	}
	attrs := []any{slog.String("event", e.Kind.String()), slog.String("prefix", s.prefix), slog.Int("shard", e.Shard)}
	if !e.Until.IsZero() {
		attrs = append(attrs, slog.Time("until", e.Until))
	}
	if e.Option != "" {
		attrs = append(attrs, slog.String("option", e.Option), slog.String("risk", e.Risk))
	}
	switch e.Kind {
	case replay.EventFenceRaised:
		s.log.Error("redisstore: Redis lost acknowledged data (a shard marker is missing); the shard refuses every claim until the fence opens; see `ctoken-store status`, and `ctoken-store reopen` to accept the risk and serve before then", attrs...)
	case replay.EventFenced:
		s.log.Warn("redisstore: refusing claims of a fenced shard", attrs...)
	case replay.EventClockSkew:
		s.log.Warn("redisstore: refusing claims: this instance's clock is behind Redis's by more than MaxSkew", attrs...)
	case replay.EventNotDurable:
		s.log.Warn("redisstore: refusing claims: fewer replicas acknowledged the write than Durability requires", attrs...)
	case replay.EventRiskAccepted:
		s.log.Warn("redisstore: the server has a risk an Allow* option accepts; claims may be accepted twice if it materializes", attrs...)
	case replay.EventClaimResent:
		s.log.Info("redisstore: a claim's reply was lost and the client resent it; its own nonce identified it", attrs...)
	case replay.EventLeaseAbandoned:
		s.log.Warn("redisstore: could not release a lease whose acquisition had an unknown outcome; it ends by itself", attrs...)
	}
}
