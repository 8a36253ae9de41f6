package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
)

// Durability is what [New] read of the session's commit settings: what a
// claim's acknowledgement means.
type Durability struct {
	// SynchronousCommit is the session's synchronous_commit: "on",
	// "remote_apply" or "remote_write" (flushed locally, and also sent to
	// the synchronous standbys if any are configured), "local" (flushed
	// locally only), or "off" (not flushed: accepted only with
	// Options.AllowAsyncCommit).
	SynchronousCommit string
	// SynchronousStandbyNames is the server's synchronous_standby_names;
	// empty when no standby is synchronous.
	SynchronousStandbyNames string
	// Standbys is how many physical standbys were streaming from the
	// server at the last check (pg_stat_replication without logical
	// walsenders and without pg_basebackup's).
	Standbys int
	// StandbySlots is how many permanent physical replication slots the
	// server had at the last check (pg_replication_slots), whether a
	// standby is streaming from them or not.
	StandbySlots int
}

// WaitsForStandby reports whether an acknowledged claim has also reached a
// synchronous standby: synchronous_standby_names is set and
// synchronous_commit is on, remote_write or remote_apply. A failover that
// promotes such a standby keeps every acknowledged claim (a failover to an
// asynchronous one may not). Without it, an acknowledged claim survives a
// crash of the server (synchronous_commit not off) but not the loss of its
// disk.
func (d Durability) WaitsForStandby() bool {
	switch d.SynchronousCommit {
	case "on", "remote_write", "remote_apply":
		return d.SynchronousStandbyNames != ""
	}
	return false
}

// Durability returns the commit settings New read, or the latest recheck
// read since.
func (s *Store) Durability() Durability {
	if d := s.durable.Load(); d != nil {
		return *d
	}
	return Durability{}
}

// checks are New's checks of the server, which the sweeper repeats.
type checks struct {
	asyncCommit, asyncStandby, requireStandby, rollback bool
	maxSkew                                             time.Duration
	horizon                                             time.Duration // Options.Horizon: see [judgeHistory]
	now                                                 func() time.Time
}

// serverState is what one query reads of the server and the table.
type serverState struct {
	durable          Durability
	recovery, marker bool
	sawStandby       bool          // a standby not waited for was seen before (see Store.sawStandby)
	legacy           bool          // the table has the marker of key layout 1: not migrated
	writable         bool          // the role may SELECT, INSERT, UPDATE and DELETE the table
	permanent        bool          // the table is neither unlogged nor temporary
	recordable       bool          // the table has the columns fingerprint and result (bytea)
	functions        bool          // the table's functions are this version's (see functionsCheckSQL)
	fsync, fullPages bool          // the server's fsync and full_page_writes
	readOnly         bool          // the session's transactions are read-only (default_transaction_read_only: a write freeze)
	behind           time.Duration // how far the instance's clock is behind now()

	// The server's history (see [judgeHistory]): its timeline (0 in
	// recovery), its cluster's system identifier, the marker row's record, the physical standbys
	// streaming, the name it streamed under if it was a standby, the
	// longest remaining lifetime of a live row (seconds), and how long
	// the marker's fence still lasts (0: none). fencedFor is measured by
	// the database's clock (the marker's until minus now(), the start of
	// the read's transaction); readAt is the instance's clock when the
	// read's answer arrived, to which [Store.keepHistory] adds it: the
	// fence's end as well as this instance knows it (not before the end
	// when the two clocks agree, as now() was read before the answer).
	timeline      int64
	sys           int64
	record        string
	standbys      []standby
	self          self
	longest       float64
	fencedFor     time.Duration
	fencedForever bool
	readAt        time.Time
}

