package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// synchronous levels as PRAGMA synchronous reports them.
const (
	syncOff    = 0
	syncNormal = 1
	syncFull   = 2
	syncExtra  = 3
)

var syncNames = map[int]string{syncOff: "OFF", syncNormal: "NORMAL", syncFull: "FULL", syncExtra: "EXTRA"}

// settings are a connection's settings that decide what a commit
// survives.
type settings struct {
	journal     string // lower case
	synchronous int
	busyTimeout int
	queryOnly   bool
	path        string // the main database's file; "" for :memory: or temporary
}

func (c settings) wal() bool { return c.journal == "wal" }

func readSettings(ctx context.Context, conn interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (settings, error) {
	var c settings
	var queryOnly int
	for _, p := range []struct {
		pragma string
		dst    any
	}{
		{"journal_mode", &c.journal},
		{"synchronous", &c.synchronous},
		{"busy_timeout", &c.busyTimeout},
		{"query_only", &queryOnly},
	} {
		if err := conn.QueryRowContext(ctx, `PRAGMA `+p.pragma).Scan(p.dst); err != nil {
			return settings{}, unavailable(ctx, fmt.Errorf("PRAGMA %s: %w", p.pragma, err))
		}
	}
	c.journal = strings.ToLower(c.journal)
	c.queryOnly = queryOnly != 0
	rows, err := conn.QueryContext(ctx, `PRAGMA database_list`)
	if err != nil {
		return settings{}, unavailable(ctx, fmt.Errorf("PRAGMA database_list: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		var seq int
		var name string
		var file sql.NullString
		if err := rows.Scan(&seq, &name, &file); err != nil {
			return settings{}, unavailable(ctx, fmt.Errorf("PRAGMA database_list: %w", err))
		}
		if name == "main" {
			c.path = file.String
		}
	}
	if err := rows.Err(); err != nil {
		return settings{}, unavailable(ctx, fmt.Errorf("PRAGMA database_list: %w", err))
	}
	return c, nil
}

// check refuses settings that lose acknowledged claims or cannot work,
// naming every refused setting at once, each with its fix, so that a DSN
// is fixed in one pass.
func (c settings) check(allowNormal bool) error {
	return configFaults(c.faults(allowNormal))
}

// faults are the settings check refuses, each with its fix.
func (c settings) faults(allowNormal bool) []string {
	const how = " (set it on every connection, in the DSN: see the package documentation)"
	var faults []string
	if c.path == "" {
		faults = append(faults, "an in-memory or temporary database forgets every claim when it closes: open a file")
	}
	// An in-memory database's journal is MEMORY whatever the DSN asks:
	// opening a file is the fix, not the journal_mode, nor a synchronous
	// level judged against it.
	ownJournal := c.path == "" && c.journal == "memory"
	if !ownJournal && (c.journal == "off" || c.journal == "memory") {
		faults = append(faults, fmt.Sprintf("journal_mode=%s loses or corrupts commits in a crash: use WAL"+how, strings.ToUpper(c.journal)))
	}
	switch {
	case c.synchronous == syncOff:
		faults = append(faults, "synchronous=OFF acknowledges commits that a crash of the machine loses: use FULL"+how)
	case c.journal == "delete" && c.synchronous == syncFull && !ownJournal:
		// A commit in DELETE mode is the unlink of the rollback journal,
		// and FULL does not sync the directory after it: a power cut can
		// bring the journal back, and the next open rolls the
		// acknowledged commit back (measured: TestPowerCut's lazy-unlink
		// model, 0-3 acknowledged IDs accepted again per run).
		faults = append(faults, "synchronous=FULL with journal_mode=DELETE can lose the last acknowledged commit in a power cut (the journal's deletion is not synced): use WAL, or synchronous=EXTRA"+how)
	case c.synchronous >= syncFull || ownJournal:
	case !c.wal():
		faults = append(faults, fmt.Sprintf("synchronous=%s with journal_mode=%s can lose or corrupt commits in a power cut: use FULL (EXTRA with journal_mode=DELETE)"+how, syncNames[c.synchronous], strings.ToUpper(c.journal)))
	case !allowNormal:
		faults = append(faults, "synchronous=NORMAL in WAL mode acknowledges commits before they are on the disk, so a power cut forgets the last claims: use FULL"+how+", or accept the risk with Options.AllowNormalSync")
	}
	if c.busyTimeout <= 0 {
		faults = append(faults, "busy_timeout=0 fails every call that meets another connection's write at once: set it, e.g. 5000 ms"+how)
	}
	if c.queryOnly {
		faults = append(faults, "the connection is query_only: the store writes, so open it without query_only (in the DSN: see the package documentation)")
	}
	return faults
}

// checkLocks refuses a database whose connections do not lock the file
// (a URI's nolock=1, vfs=unix-none, a VFS without locking): SQLite's write
// lock is what makes a claim atomic across processes, and without it two
// processes on the file both accept an ID. conn takes the write lock
// (BEGIN IMMEDIATE, rolled back); a second connection of the pool, its
// busy_timeout set to 0 (and discarded after, so no connection of the
// pool keeps that setting), must be refused it.
func checkLocks(ctx context.Context, db *sql.DB, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return unavailable(ctx, fmt.Errorf("taking the write lock: %w", err))
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
	other, err := db.Conn(ctx)
	if err != nil {
		return unavailable(ctx, err)
	}
	defer discard(other)
	if _, err := other.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
		return unavailable(ctx, err)
	}
	_, err = other.ExecContext(ctx, `BEGIN IMMEDIATE`)
	switch {
	case err == nil:
		_, _ = other.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		return fmt.Errorf("%w: two connections both took the database's write lock: the file is opened without locks (nolock=1, vfs=unix-none, or a VFS that does not lock), so two processes would both accept an ID: open it with the default VFS, without nolock", ErrConfig)
	case !strings.Contains(err.Error(), "database is locked"):
		return unavailable(ctx, fmt.Errorf("testing the write lock: %w", err))
	}
	return nil
}

// configFaults returns nil when there is no fault, ErrConfig naming the
// fault when there is one, and when there are several ErrConfig naming each
// in order ("2 configuration faults: a; b"), so that a user fixes the
// Options and the DSN in one pass instead of meeting the next refused
// setting after each fix.
func configFaults(faults []string) error {
	switch len(faults) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: %s", ErrConfig, faults[0])
	}
	return fmt.Errorf("%w: %d configuration faults: %s", ErrConfig, len(faults), strings.Join(faults, "; "))
}

// guard keeps the evidence that the database still holds what the store
// acknowledged: the marker row's incarnation and sequence, the file's
// identity, and a refusal set when any of them fails.
type guard struct {
	incarnation string
	seq         atomic.Int64 // the highest sequence seen
	gen         atomic.Int64 // checks run: a durable commit advances the sequence once per check
	bumpedGen   int64        // gen when the sequence last advanced (under writeMu)
	info        os.FileInfo  // the database file as New found it
	// wal is the WAL file while the store's writer holds a connection
	// (SQLite deletes the WAL only when its last connection closes): nil
	// otherwise, and cleared before that connection closes.
	wal     atomic.Pointer[os.FileInfo]
	refusal atomic.Pointer[error]
	sticky  atomic.Bool // the refusal is a loss: only a new Store after Rearm lifts it

	mu            sync.Mutex // persist
	persisted     int64
	persistedBoot string
	logged        string
}

func (g *guard) refused() error {
	if p := g.refusal.Load(); p != nil {
		return *p
	}
	return nil
}

// refuse makes every call return err; a loss (ErrForgotten) is never
// lifted by a later check.
func (g *guard) refuse(err error) {
	if errors.Is(err, ErrForgotten) {
		g.sticky.Store(true)
	} else if g.sticky.Load() {
		return
	}
	g.refusal.Store(&err)
}

func (g *guard) clear() {
	if !g.sticky.Load() {
		g.refusal.Store(nil)
	}
}

// sidecar is what the store records beside the database file (its path
// plus "-ctoken"): which database it is, and the highest sequence any
// store saw in it. A database at the path that is another one, or older,
// has forgotten claims.
type sidecar struct {
	Incarnation string `json:"incarnation"`
	Seq         int64  `json:"seq"`
	// Boot is the kernel's boot id while a store with synchronous=NORMAL
	// (Options.AllowNormalSync) runs on the database, whose last
	// acknowledged commits a crash of the machine may take back; a Close
	// that has put every commit on the disk clears it. A Boot other than
	// the machine's now means the machine went down while such a store
	// ran: New refuses with ErrForgotten.
	Boot string `json:"boot,omitempty"`
}

// bootID is the kernel's boot id (Linux), "" where there is none.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func sidecarPath(db string) string { return db + "-ctoken" }

// sidecarFile is the sidecar of table in the database file path:
// "<path>-ctoken" for DefaultTable, "<path>-ctoken.<table>" for another
// table, so tables sharing a file keep a sidecar each, and no two
// (path, table) pairs share one: a table name holds neither '-' nor '.'.
func sidecarFile(path, table string) string {
	if t := unquote(table); t != DefaultTable {
		return sidecarPath(path) + "." + t
	}
	return sidecarPath(path)
}

// legacySidecarFile is the name versions before this one gave the sidecar
// of a table other than DefaultTable, "<path>-<table>-ctoken", which is
// also the default table's sidecar of the database file "<path>-<table>";
// "" for DefaultTable.
func legacySidecarFile(path, table string) string {
	if t := unquote(table); t != DefaultTable {
		return sidecarPath(path + "-" + t)
	}
	return ""
}

// tableSidecar reads the sidecar of table in the database file path. When
// there is none, a sidecar of the legacy name is read instead, and legacy
// says so: it counts only when it names the table's incarnation (it may
// be another database's; the caller decides), and the store's next
// record goes to the new name.
func tableSidecar(path, table string) (c sidecar, ok, legacy bool, err error) {
	c, ok, err = readSidecar(sidecarFile(path, table))
	if ok || err != nil {
		return c, ok, false, err
	}
	if old := legacySidecarFile(path, table); old != "" {
		c, ok, err = readSidecar(old)
		return c, ok, ok, err
	}
	return c, false, false, nil
}

func readSidecar(file string) (sidecar, bool, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return sidecar{}, false, nil
	}
	if err != nil {
		return sidecar{}, false, fmt.Errorf("%w: reading %s: %w", ErrUnavailable, file, err)
	}
	var c sidecar
	if err := json.Unmarshal(b, &c); err != nil || c.Incarnation == "" || c.Seq < 0 {
		return sidecar{}, false, fmt.Errorf("%w: %s is not a sidecar of this store (remove it only if the database beside it is known to be complete)", ErrForgotten, file)
	}
	return c, true, nil
}

