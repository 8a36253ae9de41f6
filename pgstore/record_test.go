package pgstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestReadRecord pins what the Reader contract leaves to pgstore: the
// read writes nothing and locks no row, reads a Work's ID busy, and
// refuses a table that forgot its claims.
func TestReadRecord(t *testing.T) {
	t.Run("writes nothing and locks no row", func(t *testing.T) {
		pool := needServer(t).pool(t)
		s := storeOn(t, pool)
		l := mustRecord(t, s, "leased", time.Minute, []byte("fp"))
		d := mustRecord(t, s, "done", time.Minute, []byte("fp"))
		must(t, s.ConfirmRecord(bg(), "done", d.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result")))
		for _, id := range []string{"free", "leased", "done"} {
			// The read's statement in a read-only transaction, which
			// refuses any write and any row lock; a transaction that
			// wrote or locked a row would have a transaction ID.
			tx := mustBegin(t, pool)
			mustExec(t, tx, `SET TRANSACTION READ ONLY`)
			key, legacy := s.keys(id)
			lock := uint64(s.idLock(key))
			var marker, held bool
			var state string
			var wait int64
			var fp, result []byte
			wantIs(t, tx.QueryRow(bg(), s.readSQL, key, legacy, int64(lock>>32), int64(lock&0xffffffff)).Scan(&marker, &state, &wait, &fp, &result, &held), nil, "the read statement of %q in a read-only transaction: %v", id)
			var xid *int64
			must(t, tx.QueryRow(bg(), `SELECT txid_current_if_assigned()`).Scan(&xid))
			if xid != nil {
				t.Fatalf("the read statement of %q assigned a transaction ID (%d): it wrote or locked a row", id, *xid)
			}
			tx.Rollback(bg())
			before, _ := rowOf(t, s, id)
			must(t, errOf(s.ReadRecord(bg(), id)))
			if after, _ := rowOf(t, s, id); after.xmin != before.xmin {
				t.Fatalf("ReadRecord(%q) wrote the row", id)
			}
		}
		wantIs(t, s.RenewLease(bg(), "leased", l.Token, time.Minute), nil, "RenewLease after the reads: %v")
	})

	t.Run("a Work's ID reads busy, and done once it commits", func(t *testing.T) {
		s := newTestStore(t)
		w := acquireWork(t, s, "w", []byte("fp"))
		if r, err := s.ReadRecord(bg(), "w"); err != nil || r.State != replay.LeaseBusy || r.Fingerprint != nil {
			t.Fatalf("ReadRecord of a Work's ID = %+v, %v; want busy without a fingerprint", r, err)
		}
		// The read took nothing: the Work's request, sent again, finds it
		// in flight (the same request), not another.
		if r, err := s.AcquireRecord(bg(), "w", time.Minute, []byte("fp")); err != nil || busyAnswer(t, r, []byte("fp")) != "same" {
			t.Fatalf("AcquireRecord of a Work's ID after a read = %+v, %v; want busy, the same request", r, err)
		}
		must(t, w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("result")))
		if r, err := s.ReadRecord(bg(), "w"); err != nil || r.State != replay.LeaseDone || string(r.Result) != "result" {
			t.Fatalf("ReadRecord after the Work's commit = %+v, %v; want done with its result", r, err)
		}
	})

	t.Run("refuses a table that forgot its claims or is fenced", func(t *testing.T) {
		pool := needServer(t).pool(t)
		name := migratedTable(t, pool)
		s := storeOn(t, pool, func(o *Options) { o.Table = name })
		mustClaim(t, s, "a", time.Now().Add(time.Hour))
		refuses := func(why string) {
			t.Helper()
			for _, id := range []string{"a", "never-claimed"} {
				if r, err := s.ReadRecord(bg(), id); !errors.Is(err, ErrForgotten) || !errors.Is(err, ErrUnavailable) || r.State != 0 {
					t.Fatalf("ReadRecord(%q) %s = %+v, %v; want ErrForgotten", id, why, r, err)
				}
			}
		}
		mustExec(t, pool, `DELETE FROM "`+name+`" WHERE key = `+markerSQL)
		refuses("without the marker row")
		must(t, Rearm(bg(), pool, name, time.Hour))
		refuses("before the fence")
		mustExec(t, pool, `UPDATE "`+name+`" SET until = now() WHERE key = `+markerSQL)
		if r, err := s.ReadRecord(bg(), "a"); err != nil || r.State != replay.LeaseDone {
			t.Fatalf("ReadRecord after the fence = %+v, %v; want done", r, err)
		}
	})
}

// recordRow is id's row as the table holds it: its state, fingerprint and
// result (nil when NULL), and xmin (the transaction that wrote it last).
type recordRow struct {
	state               string
	fingerprint, result []byte
	xmin                string
}

func rowOf(t *testing.T, s *Store, id string) (recordRow, bool) {
	t.Helper()
	var r recordRow
	err := s.pool.QueryRow(bg(), `SELECT state, fingerprint, result, xmin::text FROM `+s.table+` WHERE key = $1`, s.key(id)).Scan(
		&r.state, &r.fingerprint, &r.result, &r.xmin)
	if err != nil {
		return recordRow{}, false
	}
	return r, true
}

// expire moves id's row's until into the past by the database's clock.
func expire(t *testing.T, s *Store, id string) {
	t.Helper()
	mustExec(t, s.pool, `UPDATE `+s.table+` SET until = now() - interval '1 second' WHERE key = $1`, s.key(id))
}

// wantRecord calls AcquireRecord and checks what it reports.
func wantRecord(t *testing.T, s *Store, id string, state replay.LeaseState, fp, result []byte) replay.Record {
	t.Helper()
	r, err := s.AcquireRecord(bg(), id, time.Minute, []byte("asker"))
	if err != nil || r.State != state || !bytes.Equal(r.Fingerprint, fp) || !bytes.Equal(r.Result, result) {
		t.Fatalf("AcquireRecord(%q) = %v %q %d bytes, %v; want %v %q %d bytes", id, r.State, r.Fingerprint, len(r.Result), err, state, fp, len(result))
	}
	return r
}

// TestRecord pins the record steps ([Store.AcquireRecord] and the record's
// confirmation); a forgotten, fenced or rechecking table: TestRenewLease/held
// steps refuse a forgotten, fenced or refusing table.
func TestRecord(t *testing.T) {
	subtests(t, []subtest{
		{"refusals write nothing", recordRefusalsWriteNothing},
		{"earlier holder's record never reported", recordOfAnEarlierHolderIsNeverReported},
		{"edited in the table is refused", recordEditedInTheTableIsRefused},
		{"resend after lost reply is safe", recordResendAfterLostReplyIsSafe},
	})
}

func recordRefusalsWriteNothing(t *testing.T) {
	s := newTestStore(t)
	until := time.Now().Add(time.Hour)
	fp := bytes.Repeat([]byte{0xfe}, replay.MaxFingerprintBytes)
	long := append(bytes.Clone(fp), 0)

	t.Run("AcquireRecord", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			id    string
			lease time.Duration
			fp    []byte
			is    []error
		}{
			{"fingerprint over the limit", "a", time.Minute, long, []error{ErrInvalidClaim, replay.ErrTooLarge}},
			{"zero lease", "a", 0, fp, []error{ErrInvalidClaim, replay.ErrExpired}},
			{"negative lease", "a", -time.Second, fp, []error{ErrInvalidClaim, replay.ErrExpired}},
			{"empty id", "", time.Minute, fp, []error{ErrInvalidClaim}},
			{"id over the limit", strings.Repeat("i", MaxIDBytes+1), time.Minute, fp, []error{ErrInvalidClaim}},
		} {
			r, err := s.AcquireRecord(bg(), tc.id, tc.lease, tc.fp)
			for _, want := range tc.is {
				if !errors.Is(err, want) {
					t.Errorf("%s: AcquireRecord = %+v, %v; want an error matching %v", tc.name, r, err, want)
				}
			}
			if r.State != 0 || r.Token != "" {
				t.Errorf("%s: AcquireRecord reported %+v with its error", tc.name, r)
			}
			if _, ok := rowOf(t, s, tc.id); ok {
				t.Errorf("%s: a row was written", tc.name)
			}
		}
	})

	t.Run("ConfirmRecord", func(t *testing.T) {
		l := mustRecord(t, s, "b", time.Minute, fp)
		before, _ := rowOf(t, s, "b")
		if before.state != "l" || !bytes.Equal(before.fingerprint, fp) || before.result != nil {
			t.Fatalf("the lease's row is %+v; want state l with the fingerprint", before)
		}
		for _, tc := range []struct {
			name       string
			id, token  string
			until      time.Time
			fp, result []byte
			is         []error
		}{
			{"fingerprint over the limit", "b", l.Token, until, long, []byte("r"), []error{ErrInvalidClaim, replay.ErrTooLarge}},
			{"nil result", "b", l.Token, until, fp, nil, []error{ErrInvalidClaim, replay.ErrTooLarge}},
			{"empty result", "b", l.Token, until, fp, []byte{}, []error{ErrInvalidClaim, replay.ErrTooLarge}},
			{"result over the limit", "b", l.Token, until, fp, make([]byte, replay.MaxResultBytes+1), []error{ErrInvalidClaim, replay.ErrTooLarge}},
			{"until past", "b", l.Token, time.Now().Add(-time.Second), fp, []byte("r"), []error{ErrInvalidClaim, replay.ErrExpired}},
			{"until before the year 1", "b", l.Token, time.Time{}.Add(-time.Hour), fp, []byte("r"), []error{ErrInvalidClaim, replay.ErrExpired}},
			{"foreign token", "b", strings.Repeat("0", tokenLen), until, fp, []byte("r"), []error{replay.ErrLeaseLost}},
			{"malformed token", "b", "not a token", until, fp, []byte("r"), []error{replay.ErrLeaseLost}},
			{"empty id", "", l.Token, until, fp, []byte("r"), []error{ErrInvalidClaim}},
			{"id over the limit", strings.Repeat("i", MaxIDBytes+1), l.Token, until, fp, []byte("r"), []error{ErrInvalidClaim}},
		} {
			err := s.ConfirmRecord(bg(), tc.id, tc.token, tc.until, tc.fp, tc.result)
			for _, want := range tc.is {
				if !errors.Is(err, want) {
					t.Errorf("%s: ConfirmRecord = %v; want an error matching %v", tc.name, err, want)
				}
			}
			if after, _ := rowOf(t, s, "b"); after.xmin != before.xmin || after.state != "l" {
				t.Errorf("%s: the lease's row was written (%+v, was %+v)", tc.name, after, before)
			}
		}
		// The limits themselves are accepted, and read back byte for byte.
		result := bytes.Repeat([]byte{0, 0xff, 'x'}, replay.MaxResultBytes/3+1)[:replay.MaxResultBytes]
		must(t, s.ConfirmRecord(bg(), "b", l.Token, until, fp, result))
		wantRecord(t, s, "b", replay.LeaseDone, fp, result)
	})
}