// resolve finds, at New, the schema of the table named name (quoted, as
// [quoteTable] returns it; an unqualified name is looked up along the
// session's search_path, as PostgreSQL does) and sets s.table to the
// schema-qualified name, which every statement of the store then uses: a
// temporary table of the same name, which an unqualified name would find
// first in a session that created one, cannot take the store's statements.
// It also reads the database's name, the server's system identifier,
// address and port, which a transaction of [WithTx] must share (a copy of
// the data directory, such as a promoted standby, has the same identifier,
// not the same address and port). A table that does not exist
// is refused with ErrConfig.
func (s *Store) resolve(ctx context.Context, name string) error {
	type resolved struct {
		schema, table *string
		db            string
		sysID         int64
		port          *int32
		addr          *string
	}
	r, err := call(s, ctx, func(ctx context.Context) (resolved, error) {
		var r resolved
		err := s.pool.QueryRow(ctx, `SELECT n.nspname, c.relname, current_database(), (SELECT system_identifier FROM pg_control_system()),
			inet_server_port(), inet_server_addr()::text FROM (SELECT to_regclass($1) AS oid) t LEFT JOIN pg_class c ON c.oid = t.oid LEFT JOIN pg_namespace n ON n.oid = c.relnamespace`, name).Scan(
			&r.schema, &r.table, &r.db, &r.sysID, &r.port, &r.addr)
		return r, err
	})
	switch {
	case err != nil:
		return err
	case r.schema == nil || r.table == nil:
		return fmt.Errorf("%w: table %s does not exist: run pgstore.Migrate or the SQL of pgstore.Schema", ErrConfig, strings.ReplaceAll(name, `"`, ""))
	}
	s.table = pgx.Identifier{*r.schema, *r.table}.Sanitize()
	s.setWorkFns(*r.schema, *r.table)
	s.dbName, s.sysID, s.port, s.addr = r.db, r.sysID, r.port, r.addr
	return nil
}