// writeSidecar records c in file. Unless force, it merges what the file
// holds of the same incarnation (another process's store may have seen
// more): the higher sequence, and a Boot that c does not clear (only a
// forced write does). The write is atomic (a renamed temporary file) and
// synced, and skipped when it would change nothing.
func writeSidecar(file string, c sidecar, force bool) error {
	if !force {
		if old, ok, err := readSidecar(file); err == nil && ok && old.Incarnation == c.Incarnation {
			c.Seq = max(c.Seq, old.Seq)
			if c.Boot == "" {
				c.Boot = old.Boot
			}
			if c == old {
				return nil
			}
		}
	}
	b, _ := json.Marshal(c)
	dir := filepath.Dir(file)
	f, err := os.CreateTemp(dir, filepath.Base(file)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err = f.Write(append(b, '\n')); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// marker reads the marker row: the incarnation, the fence's end, the
// sequence.
func (s *Store) marker(q querier) (inc string, fence, seq int64, err error) {
	err = q.queryRow(`SELECT token, until, seq FROM `+s.table+` WHERE key = `+markerKey+` AND state = 'm'`).Scan(&inc, &fence, &seq)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, 0, fmt.Errorf("%w: the table's marker row is missing (the table was emptied)", ErrForgotten)
	}
	if err != nil && isNoTable(err) {
		return "", 0, 0, errNoTable
	}
	return inc, fence, seq, err
}

var errNoTable = errors.New("no such table")

func isNoTable(err error) bool { return strings.Contains(err.Error(), "no such table") }

// open is New's check of the database: the table and its marker, the
// sidecar, one write.
func (g *guard) open(ctx context.Context, s *Store, conn *sql.Conn) error {
	q := connQuerier{ctx, conn}
	side, haveSide, legacy, err := tableSidecar(s.path, s.table)
	if err != nil {
		return err
	}
	inc, _, seq, err := s.marker(q)
	if legacy && err == nil && side.Incarnation != inc {
		s.log.Warn("sqlitestore: a sidecar of the name older versions gave this table names another database (it may be the sidecar of the file it is named after); not used", "path", legacySidecarFile(s.path, s.table), "table", unquote(s.table))
		haveSide = false
	}
	switch {
	case errors.Is(err, errNoTable) && haveSide:
		return fmt.Errorf("%w: the table %s is missing from %s, which a store used before (the file was deleted or replaced): run Rearm once you have decided", ErrForgotten, unquote(s.table), s.path)
	case errors.Is(err, errNoTable):
		return fmt.Errorf("%w: the table %s does not exist: run Migrate", ErrConfig, unquote(s.table))
	case err != nil:
		return unavailable(ctx, err)
	}
	if haveSide && side.Incarnation != inc {
		return fmt.Errorf("%w: %s is not the database the store used at this path before (deleted and made again, or replaced): run Rearm once you have decided", ErrForgotten, s.path)
	}
	if haveSide && seq < side.Seq {
		return fmt.Errorf("%w: %s is older than the database the store last saw at this path (sequence %d, last seen %d: a restored backup or copy): run Rearm once you have decided", ErrForgotten, s.path, seq, side.Seq)
	}
	if haveSide && side.Boot != "" && side.Boot != s.boot {
		return fmt.Errorf("%w: the machine went down while a store with synchronous=NORMAL (Options.AllowNormalSync) ran on %s, which acknowledges commits before they are on the disk: its last acknowledged claims may be gone: run Rearm once you have decided", ErrForgotten, s.path)
	}
	root, err := s.rootPage(q)
	if err != nil {
		return unavailable(ctx, err)
	}
	if err := judgeWALLinks(s.path, s.table, s.now().UnixNano(), root, s.currentIn(q)); errors.Is(err, ErrForgotten) {
		return err
	} else if err != nil {
		return unavailable(ctx, err)
	}
	g.incarnation = inc
	g.seq.Store(seq)
	if g.info, err = os.Stat(s.path); err != nil {
		return unavailable(ctx, err)
	}
	// One write, so a read-only file or a full disk fails here.
	if _, err := q.exec(`BEGIN IMMEDIATE`); err != nil {
		return unavailable(ctx, err)
	}
	seq, err = g.step(q, s, s.now().UnixNano(), true)
	if f := new(fenced); errors.As(err, f) {
		// A fence set by Rearm: the store is built and its calls refuse
		// until the fence ends.
		seq, err = f.seq, nil
	}
	if err == nil {
		_, err = q.exec(`COMMIT`)
	}
	if err == nil {
		g.saw(seq)
	}
	if err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		if errors.Is(err, ErrForgotten) {
			return err
		}
		return unavailable(ctx, fmt.Errorf("a first write: %w", err))
	}
	g.refusal.Store(nil)
	g.persist(s)
	s.relinkWAL()
	return nil
}