// recordOfAnEarlierHolderIsNeverReported: a row taken over after its
// record expired (by AcquireLease, ConfirmLease or Claim, which carry no
// record) is reported without the earlier holder's fingerprint or result.
func recordOfAnEarlierHolderIsNeverReported(t *testing.T) {
	s := newTestStore(t)
	until := time.Now().Add(time.Hour)
	recorded := func(id string) {
		t.Helper()
		l := mustRecord(t, s, id, time.Minute, []byte("old fp"))
		must(t, s.ConfirmRecord(bg(), id, l.Token, until, []byte("old fp"), []byte("old result")))
		expire(t, s, id)
	}
	t.Run("AcquireLease then ConfirmLease", func(t *testing.T) {
		recorded("a")
		l := mustLease(t, s, "a", time.Minute)
		wantRecord(t, s, "a", replay.LeaseBusy, nil, nil)
		must(t, s.ConfirmLease(bg(), "a", l.Token, until))
		wantRecord(t, s, "a", replay.LeaseDone, nil, nil)
		if row, _ := rowOf(t, s, "a"); row.fingerprint != nil || row.result != nil {
			t.Fatalf("row after ConfirmLease = %+v; want no record", row)
		}
	})
	t.Run("ConfirmLease of an ended lease", func(t *testing.T) {
		l := mustLease(t, s, "b", time.Minute)
		recorded("b2")
		expire(t, s, "b")
		// The lease ended and someone recorded, then that expired too: a
		// late ConfirmLease records afresh, without the record.
		recorded("b")
		must(t, s.ConfirmLease(bg(), "b", l.Token, until))
		wantRecord(t, s, "b", replay.LeaseDone, nil, nil)
	})
	t.Run("Claim", func(t *testing.T) {
		recorded("c")
		mustClaim(t, s, "c", until)
		wantRecord(t, s, "c", replay.LeaseDone, nil, nil)
	})
	t.Run("AcquireRecord", func(t *testing.T) {
		recorded("d")
		wantRecord(t, s, "d", replay.LeaseAcquired, nil, nil)
		if row, _ := rowOf(t, s, "d"); !bytes.Equal(row.fingerprint, []byte("asker")) || row.result != nil {
			t.Fatalf("row after a takeover by AcquireRecord = %+v; want its fingerprint and no result", row)
		}
	})
}