// readServer reads the session's settings, the standbys, the server's
// clock and the marker row in one query.
func (s *Store) readServer(ctx context.Context) (serverState, error) {
	type read struct {
		st                 serverState
		dbNow              time.Time
		record, conninfo   *string
		standbys           string
		slot, cluster      string
		longest, fencedFor *float64
	}
	// The instance's clock is read before the query: a slow answer (a
	// lock wait, a loaded server) then makes the instance look further
	// behind, never less.
	before := s.checks.now()
	r, err := call(s, ctx, func(ctx context.Context) (read, error) {
		var r read
		// Physical standbys: walsenders without a logical slot (a CDC
		// consumer is no failover target), leaving out pg_basebackup's (a
		// base backup in progress: restoring it is a rollback, not a
		// failover), and permanent physical slots (a standby's
		// primary_slot_name; pg_basebackup's own slot is temporary). A
		// role without pg_read_all_stats sees no state or name (NULL):
		// such walsenders count.
		err := s.pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
			current_setting('fsync')::bool, current_setting('full_page_writes')::bool,
			(SELECT count(*) FROM pg_stat_replication r LEFT JOIN pg_replication_slots l ON l.active_pid = r.pid
			  WHERE l.slot_type IS DISTINCT FROM 'logical' AND r.state IS DISTINCT FROM 'backup'
			    AND r.application_name IS DISTINCT FROM 'pg_basebackup'),
			(SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'physical' AND NOT temporary),
			pg_is_in_recovery(), current_setting('transaction_read_only')::bool, `+sysSQL+`, now(), EXISTS (SELECT 1 FROM `+s.table+` WHERE key = `+markerSQL+` AND state = 'm'),
			EXISTS (SELECT 1 FROM `+s.table+` WHERE key = `+legacyMarkerSQL+` AND state = 'm'),
			has_table_privilege($1, 'SELECT') AND has_table_privilege($1, 'INSERT') AND
			has_table_privilege($1, 'UPDATE') AND has_table_privilege($1, 'DELETE'),
			(SELECT relpersistence = 'p' FROM pg_class WHERE oid = $1::regclass),
			(SELECT count(*) = 2 FROM pg_attribute WHERE attrelid = $1::regclass AND attname IN ('fingerprint', 'result')
			  AND atttypid = 'bytea'::regtype AND attnum > 0 AND NOT attisdropped),
			`+functionsCheckSQL+`,
			CASE WHEN pg_is_in_recovery() THEN 0 ELSE `+timelineSQL+` END,
			(SELECT token FROM `+s.table+` WHERE key = `+markerSQL+` AND state = 'm'),
			(SELECT coalesce(json_agg(json_build_object('app', r.application_name, 'slot', l.slot_name, 'state', r.sync_state) ORDER BY r.application_name, l.slot_name, r.pid), '[]')::text
			  FROM pg_stat_replication r LEFT JOIN pg_replication_slots l ON l.active_pid = r.pid
			  WHERE l.slot_type IS DISTINCT FROM 'logical' AND r.state IS DISTINCT FROM 'backup'
			    AND r.application_name IS DISTINCT FROM 'pg_basebackup'),
			coalesce(current_setting('primary_slot_name', true), ''), current_setting('cluster_name'),
			CASE WHEN pg_has_role('pg_read_all_settings', 'USAGE') THEN current_setting('primary_conninfo') END,
			(SELECT extract(epoch FROM max(until) - now())::float8 FROM `+s.table+` WHERE until > now() AND until < 'infinity' AND state <> 'm'),
			(SELECT CASE WHEN until = 'infinity' THEN 'Infinity'::float8 WHEN until > now() THEN extract(epoch FROM until - now())::float8 ELSE 0 END
			  FROM `+s.table+` WHERE key = `+markerSQL+` AND state = 'm')`, s.table, s.fnSigs, s.fnSrcs, s.fnCfgs).Scan(
			&r.st.durable.SynchronousCommit, &r.st.durable.SynchronousStandbyNames, &r.st.fsync, &r.st.fullPages, &r.st.durable.Standbys, &r.st.durable.StandbySlots, &r.st.recovery, &r.st.readOnly, &r.st.sys, &r.dbNow, &r.st.marker, &r.st.legacy, &r.st.writable, &r.st.permanent, &r.st.recordable, &r.st.functions,
			&r.st.timeline, &r.record, &r.standbys, &r.slot, &r.cluster, &r.conninfo, &r.longest, &r.fencedFor)
		return r, err
	})
	if err != nil {
		return serverState{}, err
	}
	r.st.readAt = s.checks.now()
	r.st.behind = r.dbNow.Sub(before)
	if r.record != nil {
		r.st.record = *r.record
	}
	if r.longest != nil {
		r.st.longest = *r.longest
	}
	if r.fencedFor != nil {
		r.st.fencedFor = time.Duration(min(*r.fencedFor, maxFence.Seconds()) * float64(time.Second))
		r.st.fencedForever = math.IsInf(*r.fencedFor, 1)
	}
	if json.Unmarshal([]byte(r.standbys), &r.st.standbys) != nil {
		r.st.standbys = nil
	}
	r.st.self = selfFrom(r.slot, r.cluster, r.conninfo)
	return r.st, nil
}

// judge returns why the store must not run on a server in state st (nil
// if it may), and the risks present that an Allow* option accepts.
func (c checks) judge(st serverState) ([]risk, error) {
	d := st.durable
	standby := (d.Standbys > 0 || d.StandbySlots > 0 || st.sawStandby) && !d.WaitsForStandby()
	var accepted []risk
	accept := func(r risk, allowed bool) {
		if allowed {
			accepted = append(accepted, r)
		}
	}
	if d.SynchronousCommit == "off" {
		accept(riskAsyncCommit, c.asyncCommit)
	}
	if !st.fsync {
		accept(riskFsync, c.rollback)
	}
	if !st.fullPages {
		accept(riskFullPages, c.rollback)
	}
	if standby {
		accept(riskStandby, c.asyncStandby)
	}
	switch {
	case st.recovery:
		return accepted, fmt.Errorf("%w: the server is a read-only standby", ErrUnavailable)
	case st.readOnly:
		return accepted, fmt.Errorf("%w: the session is read-only (transaction_read_only on: default_transaction_read_only set by ALTER SYSTEM, DATABASE or ROLE, a write freeze): claims cannot be written until it is lifted; the store then serves again by itself", ErrUnavailable)
	case !st.writable:
		return accepted, fmt.Errorf("%w: the role may not SELECT, INSERT, UPDATE and DELETE the table (GRANT them)", ErrConfig)
	case !st.permanent:
		return accepted, fmt.Errorf("%w: the table is unlogged or temporary: a crash (or the session's end) empties it, and a standby never has it (ALTER TABLE ... SET LOGGED)", ErrConfig)
	case !st.recordable:
		return accepted, fmt.Errorf("%w: the table lacks the columns fingerprint and result (bytea) of replay.Recorder: it was made by an earlier pgstore (run pgstore.Migrate)", ErrConfig)
	case !st.functions:
		return accepted, fmt.Errorf("%w: the table's functions (<table>_fence, <table>_fence_locked, <table>_reset) are missing or not this version's (run pgstore.Migrate, or the SQL of pgstore.Schema), or another function of one of their names is in the table's schema (drop it: its overload makes their calls ambiguous), or the role may not EXECUTE them (GRANT it)", ErrConfig)
	case d.SynchronousCommit == "off" && !c.asyncCommit:
		return accepted, fmt.Errorf("%w: synchronous_commit is off: a crash would forget acknowledged claims (set it on, or Options.AllowAsyncCommit)", ErrConfig)
	case !st.fsync && !c.rollback:
		return accepted, fmt.Errorf("%w: fsync is off: a crash of the machine can lose acknowledged claims and leave the marker row, so they would be accepted again (set fsync on, or Options.AllowRollback)", ErrConfig)
	case !st.fullPages && !c.rollback:
		return accepted, fmt.Errorf("%w: full_page_writes is off: a crash of the machine can tear pages that recovery cannot repair, losing acknowledged claims (set full_page_writes on, or Options.AllowRollback)", ErrConfig)
	case standby && !c.asyncStandby:
		return accepted, fmt.Errorf("%w: the server streams to %d standby(s) and has %d physical replication slot(s) (a standby seen since the store started counts until synchronous replication covers it), but commits wait for no standby: a failover could accept acknowledged claims again. %s",
			ErrConfig, d.Standbys, d.StandbySlots, howToCoverStandby)
	case c.requireStandby && !d.WaitsForStandby():
		return accepted, fmt.Errorf("%w: commits do not wait for a synchronous standby (synchronous_commit %s, synchronous_standby_names %q)",
			ErrConfig, d.SynchronousCommit, d.SynchronousStandbyNames)
	case c.maxSkew > 0 && st.behind > c.maxSkew:
		return accepted, fmt.Errorf("%w: this instance's clock is %v behind the database's (limit %v): fix NTP", ErrConfig, st.behind.Round(time.Millisecond), c.maxSkew)
	}
	return accepted, nil
}

// howToCoverStandby is what New's refusal of a standby that commits do
// not wait for says to do: what the checks accept as covered.
const howToCoverStandby = "To cover the standbys, make commits wait for them: set synchronous_standby_names to name them " +
	"(their application_name, e.g. 'FIRST 1 (standby1)'; every standby a failover may promote must be synchronous) " +
	"and keep synchronous_commit on, remote_write or remote_apply (not local or off), then reload; " +
	"and give every standby a physical replication slot (primary_slot_name, or pg_basebackup -C -S <slot>), " +
	"since a standby without a slot that is not streaming when a Store starts cannot be seen and is not covered. " +
	"Or set Options.AllowAsyncStandby to accept the risk"

// newSession reads synchronous_commit and transaction_read_only in a new
// session, opened with the pool's connection settings and closed at once:
// what the next connection the pool opens will have.
func (s *Store) newSession(ctx context.Context) (commit string, readOnly bool, err error) {
	type read struct {
		commit   string
		readOnly bool
	}
	r, err := call(s, ctx, func(ctx context.Context) (read, error) {
		c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
		if err != nil {
			return read{}, err
		}
		defer c.Close(context.Background())
		var r read
		err = c.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('transaction_read_only')::bool`).Scan(&r.commit, &r.readOnly)
		return r, err
	})
	return r.commit, r.readOnly, err
}