// step is the first statement of every write transaction: it checks, in
// the same transaction, that the marker is there, of the store's
// incarnation, not fenced, and not behind what the store saw. A durable
// transaction (bump) also advances the marker's sequence and returns the
// new one, for [guard.saw] once the transaction committed; a transaction
// that commits without waiting for the disk (a batch of lease steps)
// leaves it, so a power cut that takes such a commit back never looks
// like an older copy of the file.
func (g *guard) step(q querier, s *Store, now int64, bump bool) (int64, error) {
	var seq, fence int64
	query := `SELECT seq, until FROM ` + s.table + ` WHERE key = ` + markerKey + ` AND state = 'm' AND token = ?`
	if bump {
		query = `UPDATE ` + s.table + ` SET seq = seq + 1 WHERE key = ` + markerKey + ` AND state = 'm' AND token = ? RETURNING seq, until`
	}
	err := q.queryRow(query, g.incarnation).Scan(&seq, &fence)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, g.missing()
	}
	if err != nil {
		return 0, err
	}
	return g.judge(seq, fence, now, bump)
}

// missing refuses every call for a marker row not found (or not of the
// store's incarnation) by a write transaction's first statement.
func (g *guard) missing() error {
	err := fmt.Errorf("%w: the table's marker row is missing or was re-armed (the table was emptied, or the file replaced)", ErrForgotten)
	g.refuse(err)
	return err
}