// v2Table creates a table with the SQL of Schema before the record
// columns (pgstore with key layout 2 and without replay.Recorder), and
// rows written as that version wrote them: for each row the ID (under
// prefix), the state and the until (SQL).
func v2Table(t *testing.T, pool *pgxpool.Pool, prefix string, rows ...[3]string) string {
	t.Helper()
	name := uniqueTable(t, pool)
	for _, q := range []string{
		`CREATE TABLE "` + name + `" (
	key   bytea PRIMARY KEY,
	state text NOT NULL CHECK (state IN ('m', 'c', 'l', 'd')),
	token text NOT NULL,
	until timestamptz NOT NULL
) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.05)`,
		`CREATE INDEX "` + name + `_until" ON "` + name + `" (until)`,
		`INSERT INTO "` + name + `" (key, state, token, until) VALUES (decode('0000', 'hex'), 'm', '', '-infinity')`,
	} {
		mustExec(t, pool, q)
	}
	k := &Store{prefix: prefix}
	for _, r := range rows {
		mustExec(t, pool, `INSERT INTO "`+name+`" (key, state, token, until) VALUES ($1, $2, 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', `+r[2]+`)`, k.key(r[0]), r[1])
	}
	return name
}

// confirmV2SQL is ConfirmLease's statement before the record columns: what
// an instance still running that version sends to an upgraded table.
const confirmV2SQL = `WITH m AS (SELECT 1 FROM %[1]s WHERE key = decode('0000', 'hex') AND state = 'm' AND until <= now()),
up AS (
  INSERT INTO %[1]s AS r (key, state, token, until)
  SELECT $1::bytea, 'd', $2::text, $3::timestamptz FROM m WHERE $3::timestamptz > now()
  ON CONFLICT (key) DO UPDATE SET state = 'd', token = excluded.token, until = excluded.until
    WHERE r.until <= now() OR (r.state IN ('l', 'd') AND r.token = excluded.token)
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM m), $3::timestamptz > now(), EXISTS (SELECT 1 FROM up)`

