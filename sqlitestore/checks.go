package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// synchronous levels as PRAGMA synchronous reports them.
const (
	syncOff    = 0
	syncNormal = 1
	syncFull   = 2
	syncExtra  = 3
)

var syncNames = map[int]string{syncOff: "OFF", syncNormal: "NORMAL", syncFull: "FULL", syncExtra: "EXTRA"}

// settings are a connection's settings that decide what a commit survives.
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

// faults names each setting that loses claims or cannot work, with its fix.
func (c settings) faults(allowNormal bool) []string {
	const how = " (set it on every connection, in the DSN: see the package documentation)"
	var faults []string
	if c.path == "" {
		faults = append(faults, "an in-memory or temporary database forgets every claim when it closes: open a file")
	}
	// An in-memory database's journal is MEMORY whatever the DSN asks.
	ownJournal := c.path == "" && c.journal == "memory"
	if !ownJournal && (c.journal == "off" || c.journal == "memory") {
		faults = append(faults, fmt.Sprintf("journal_mode=%s loses or corrupts commits in a crash: use WAL"+how, strings.ToUpper(c.journal)))
	}
	switch {
	case c.synchronous == syncOff:
		faults = append(faults, "synchronous=OFF acknowledges commits that a crash of the machine loses: use FULL"+how)
	case c.journal == "delete" && c.synchronous == syncFull && !ownJournal:
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

// checkLocks refuses a database opened without locks: with conn holding
// the write lock, a second connection must be refused it.
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

// configFaults names every fault in one ErrConfig, fixed in one pass.
func configFaults(faults []string) error {
	switch len(faults) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: %s", ErrConfig, faults[0])
	}
	return fmt.Errorf("%w: %d configuration faults: %s", ErrConfig, len(faults), strings.Join(faults, "; "))
}

// guard keeps the evidence that the database holds what was acknowledged.
type guard struct {
	place       place // where a refusal is lifted, set before open
	incarnation string
	seq         atomic.Int64 // the highest sequence seen
	info        os.FileInfo  // the database file as New found it
	// wal is the WAL file while the writer's connection holds it open.
	wal     atomic.Pointer[os.FileInfo]
	refusal atomic.Pointer[error]
	sticky  atomic.Bool // a loss: only Rearm and a new Store lift it
	// filed: a checkpoint copied New's first commit into the database
	// file; until then every call refuses (fileMarker). fileTarget is the
	// WAL's length in frames at the first try.
	filed      atomic.Bool
	fileTarget int

	mu        sync.Mutex // persist, recordLoss
	persisted sidecar
	logged    string
	log       *slog.Logger
}

func (g *guard) refused() error {
	if p := g.refusal.Load(); p != nil {
		return *p
	}
	return nil
}

// refuse makes every call return err, which it returns naming the command
// that lifts a loss; a loss is never lifted by a check.
func (g *guard) refuse(err error) error {
	lifted := g.place.lift(err)
	if errors.Is(err, ErrForgotten) {
		if !g.sticky.Swap(true) {
			g.recordLoss(err)
		}
	} else if g.sticky.Load() {
		return lifted
	}
	g.refusal.Store(&lifted)
	return lifted
}

// recordLoss makes a loss the running store found durable: the sidecar
// records it (Lost), so every New and ctoken-sqlite status refuse until
// Rearm, whatever the file says by then (judgeFiles). A sidecar of
// another incarnation (re-armed meanwhile) is left as it is.
func (g *guard) recordLoss(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	file := sidecarFile(g.place.path, g.place.table)
	old, ok, rerr := readSidecar(file)
	if rerr != nil || !ok || old.Incarnation != g.incarnation || g.incarnation == "" || old.Lost != "" {
		return
	}
	old.Seq = max(old.Seq, g.seq.Load())
	old.Lost = time.Now().UTC().Format(time.RFC3339) + ": " + strings.TrimPrefix(err.Error(), ErrForgotten.Error()+": ")
	if werr := writeSidecar(file, old, true); werr != nil {
		g.log.Error("sqlitestore: recording the loss in the sidecar failed: the next New judges the files as they are", "path", file, "err", werr)
	}
}

func (g *guard) clear() {
	if !g.sticky.Load() {
		g.refusal.Store(nil)
	}
}

// sidecar is what the store records beside the database file.
type sidecar struct {
	Incarnation string `json:"incarnation"`
	Seq         int64  `json:"seq"`
	Boot        string `json:"boot,omitempty"`   // while a store runs with synchronous=NORMAL
	Repair      string `json:"repair,omitempty"` // while a repair is unfinished
	Lost        string `json:"lost,omitempty"`   // a loss a running store found: when, and what
	// Filed: the database file itself holds the table's marker at a
	// sequence above 0 (a checkpoint copied a store's first commit).
	Filed bool `json:"filed,omitempty"`
}

// bootID is the kernel's boot id (Linux), "" where there is none.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// sidecarFile is ".<name>-ctoken", plus ".<table>" for another table than
// DefaultTable, beside the database: hidden, so "rm replay.db-*" leaves it.
func sidecarFile(path, table string) string {
	name := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"-ctoken")
	if t := unquote(table); t != DefaultTable {
		return name + "." + t
	}
	return name
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

// writeSidecar records c atomically. Unless force, it merges what file
// holds of the incarnation (another process may have seen more).
func writeSidecar(file string, c sidecar, force bool) error {
	if !force {
		if old, ok, err := readSidecar(file); err == nil && ok && old.Incarnation == c.Incarnation {
			c.Seq = max(c.Seq, old.Seq)
			c.Boot = cmp.Or(c.Boot, old.Boot)
			c.Repair = cmp.Or(c.Repair, old.Repair)
			c.Lost = cmp.Or(c.Lost, old.Lost)
			c.Filed = c.Filed || old.Filed
			if c == old {
				return nil
			}
		}
	}
	b, _ := json.Marshal(c)
	return writeSynced(file, append(b, '\n'))
}

// writeSynced writes b to file atomically, synced with its directory.
func writeSynced(file string, b []byte) error {
	dir := filepath.Dir(file)
	f, err := os.CreateTemp(dir, filepath.Base(file)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err = f.Write(b); err == nil {
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
	syncDir(dir)
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// A clean stop leaves a record beside the database (stopFile): its
// file, incarnation and sequence once the WAL was copied whole into it
// and no other store's WAL was kept beside it. Every New removes it
// before its first write, so while it matches the file, no store wrote
// since: should the sidecar be deleted, it proves nothing was lost.
type stopRecord struct {
	Incarnation string `json:"incarnation"`
	Seq         int64  `json:"seq"`
	File        string `json:"file"` // fileID of the database
}

// stopFile is the clean stop's record: the sidecar's name and
// "-stopped" (a table name holds no '-').
func stopFile(path, table string) string { return sidecarFile(path, table) + "-stopped" }

// recordStop leaves the clean stop's record, unless another store's WAL
// is kept beside the database (one runs, or crashed).
func (g *guard) recordStop(s *Store) {
	if links, err := withPrefix(walLinkPrefix(s.path, s.table)); err != nil || len(links) > 0 {
		return
	}
	info, err := os.Stat(s.path)
	if err != nil || !os.SameFile(info, g.info) || fileID(info) == "" {
		return
	}
	b, _ := json.Marshal(stopRecord{g.incarnation, g.seq.Load(), fileID(info)})
	if err := writeSynced(stopFile(s.path, s.table), append(b, '\n')); err != nil {
		s.log.Warn("sqlitestore: at Close, recording the clean stop failed: should the sidecar be deleted, nothing proves that nothing was lost", "path", stopFile(s.path, s.table), "err", err)
	}
}

// removeStop removes the clean stop's record, synced, before a store writes.
func removeStop(path, table string) error {
	file := stopFile(path, table)
	if err := os.Remove(file); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	syncDir(filepath.Dir(file))
	return nil
}

// cleanStop reports whether the database at p.path, of incarnation inc at
// sequence seq, is the file a store last stopped cleanly, with no store
// since: its record matches, and no WAL is kept beside it.
func cleanStop(p place, inc string, seq int64) bool {
	b, err := os.ReadFile(stopFile(p.path, p.table))
	if err != nil {
		return false
	}
	var r stopRecord
	if json.Unmarshal(b, &r) != nil || r.Incarnation != inc || r.Seq != seq || r.File == "" {
		return false
	}
	if links, err := withPrefix(walLinkPrefix(p.path, p.table)); err != nil || len(links) > 0 {
		return false
	}
	info, err := os.Stat(p.path)
	return err == nil && fileID(info) == r.File
}

// marker reads the marker row's incarnation, fence and sequence.
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

// open is New's check, then one write; repair: one was unfinished.
//
// Both run in one write transaction: every store writes its sidecar
// before its first commit and records in it only sequences committed, so
// with no commit between the reads, the sidecar and the marker agree.
func (g *guard) open(ctx context.Context, s *Store, conn *sql.Conn) (repair bool, err error) {
	q := connQuerier{ctx, conn}
	if _, err := q.exec(`BEGIN IMMEDIATE`); err != nil {
		return false, unavailable(ctx, err)
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		}
	}()
	side, haveSide, inc, seq, err := judgeFiles(ctx, q, g.place, s.boot, s.now().UnixNano(), true)
	if err != nil {
		return false, err
	}
	if !haveSide {
		// A table no store ran on (judgeFiles): its sidecar before its
		// first write.
		side = sidecar{Incarnation: inc, Seq: seq}
		if err := writeSidecar(sidecarFile(s.path, s.table), side, false); err != nil {
			return false, fmt.Errorf("%w: recording the incarnation beside the database: %w", ErrUnavailable, err)
		}
	}
	g.incarnation = inc
	g.seq.Store(seq)
	g.persisted = side
	if g.info, err = os.Stat(s.path); err != nil {
		return false, unavailable(ctx, err)
	}
	// The clean stop's record goes before the first write.
	if err := removeStop(s.path, s.table); err != nil {
		return false, fmt.Errorf("%w: removing the record of the last clean stop: %w", ErrUnavailable, err)
	}
	// One write: a read-only file or a full disk fails here.
	seq, err = g.step(q, s, s.now().UnixNano(), true)
	if f := new(fenced); errors.As(err, f) {
		// Rearm's fence: the store is built and refuses until it ends.
		seq, err = f.seq, nil
	}
	if err == nil {
		_, err = q.exec(`COMMIT`)
	}
	if err != nil {
		if errors.Is(err, ErrForgotten) {
			return false, err
		}
		return false, unavailable(ctx, fmt.Errorf("a first write: %w", err))
	}
	g.saw(seq)
	g.refusal.Store(nil)
	g.fileTarget, g.persisted.Filed = -1, side.Filed
	g.filed.Store(side.Filed)
	if err := s.fileMarker(q); err != nil {
		if isIOError(err) {
			return false, unavailable(ctx, err)
		}
		g.refusal.Store(&err) // the checker tries again
	}
	g.persist(s)
	s.relinkWAL()
	return haveSide && side.Repair != "", nil
}

// fileMarker makes the database file itself record that a store ran on
// its table before the store answers a call. In WAL mode New's first
// write, the marker's advance, is in the WAL alone until a checkpoint
// copies it: the file copied alone (cp replay.db other/), or a crash and
// then its WAL deleted, would read as a table no store ran on and be
// served. So unless the sidecar says a checkpoint did (Filed), New
// checkpoints (PASSIVE) on its connection, and until a checkpoint has
// copied every frame up to New's commit (the WAL's length at the first
// try; a WAL shorter since was restarted, which only a whole checkpoint
// allows) every call refuses and each check tries again. SQLite syncs the
// database file before it counts a frame copied. The sidecar records it.
func (s *Store) fileMarker(q querier) error {
	g := &s.guard
	if !s.wal || g.filed.Load() {
		g.filed.Store(true)
		return nil
	}
	var busy, log, done int
	if err := q.queryRow(`PRAGMA main.wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err != nil {
		return fmt.Errorf("%w: the checkpoint that records in the database file that a store ran on it: %w", ErrUnavailable, err)
	}
	if g.fileTarget < 0 {
		g.fileTarget = log
	}
	if busy == 0 && (done >= g.fileTarget || log < g.fileTarget) {
		g.filed.Store(true)
		return nil
	}
	return fmt.Errorf("%w: the database file does not record yet that a store ran on it: a reader holds back the checkpoint that copies the store's first commit into it (%d of the WAL's %d frames copied); the store serves once a check's checkpoint copies it", ErrUnavailable, done, log)
}

// judgeFiles is New's judgement, before its first write, of the table in
// the database at p.path (read through q) and of the hidden files beside
// it, on the machine's boot at now. remove: drop each kept WAL the
// database holds (New); else it changes nothing (Inspect). A table a
// store ran on (its marker's sequence above Migrate's 0) needs its
// sidecar: without it the file's history is unknown.
func judgeFiles(ctx context.Context, q querier, p place, boot string, now int64, remove bool) (side sidecar, haveSide bool, inc string, seq int64, err error) {
	side, haveSide, err = readSidecar(sidecarFile(p.path, p.table))
	if err != nil {
		return side, false, "", 0, err
	}
	if err := lostRefusal(p.path, side); err != nil {
		// Before any read of the file, which may be another's by now.
		return side, haveSide, "", 0, err
	}
	inc, _, seq, err = (&Store{table: p.table}).marker(q)
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrForgotten}, args...)...)
	}
	switch {
	case errors.Is(err, errNoTable) && haveSide:
		err = refuse("the table %s is missing from %s, which a store used before (the file was deleted or replaced)", unquote(p.table), p.path)
	case errors.Is(err, errNoTable):
		err = fmt.Errorf("%w: the table %s does not exist: run Migrate", ErrConfig, unquote(p.table))
	case err != nil:
		err = unavailable(ctx, err)
	case !haveSide && seq > 0 && cleanStop(p, inc, seq):
		err = nothingLost{refuse("a store ran on %s (its marker's sequence is %d) but its sidecar %s is missing (deleted, or the file moved without its hidden files); %s records the last store's clean stop of this very file at this sequence, and no store wrote since", p.path, seq, sidecarFile(p.path, p.table), stopFile(p.path, p.table))}
	case !haveSide && seq > 0:
		err = refuse("%s", noSidecar(p.path, p.table, seq))
	case haveSide && side.Incarnation != inc:
		err = refuse("%s is not the database the store used at this path before (deleted and made again, or replaced)", p.path)
	case haveSide && seq < side.Seq:
		err = refuse("%s is older than the database the store last saw at this path (sequence %d, last seen %d: a restored backup or copy)", p.path, seq, side.Seq)
	case haveSide && side.Boot != "" && side.Boot != boot:
		err = refuse("the machine went down while a store with synchronous=NORMAL (Options.AllowNormalSync) ran on %s, which acknowledges commits before they are on the disk: its last acknowledged claims may be gone", p.path)
	case haveSide && side.Repair != "" && (side.Repair != boot || boot == ""):
		err = refuse("the machine went down before the store's repair after an I/O error of %s finished: pages of acknowledged claims may be gone", p.path)
	default:
		err = judgeWALLinks(q, p.path, p.table, inc, seq, now, remove)
	}
	return side, haveSide, inc, seq, err
}

// checkTable reads the table and its index whole (PRAGMA quick_check),
// for Rearm: a malformed table is not re-armed.
func checkTable(q querier, p place) error {
	var first string
	if err := q.queryRow(`PRAGMA main.quick_check(` + unquote(p.table) + `)`).Scan(&first); err != nil {
		return malformed(err, p.path, p.table)
	}
	if first != "ok" {
		return malformed(fmt.Errorf("PRAGMA quick_check finds the table %s malformed: %s", unquote(p.table), first), p.path, p.table)
	}
	return nil
}

// lostRefusal is the refusal of a loss a running store found (side.Lost,
// recorded by guard.recordLoss), nil without one.
func lostRefusal(path string, side sidecar) error {
	if side.Lost == "" {
		return nil
	}
	return fmt.Errorf("%w: a store running on %s found a loss, recorded in its sidecar, at %s; stop every program on the file; if the loss is the database file deleted or replaced, delete %s-wal and %s-shm (the replaced file's: SQLite would apply that WAL to this file); rearm refuses a table SQLite finds malformed: then put a good copy in its place", ErrForgotten, path, side.Lost, path, path)
}

// noSidecar says why a table a store ran on, at sequence seq, without
// its sidecar is refused.
func noSidecar(path, table string, seq int64) string {
	return fmt.Sprintf("a store ran on %s (its marker's sequence is %d) but its sidecar %s is missing, so what happened to the file since cannot be judged (moved, copied or renamed without its hidden files, which the glob %s* leaves behind, or the sidecar deleted), and an older copy looks the same: if the hidden files are where it came from, put them back beside it, renamed for its name (New then judges it, and serves when nothing was lost); else re-arm it", path, seq, sidecarFile(path, table), filepath.Base(path))
}

// step opens every write transaction, checking the marker. A durable one
// (bump) advances the sequence (wal.go) and returns a lower bound of it;
// others leave it, so a power cut that takes them back is no older copy.
func (g *guard) step(q querier, s *Store, now int64, bump bool) (int64, error) {
	if bump {
		// The common case in one statement.
		last := g.seq.Load()
		res, err := q.exec(`UPDATE `+s.table+` SET seq = seq + 1 WHERE key = `+markerKey+` AND state = 'm' AND token = ? AND until <= ? AND seq >= ?`, g.incarnation, now, last)
		if err != nil {
			return 0, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return last + 1, err
		}
	}
	var seq, fence int64
	err := q.queryRow(`SELECT seq, until FROM `+s.table+` WHERE key = `+markerKey+` AND state = 'm' AND token = ?`, g.incarnation).Scan(&seq, &fence)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, g.missing()
	}
	if err != nil {
		return 0, err
	}
	if err := g.judge(seq, fence, now); err != nil || !bump {
		return 0, err
	}
	return 0, fmt.Errorf("the marker's update changed no row, and the marker holds (sequence %d)", seq)
}

func (g *guard) missing() error {
	return g.refuse(fmt.Errorf("%w: the table's marker row is missing or was re-armed (the table was emptied, or the file replaced)", ErrForgotten))
}

func (g *guard) judge(seq, fence, now int64) error {
	return g.judgeSince(seq, fence, now, g.seq.Load())
}

// judgeSince is judge against last, the highest sequence seen before the
// snapshot that read seq was taken (a read outside the writer's lock).
func (g *guard) judgeSince(seq, fence, now, last int64) error {
	if fence > now {
		return fenced{time.Unix(0, fence), seq}
	}
	if seq < last {
		return g.refuse(fmt.Errorf("%w: the database's sequence went back from %d to %d (the file was replaced by an older copy)", ErrForgotten, last, seq))
	}
	return nil
}

func (g *guard) saw(seq int64) {
	for {
		last := g.seq.Load()
		if seq <= last || g.seq.CompareAndSwap(last, seq) {
			return
		}
	}
}

// walGone reports that the WAL the writer holds is no longer at its path;
// no when the writer closed meanwhile, after which SQLite may delete it.
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
	seq int64 // the sequence the fenced step read
}

func (f fenced) Error() string {
	return "sqlitestore: replay store unavailable: the table is fenced after a loss until " + f.end.UTC().Format(time.RFC3339)
}
func (f fenced) Unwrap() error      { return ErrUnavailable }
func (f fenced) RetryAt() time.Time { return f.end }

// persist records the sidecar when it changed.
func (g *guard) persist(s *Store) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := sidecar{Incarnation: g.incarnation, Seq: g.seq.Load(), Filed: g.filed.Load()}
	if s.normal {
		c.Boot = s.boot
	}
	if s.repairing.Load() {
		c.Repair = cmp.Or(s.boot, "unknown")
	}
	if c.Seq <= g.persisted.Seq && c.Boot == g.persisted.Boot && c.Repair == g.persisted.Repair && c.Filed == g.persisted.Filed || g.sticky.Load() || g.incarnation == "" {
		return
	}
	if err := writeSidecar(sidecarFile(s.path, s.table), c, false); err != nil {
		s.log.Warn("sqlitestore: recording the database's sequence beside it failed; a restored older copy made now would not be found", "path", sidecarFile(s.path, s.table), "err", err)
		return
	}
	g.persisted = c
}

// clearMarks records the sidecar without Repair and, unless keepBoot, Boot.
func (g *guard) clearMarks(s *Store, keepBoot bool, what string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	file := sidecarFile(s.path, s.table)
	c := sidecar{Incarnation: g.incarnation, Seq: g.seq.Load(), Filed: g.filed.Load()}
	if keepBoot {
		c.Boot = s.boot
	}
	if old, ok, err := readSidecar(file); err == nil && ok && old.Incarnation == c.Incarnation {
		c.Seq, c.Lost, c.Filed = max(c.Seq, old.Seq), old.Lost, c.Filed || old.Filed
	}
	if err := writeSidecar(file, c, true); err != nil {
		s.log.Warn("sqlitestore: "+what+": updating the sidecar failed: New refuses after a crash of the machine until Rearm", "path", file, "err", err)
		return
	}
	g.persisted = c
}

// settle is Close's checkpoint: when it copies the whole WAL, the WAL
// link and NORMAL's Boot go. The caller holds writeMu.
func (g *guard) settle(s *Store) {
	normal := s.normal && s.boot != ""
	if !s.wal && !normal || g.sticky.Load() || g.incarnation == "" || s.repairing.Load() {
		return
	}
	// A pool's connection opened since the file was replaced would copy
	// the WAL of the file the store ran on into the new one: no
	// checkpoint then, and the loss recorded (guard.refuse).
	if err := s.checkFiles(); err != nil {
		g.refuse(err)
		return
	}
	ctx, cancel := s.bound(context.Background())
	defer cancel()
	// PASSIVE waits for no reader; NORMAL's Boot is worth FULL's wait.
	mode := "PASSIVE"
	if normal {
		mode = "FULL"
	}
	var busy, log, done int
	err := s.db.QueryRowContext(ctx, `PRAGMA main.wal_checkpoint(`+mode+`)`).Scan(&busy, &log, &done)
	if err != nil && isIOError(err) && s.wal {
		s.repairing.Store(true)
		g.persist(s)
		s.log.Error("sqlitestore: at Close, the checkpoint failed with an I/O error: the next New rewrites the database file before it serves", "table", unquote(s.table), "err", err)
		return
	}
	if err != nil || busy != 0 || done != log {
		if normal {
			s.log.Warn("sqlitestore: at Close, the checkpoint that puts the commits of synchronous=NORMAL on the disk did not finish: New refuses after a crash of the machine until Rearm", "table", unquote(s.table), "err", err)
		}
		return
	}
	if err := os.Remove(s.walLink); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("sqlitestore: at Close, removing the link to the WAL failed", "path", s.walLink, "err", err)
	} else if s.wal {
		g.recordStop(s)
	}
	if normal {
		g.clearMarks(s, false, "at Close, clearing the mark of synchronous=NORMAL")
	}
}

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

func (s *Store) check(parent context.Context) {
	s.lookForWritebackFailure()
	ctx, cancel := s.bound(parent)
	defer cancel()
	err := malformed(s.checkOnce(ctx), s.path, s.table)
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
	msg := ""
	if err := g.refused(); err != nil {
		msg = err.Error()
	}
	if msg != g.logged {
		if msg != "" {
			s.log.Warn("sqlitestore: refusing every call", "table", unquote(s.table), "reason", msg)
			s.observe(replay.Event{Kind: replay.EventRefusing, Reason: g.refused()})
		} else {
			s.log.Info("sqlitestore: the checks hold again; serving", "table", unquote(s.table))
			s.observe(replay.Event{Kind: replay.EventServing})
		}
		g.logged = msg
	}
}

// checkFiles reports a loss when the database file at the path, or its
// WAL, is no longer the one the store opened.
func (s *Store) checkFiles() error {
	info, err := os.Stat(s.path)
	if err != nil || !os.SameFile(info, s.guard.info) {
		return fmt.Errorf("%w: the database file at %s was deleted or replaced while the store ran", ErrForgotten, s.path)
	}
	if s.guard.walGone(s.path) {
		return fmt.Errorf("%w: the WAL file %s-wal was deleted or replaced while the store ran (the commits in it are gone)", ErrForgotten, s.path)
	}
	return nil
}

func (s *Store) checkOnce(ctx context.Context) error {
	// The files first: reads may fail once they are gone.
	if err := s.checkFiles(); err != nil {
		return err
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
	if err := configFaults(set.faults(s.allowNormal)); err != nil {
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
		return fmt.Errorf("%w: the table's marker is of another incarnation (re-armed, or another database)", ErrForgotten)
	case seq < last:
		return fmt.Errorf("%w: the database's sequence went back from %d to %d (the file was replaced by an older copy)", ErrForgotten, last, seq)
	}
	s.guard.saw(seq)
	if n, err := s.triggers(connQuerier{ctx, conn}, false); err != nil {
		return unavailable(ctx, err)
	} else if n != 0 {
		return fmt.Errorf("%w: %w", ErrUnavailable, errTriggered)
	}
	if err := s.fileMarker(connQuerier{ctx, conn}); err != nil {
		s.sawIOError(err)
		return err
	}
	return nil
}