// judge is step's verdict on the marker it read (or, with bump, wrote):
// not fenced, and not behind the sequence the store saw.
func (g *guard) judge(seq, fence, now int64, bump bool) (int64, error) {
	if fence > now {
		return 0, fenced{time.Unix(0, fence), seq}
	}
	if last := g.seq.Load(); seq < last || bump && seq == last {
		err := fmt.Errorf("%w: the database's sequence went back from %d to %d (the file was replaced by an older copy)", ErrForgotten, last, seq)
		g.refuse(err)
		return 0, err
	}
	if !bump {
		return 0, nil
	}
	return seq, nil
}

// wantBump reports whether a durable transaction must advance the
// marker's sequence: the first after each check (every RecheckInterval),
// and after New's own write. The other durable commits only read the
// marker, so they write no page of it: a copy of the file that misses a
// commit is found as older as long as it also misses the advance made in
// the first durable commit after a check. gen is for [guard.bumped]. The
// caller holds writeMu.
func (g *guard) wantBump(durable bool) (bool, int64) {
	gen := g.gen.Load()
	return durable && gen != g.bumpedGen, gen
}

// bumped records a committed advance of the sequence to seq, made for the
// check gen. The caller holds writeMu.
func (g *guard) bumped(seq, gen int64) {
	g.bumpedGen = gen
	g.saw(seq)
}