// recordResendAfterLostReplyIsSafe: the reply of each record step is
// lost after the server committed it; the call fails closed, and a resend
// gets the answer the lost call would have had: a new AcquireRecord finds
// the lost lease busy with its fingerprint, and ConfirmRecord resent with
// the same token succeeds and keeps the first record, even when resent
// with other bytes.
func recordResendAfterLostReplyIsSafe(t *testing.T) {
	// s calls through the proxy, r resends straight to the server.
	d, s, r := lossyStores(t)
	until := time.Now().Add(time.Hour)

	lostReply(t, d, "AcquireRecord", func(id string) error { return errOf(s.AcquireRecord(bg(), id, time.Minute, []byte("fp"))) }, func() error {
		l, err := s.AcquireRecord(bg(), "acquire", time.Minute, []byte("lost fp"))
		return refusalErr(l.State != 0, err)
	})
	waitRowState(t, r, "acquire", "l")
	wantRecord(t, r, "acquire", replay.LeaseBusy, []byte("lost fp"), nil)

	l := mustRecord(t, r, "confirm", time.Minute, []byte("fp"))
	lostReply(t, d, "ConfirmRecord", func(id string) error {
		w, err := s.AcquireRecord(bg(), id, time.Minute, []byte("fp"))
		if err != nil {
			return err
		}
		return s.ConfirmRecord(bg(), id, w.Token, until, []byte("fp"), []byte("r"))
	}, func() error {
		return s.ConfirmRecord(bg(), "confirm", l.Token, until, []byte("fp"), []byte("first result"))
	})
	waitRowState(t, r, "confirm", "d")
	wantIs(t, r.ConfirmRecord(bg(), "confirm", l.Token, until, []byte("fp"), []byte("first result")), nil, "resent ConfirmRecord: %v; want nil (its own done row)")
	wantIs(t, r.ConfirmRecord(bg(), "confirm", l.Token, until, []byte("fp"), []byte("other result")), nil, "ConfirmRecord resent with other bytes: %v; want nil")
	wantRecord(t, r, "confirm", replay.LeaseDone, []byte("fp"), []byte("first result"))
}