// closeReadOnly closes the pool's idle connections whose sessions are
// read-only: opened during a write freeze (ALTER DATABASE or ALTER ROLE
// ... SET default_transaction_read_only = on) that has been lifted since,
// they keep it for their lifetime, and every claim on them would fail.
// A connection in use is checked at a later recheck, once idle.
func (s *Store) closeReadOnly(ctx context.Context) {
	timeout := s.timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	for _, c := range s.pool.AcquireAllIdle(ctx) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		var ro bool
		err := c.QueryRow(cctx, `SELECT current_setting('transaction_read_only')::bool`, pgx.QueryExecModeSimpleProtocol).Scan(&ro)
		if err != nil || ro {
			c.Conn().Close(cctx) // the pool destroys a closed connection at its release
		}
		cancel()
		c.Release()
	}
}

// commitRank orders synchronous_commit values from the weakest (off).
func commitRank(v string) int {
	switch v {
	case "off":
		return 0
	case "local":
		return 1
	case "remote_write":
		return 2
	case "on":
		return 3
	}
	return 4 // remote_apply
}

// noteStandby records a standby that commits do not wait for (sticky
// until they do).
func (s *Store) noteStandby(d Durability) {
	switch {
	case d.WaitsForStandby():
		s.sawStandby.Store(false)
	case d.Standbys > 0 || d.StandbySlots > 0:
		s.sawStandby.Store(true)
	}
}