// saw records a sequence committed by this store.
func (g *guard) saw(seq int64) {
	for {
		last := g.seq.Load()
		if seq <= last || g.seq.CompareAndSwap(last, seq) {
			return
		}
	}
}

// walGone reports that the WAL the store's writer keeps open is no longer
// the file at its path. A writer closed meanwhile (after which SQLite may
// delete the WAL as its last connection closes) makes the answer no: the
// file is compared only when the same record was in force before and
// after the look.
func (g *guard) walGone(path string) bool {
	before := g.wal.Load()
	if before == nil {
		return false
	}
	info, err := os.Stat(path + "-wal")
	gone := err != nil || !os.SameFile(info, *before)
	return gone && g.wal.Load() == before
}

// fenced refuses calls while a fence set by Rearm lasts.
type fenced struct {
	end time.Time
	seq int64 // the sequence the fenced step read or wrote
}

func (f fenced) Error() string {
	return "sqlitestore: replay store unavailable: the table is fenced after a loss until " + f.end.UTC().Format(time.RFC3339)
}
func (f fenced) Unwrap() error      { return ErrUnavailable }
func (f fenced) RetryAt() time.Time { return f.end }

// persist records the highest sequence seen in the sidecar, when it grew.
func (g *guard) persist(s *Store) {
	g.mu.Lock()
	defer g.mu.Unlock()
	seq := g.seq.Load()
	boot := ""
	if s.normal {
		boot = s.boot
	}
	if seq <= g.persisted && boot == g.persistedBoot || g.sticky.Load() || g.incarnation == "" {
		return
	}
	if err := writeSidecar(sidecarFile(s.path, s.table), sidecar{g.incarnation, seq, boot}, false); err != nil {
		s.log.Warn("sqlitestore: recording the database's sequence beside it failed; a restored older copy made now would not be found", "path", sidecarFile(s.path, s.table), "err", err)
		return
	}
	g.persisted, g.persistedBoot = seq, boot
}