// testKeys is a fresh keyring that seals a test middleware's records.
func testKeys(t testing.TB) *ctoken.Keyring {
	t.Helper()
	kr, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(t, err)
	return kr
}

// recordEditedInTheTableIsRefused runs the idempotency middleware on a
// Store, records a response, then edits the row's result column with an
// UPDATE (a byte flipped at several places, or cut short): each retry is a
// 500, the handler is not run again, and nothing of the edited record is
// replayed. The column holds the response sealed, never in clear.
func recordEditedInTheTableIsRefused(t *testing.T) {
	pool := needServer(t).pool(t)
	keys := testKeys(t)
	for _, tc := range []struct {
		name string
		edit string // SQL expression of the new result, from result
	}{
		{"untouched", ""},
		{"version byte flipped", "set_byte(result, 0, get_byte(result, 0) # 1)"},
		{"key id byte flipped", "set_byte(result, 2, get_byte(result, 2) # 16)"},
		{"nonce byte flipped", "set_byte(result, 9, get_byte(result, 9) # 1)"},
		{"ciphertext byte flipped", "set_byte(result, length(result) / 2 + 10, get_byte(result, length(result) / 2 + 10) # 128)"},
		{"tag byte flipped", "set_byte(result, length(result) - 1, get_byte(result, length(result) - 1) # 1)"},
		{"truncated by one byte", "substring(result from 1 for length(result) - 1)"},
		{"a byte appended", "result || '\\x00'::bytea"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniquePrefix()
			s := storeOn(t, pool, func(o *Options) { o.Prefix = prefix })
			var runs atomic.Int32
			mw, err := idempotency.New(idempotency.Config{
				Store: s, Keys: keys, Window: time.Hour,
				Caller: func(*http.Request) (string, error) { return "merchant-1", nil },
				Route:  func(*http.Request) string { return "POST /payments" },
			})
			must(t, err)
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Set-Cookie", "session=abc")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"id":"pay_1","amount":100,"card":"4242"}`)
			}))
			post := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Idempotency-Key", `"order-1"`)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			first := post()
			if first.Code != http.StatusCreated || runs.Load() != 1 {
				t.Fatalf("first: %d, runs %d", first.Code, runs.Load())
			}
			id := idempotency.StoreID("merchant-1", "POST /payments", "order-1")
			key := append([]byte{byte(len(prefix) >> 8), byte(len(prefix))}, prefix+id...)
			var stored []byte
			must(t, pool.QueryRow(ctx, `SELECT result FROM `+DefaultTable+` WHERE key = $1`, key).Scan(&stored))
			if len(stored) == 0 || bytes.Contains(stored, []byte("4242")) || bytes.Contains(stored, []byte("application/json")) {
				t.Fatalf("the result column holds %d bytes, or the response in clear", len(stored))
			}
			if tc.edit != "" {
				tag, err := pool.Exec(ctx, `UPDATE `+DefaultTable+` SET result = `+tc.edit+` WHERE key = $1`, key)
				if err != nil || tag.RowsAffected() != 1 {
					t.Fatalf("UPDATE: %v, %v", tag, err)
				}
			}
			w := post()
			if runs.Load() != 1 {
				t.Fatalf("the handler ran again: %d runs", runs.Load())
			}
			if tc.edit == "" {
				if w.Code != http.StatusCreated || w.Body.String() != first.Body.String() || w.Header().Get("Idempotent-Replayed") != "true" || w.Header().Get("Set-Cookie") != "" {
					t.Fatalf("replay: %d %q %v", w.Code, w.Body.String(), w.Header())
				}
				return
			}
			if w.Code != http.StatusInternalServerError || w.Header().Get("Content-Type") != "application/problem+json" ||
				strings.Contains(w.Body.String(), "pay_1") || w.Header().Get("Idempotent-Replayed") != "" {
				t.Fatalf("edited record answered %d %q %v; want a 500 problem", w.Code, w.Body.String(), w.Header())
			}
		})
	}
}