// recheck repeats New's checks (on the checker goroutine): while one
// fails, Claim, AcquireLease and ConfirmLease refuse with its reason. A
// server that cannot be read leaves things as they are (the calls fail on
// their own).
func (s *Store) recheck(ctx context.Context) {
	st, err := s.readServer(ctx)
	if err != nil {
		return
	}
	// The pool's sessions keep the settings they started with; a session
	// the pool opens next gets what ALTER ROLE or ALTER DATABASE set since.
	if c, ro, err := s.newSession(ctx); err == nil {
		if commitRank(c) < commitRank(st.durable.SynchronousCommit) {
			st.durable.SynchronousCommit = c
		}
		if st.readOnly && !ro {
			// A write freeze lifted: the pooled sessions opened during
			// it are still read-only. This check refuses; the next one
			// reads a writable session.
			s.closeReadOnly(ctx)
		}
	}
	s.noteStandby(st.durable)
	st.sawStandby = s.sawStandby.Load()
	s.durable.Store(&st.durable)
	accepted, err := s.checks.judge(st)
	// The history is kept whatever the other checks say: a fence is the
	// table's, for every Store on it, and the one reason that counts.
	if fenced := s.keepHistory(ctx, st, judgeHistory(st, s.checks.horizon)); fenced != nil {
		err = fenced
	}
	if !st.marker && !st.legacy {
		err = forgottenRefusal(s.tableName())
	}
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		s.refusal.Store(&err)
	} else {
		s.refusal.Store(nil)
	}
	s.report(accepted, err)
}

// report emits an event for each accepted risk that the previous check did
// not report, and for a refusal that starts, changes or ends.
func (s *Store) report(accepted []risk, refusal error) {
	for _, r := range accepted {
		seen := false
		for _, p := range s.accepted {
			seen = seen || p == r
		}
		if !seen {
			s.emit(replay.Event{Kind: replay.EventRiskAccepted, Option: r.option, Risk: r.what})
		}
	}
	s.accepted = accepted
	switch {
	case refusal != nil && "refusing: "+reasonClass(refusal) != s.refusing:
		s.refusing = "refusing: " + reasonClass(refusal)
		s.emit(replay.Event{Kind: replay.EventRefusing, Reason: refusal})
	case refusal == nil && s.refusing != "":
		s.refusing = ""
		s.emit(replay.Event{Kind: replay.EventServing})
	}
}

// reasonClass is a refusal's text without its words holding figures (how
// far a clock is behind, how many standbys stream), so that a reason whose figures move
// at every recheck is reported once, not every second.
func reasonClass(err error) string {
	words := strings.Fields(err.Error())
	kept := words[:0]
	for _, w := range words {
		if !strings.ContainsAny(w, "0123456789") {
			kept = append(kept, w)
		}
	}
	return strings.Join(kept, " ")
}

// checker runs recheck every interval until ctx ends.
func (s *Store) checker(ctx context.Context, interval time.Duration) {
	defer s.sweeping.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.recheck(ctx)
		}
	}
}

// refused returns the recheck's reason to refuse calls, or nil.
func (s *Store) refused() error {
	if err := s.refusal.Load(); err != nil {
		return *err
	}
	return nil
}