// settle is Close's last step in WAL mode: a checkpoint (FULL), which
// syncs the WAL before it copies it and the database file after, puts
// every acknowledged commit in the database file. When it completes, the
// link to the WAL kept for New's look (see walLost) is removed: a WAL
// deleted from now on takes none of this store's commits, and a later
// clean close of the file, after which another program may change the
// pages the WAL held, is never judged a loss. For synchronous=NORMAL the
// sidecar's Boot is cleared too, so a later crash of the machine is not
// taken for a loss. Without a complete checkpoint both stay. Another
// process's store on the file sets them again at its next check. The
// caller holds writeMu.
func (g *guard) settle(s *Store) {
	normal := s.normal && s.boot != ""
	if !s.wal && !normal || g.sticky.Load() || g.incarnation == "" {
		return
	}
	ctx, cancel := s.bound(context.Background())
	defer cancel()
	// PASSIVE waits for no other connection (a reader's snapshot leaves
	// the checkpoint incomplete, and the link stays); NORMAL's Boot is
	// worth the wait of FULL.
	mode := "PASSIVE"
	if normal {
		mode = "FULL"
	}
	var busy, log, done int
	err := s.db.QueryRowContext(ctx, `PRAGMA main.wal_checkpoint(`+mode+`)`).Scan(&busy, &log, &done)
	if err != nil && isIOError(err) {
		// As after the writer's I/O errors (writer.go): the pages of
		// earlier checkpoints may be off the disk too.
		s.log.Warn("sqlitestore: at Close, the checkpoint failed with an I/O error: rewriting the database (VACUUM) and checkpointing it before the store lets go", "table", unquote(s.table), "err", err)
		busy, log, done, err = s.rewrite(ctx)
		if err == nil && (busy != 0 || done != log) {
			err = errors.New("the checkpoint after the rewrite could not copy the whole WAL (another connection reads)")
		}
		if err != nil {
			s.log.Error("sqlitestore: at Close, after an I/O error, rewriting the database and checkpointing it failed: pages SQLite had copied from the WAL may be missing from the disk, and a crash of the machine may then lose acknowledged claims", "table", unquote(s.table), "err", err)
			return
		}
	}
	if err != nil || busy != 0 || done != log {
		if !normal {
			s.log.Info("sqlitestore: at Close, a checkpoint could not copy the whole WAL (another connection reads, or it failed): the store's link to it stays, and the next New judges it", "table", unquote(s.table), "err", err)
		}
		if normal {
			s.log.Warn("sqlitestore: at Close, the checkpoint that puts the commits of synchronous=NORMAL on the disk did not finish: New refuses after a crash of the machine until Rearm", "table", unquote(s.table), "err", err)
		}
		return
	}
	if err := os.Remove(s.walLink); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("sqlitestore: at Close, removing the link to the WAL failed: New may take a later change of its pages for a loss", "path", s.walLink, "err", err)
	}
	if !normal {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	file := sidecarFile(s.path, s.table)
	c := sidecar{g.incarnation, g.seq.Load(), ""}
	if old, ok, err := readSidecar(file); err == nil && ok && old.Incarnation == c.Incarnation {
		c.Seq = max(c.Seq, old.Seq)
	}
	if err := writeSidecar(file, c, true); err != nil {
		s.log.Warn("sqlitestore: at Close, clearing the sidecar's mark of synchronous=NORMAL failed: New refuses after a crash of the machine until Rearm", "path", file, "err", err)
		return
	}
	g.persisted, g.persistedBoot = c.Seq, ""
}

// rewrite is settle's repair on a connection of the pool, for Close: every
// page rewritten (VACUUM), then a checkpoint (TRUNCATE) that copies them
// into the database file and syncs it. It returns the checkpoint's
// result. ctx bounds the wait for the connection; the statements run to
// their end (SQLite's busy_timeout bounds their waits for other
// connections).
func (s *Store) rewrite(ctx context.Context) (busy, log, done int, err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	defer conn.Close()
	ctx = context.WithoutCancel(ctx)
	if _, err := conn.ExecContext(ctx, `VACUUM`); err != nil {
		return 0, 0, 0, err
	}
	err = conn.QueryRowContext(ctx, `PRAGMA main.wal_checkpoint(TRUNCATE)`).Scan(&busy, &log, &done)
	return busy, log, done, err
}

// checker repeats New's checks every RecheckInterval.
func (s *Store) checker(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.recheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.check(ctx)
		}
	}
}

// check is one recheck: the settings of a pooled connection, the marker,
// the file's identity, no trigger on the store's table; then the sidecar.
func (s *Store) check(parent context.Context) {
	s.writeback(parent)
	ctx, cancel := s.bound(parent)
	defer cancel()
	err := s.checkOnce(ctx)
	if parent.Err() != nil {
		return
	}
	g := &s.guard
	switch {
	case err != nil:
		g.refuse(err)
	default:
		g.clear()
		g.persist(s)
	}
	// The next durable commit advances the sequence, so a copy taken
	// before it is found older than the database (see wantBump).
	g.gen.Add(1)
	msg := ""
	if err := g.refused(); err != nil {
		msg = err.Error()
	}
	if msg != g.logged {
		if msg != "" {
			s.log.Warn("sqlitestore: refusing every call", "table", unquote(s.table), "reason", msg)
			s.observe(Event{Kind: EventRefusing, Reason: g.refused()})
		} else {
			s.log.Info("sqlitestore: the checks hold again; serving", "table", unquote(s.table))
			s.observe(Event{Kind: EventServing})
		}
		g.logged = msg
	}
}

func (s *Store) checkOnce(ctx context.Context) error {
	// The files first: a connection's reads may fail once they are gone.
	info, err := os.Stat(s.path)
	if err != nil || !os.SameFile(info, s.guard.info) {
		return fmt.Errorf("%w: the database file at %s was deleted or replaced while the store ran", ErrForgotten, s.path)
	}
	if s.guard.walGone(s.path) {
		return fmt.Errorf("%w: the WAL file %s-wal was deleted or replaced while the store ran (the commits in it are gone)", ErrForgotten, s.path)
	}
	s.relinkWAL()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return unavailable(ctx, err)
	}
	defer conn.Close()
	set, err := readSettings(ctx, conn)
	if err != nil {
		return err
	}
	if err := set.check(s.allowNormal); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if set.path != s.path {
		return fmt.Errorf("%w: a connection of the pool opened %s, not %s", ErrUnavailable, set.path, s.path)
	}
	last := s.guard.seq.Load()
	inc, _, seq, err := s.marker(connQuerier{ctx, conn})
	switch {
	case errors.Is(err, errNoTable):
		return fmt.Errorf("%w: the table %s was dropped", ErrForgotten, unquote(s.table))
	case err != nil:
		return unavailable(ctx, err)
	case inc != s.guard.incarnation:
		return fmt.Errorf("%w: the table's marker is of another incarnation (re-armed, or another database): build a new Store", ErrForgotten)
	case seq < last:
		return fmt.Errorf("%w: the database's sequence went back from %d to %d (the file was replaced by an older copy)", ErrForgotten, last, seq)
	}
	if n, err := s.triggers(connQuerier{ctx, conn}, false); err != nil {
		return unavailable(ctx, err)
	} else if n != 0 {
		return fmt.Errorf("%w: %w", ErrUnavailable, errTriggered)
	}
	return nil
}
