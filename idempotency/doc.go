// Package idempotency makes an HTTP API idempotent with the Idempotency-Key
// header (as Stripe's API uses it, and the expired IETF Internet-Draft
// draft-ietf-httpapi-idempotency-key-header-07 describes): a client sends a unique key with a request, and sends the same
// key when it retries after a timeout; the server runs the operation once
// and answers every retry with the first response.
// Most users need one [Middleware], from [New]: Example_memory is the
// path for one process (its memory store forgets every key at a restart;
// give a durable store — sqlitestore on one machine, redisstore or pgstore
// for a fleet), and Example_wait sets the [Config.Wait] a generic retrying
// client needs, since most do not retry a 409. The pgstore module's
// examples show the transactional mode.
//
// A payments endpoint whose retry gets the first response, the payment
// made once (ExampleNew):
//
//	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
//	if err != nil {
//		log.Fatal(err)
//	}
//	mw, err := idempotency.New(idempotency.Config{
//		Store:  replay.NewMemoryStore(0),                                      // forgets keys at a restart; sqlitestore keeps them
//		Caller: func(*http.Request) (string, error) { return "user:42", nil }, // from your authentication
//		Keys:   keys,                                                          // seals the stored responses
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	payments := 0
//	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//		payments++
//		w.WriteHeader(http.StatusCreated)
//		fmt.Fprintf(w, `{"id":"pay_%d"}`, payments)
//	}))
//
//	for range 2 { // the request, then the client's retry with the same key
//		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
//		r.Header.Set("Content-Type", "application/json")
//		r.Header.Set("Idempotency-Key", `"order-1"`)
//		w := httptest.NewRecorder()
//		h.ServeHTTP(w, r)
//		fmt.Println(w.Code, w.Body, "replayed:", w.Header().Get("Idempotent-Replayed") == "true")
//	}
//	fmt.Println("payments made:", payments)
//
// A [Middleware] from [New] wraps handlers ([Middleware.Wrap]). It keeps
// keys, request fingerprints and responses in a [replay.Recorder] — the
// in-process [replay.MemoryStore], the sqlitestore module's on one
// machine, or a store shared by a fleet from the redisstore or pgstore
// module — so its guarantees hold across instances and, with those
// stores, through the store faults docs/idempotency.md lists.
//
// # What it guarantees
//
// For a covered request (a method of [Config.Methods]) with a valid key, a
// caller from [Config.Caller] and a route from [Config.Route]:
//
//   - The handler runs at most once at a time per (caller, route, key), and
//     once a response is recorded, never again for the [Config.Window]:
//     every retry with the same request gets the recorded status, the
//     headers named by [Config.ReplayHeaders] and the body byte for byte,
//     plus the header "Idempotent-Replayed: true", without the handler
//     running.
//   - The response is recorded in the same atomic store step that ends the
//     attempt's lease ([replay.Recorder.ConfirmRecord]), before the client
//     sees it: a crash between the handler's return and the record means
//     the key runs again (once its lease ends), never that a retry gets a
//     response that was not the handler's.
//   - Two callers' keys, or one key on two routes, never meet: the store
//     ID is a hash of all three ([StoreID]), so the store never holds the
//     caller or the key in clear.
//   - The same key with a different request — method, path, query, content
//     coding, body, and for a body that is not JSON its media type
//     ([Fingerprint]; for JSON bodies member order and white space do not
//     count) — is refused with 422, whether the first request is still
//     running or done.
//   - The store holds no response in clear: every stored response is
//     sealed with [Config.Keys] and bound to its store ID and request
//     fingerprint (see "Stored records" below). A record edited in the
//     store, moved to another key or request, or sealed under a key no
//     longer in the ring is refused with 500, never replayed, and the
//     handler is not run again.
//   - A replay writes only the headers [Config.ReplayHeaders] names now,
//     never a session, authentication or hop-by-hop header, whatever the
//     record holds.
//   - When the store cannot decide, the request is refused (503) and the
//     handler does not run: it fails closed.
//
// # Statuses
//
// The middleware answers with a problem+json body (RFC 9457, a fixed
// detail per case that never holds the key, the caller or the body):
//
//	400  the key header is missing on a route with [Config.Required],
//	     repeated, neither one structured-field string (RFC 8941) nor one
//	     bare key ([ParseKey]), empty, or over [Config.MaxKeyBytes]; or the
//	     body is unreadable ([ErrKey], [ErrBodyUnreadable])
//	401  [Config.Caller] returned an error or "" ([ErrNoCaller]), with
//	     WWW-Authenticate: [Config.Challenge]
//	409  a request with the key is running (with [Config.Wait], still
//	     running when the wait is over); Retry-After is the seconds such a
//	     run is likely to need yet: the 90th percentile of the route's
//	     newest recorded runs less the time this one has run, at least 1
//	     and at most its lease's remainder; the lease's remainder (at
//	     least 1) before the route has a recorded run ([ErrInProgress])
//	413  the body is over [Config.MaxRequestBytes]; nothing is claimed
//	     ([ErrBodyTooLarge])
//	422  the key was used with a different request ([ErrMismatch])
//	500  the key is done but its response cannot be replayed: the store
//	     holds none for it, it does not open (edited, moved, or sealed
//	     under a key not in [Config.Keys]) or decode, or it was too large
//	     to store ([ErrRecord], logged at Error); the handler is not run
//	     again; or the handler given to Wrap is an [http.TimeoutHandler]
//	     outside [Config.Transactional] (every covered request)
//	503  the store failed ([ErrStore]); Retry-After is the seconds until
//	     the store's refusal ends when the store says ([replay.RetryAt]:
//	     a fenced shard's end; at most [MaxFenceRetryAfter], the detail
//	     and the Warn log giving the end), else [Config.RetryAfter]; none for a
//	     refusal only an operator can lift ([replay.ErrConfig]: the
//	     problem detail says so);
//	     or the handler returned nothing after its deadline (key released);
//	     or, with [Config.Transactional], the handler's transaction could
//	     not begin (key released, handler not run) or its commit failed
//	     (lease lost: the handler's response is not sent; or rolled back
//	     by the store, [replay.ErrRolledBack]: nothing kept, the key
//	     released); or, of type [ProblemOutcomeUnknown], the commit's
//	     outcome is unknown ([ErrOutcomeUnknown]: the handler's response
//	     is not sent, the key is not released, and a retry with the same
//	     key after Retry-After learns the outcome); or, of that type too,
//	     without Retry-After and replayed, the handler aborted after it
//	     began its response (see below): the key answers so until it
//	     expires
//
// and otherwise with the handler's own response (the first time) or the
// recorded one with "Idempotent-Replayed: true" (every retry).
//
// The key is sent either as the draft defines it, a structured-field
// string ("8e03978e-…"), or bare (8e03978e-…), as stripe-go and most
// clients send it: both spellings are the same key ([ParseKey]).
//
// With [Config.Wait], a request that finds its key running waits for the
// first request instead of getting 409 at once: it gets the recorded
// response as a replay, or, if the first request released the key, runs
// the handler itself as the retry. Requests of
// other methods, and covered requests without the header when the route
// does not require it, go to the handler untouched.
//
// # When the key is released
//
// The handler's response is buffered (up to [Config.MaxResponseBytes])
// and its status decides:
//
//   - 2xx, 3xx, 4xx (409 Conflict included: the handler decided) and 5xx
//     other than 503 are recorded and then sent: a handler that began may
//     have acted before it failed, so its 500 is replayed, as Stripe does
//     (with [Config.Transactional], a 5xx rolls its writes back and
//     releases the key instead);
//   - 408, 423, 425, 429 and 503 say the request was not processed: the
//     key is released (so the retry runs the handler again) and the
//     response is sent;
//   - a handler that panics (with [http.ErrAbortHandler] too), or ends
//     its goroutine with runtime.Goexit, before it wrote a status, or
//     after it wrote one of the statuses above that release, releases the
//     key; after it wrote a status that is recorded it may have acted, so
//     the key is never released: a complete response (its Content-Length
//     written in full, or 204 or 304) is recorded; any other was cut off,
//     and the key is recorded with a 503 of type [ProblemOutcomeUnknown],
//     replayed to every retry (logged at Error). The first client gets
//     nothing: the panic goes on, and net/http breaks the connection;
//   - a handler that returns without writing anything after its own
//     context's deadline releases the key, and the client gets 503 with a
//     Retry-After of [Config.RetryAfter] (never an empty 200 recorded);
//     before its deadline it is an empty 200, recorded.
//
// The client going away changes none of this: the handler's context does
// not end with the client's request, so a handler that took effect
// finishes, its response is recorded, and the client's retry gets it.
//
// A retry status over [Config.MaxResponseBytes] is streamed, and the key
// released only once the handler has returned: never while it runs.
//
// A response over [Config.MaxResponseBytes] (or whose replayed headers are
// over [MaxStoredHeaderBytes]) is not stored: the key is recorded as done
// with a marker, the client gets the handler's response as it is written,
// the Logger is told at Error level, and a retry gets 500 — never a
// response that was not the handler's, and never a second run.
//
// When the store fails after the handler ran, the handler's response is
// still sent: a record is retried with backoff until the lease expires,
// then logged (Error) and observed as a store failure, and the key runs
// again after its lease ends; a failed release leaves the key busy (409)
// until its lease ends. A store that refuses the response for its size or
// its byte budget ([replay.ErrTooLarge], [replay.ErrFull]) is the
// exception: the key is recorded as done without a response, so a retry
// gets 500 and the handler never runs twice.
//
// # What a handler must do
//
// Every releasing outcome above lets a retry run the handler again. So a
// handler may answer 408, 423, 425, 429 or 503, panic before it writes a
// status, or return without a response after its deadline, only when its
// operation had no effect
// (or it undid it, or, with [Config.Transactional], its writes were all
// in the transaction, which is then rolled back); once the operation
// began, answer its result (2xx), a 4xx or a 500, which are recorded. A
// 4xx such as 401, 403 or 404 is recorded for [Config.Window] like any
// other: a retry with the same key gets it again even after its cause is
// fixed. Answer such a 4xx only when the operation did nothing, so that
// the corrected request, a new one, may carry a new key.
//
// The key is leased ([replay.Recorder.AcquireRecord]) under the request's
// values but not its cancellation, within a quarter of [Config.Lease]: a
// client that leaves before it is asked is answered 503 and nothing is
// asked; one that leaves while it is asked gets the lease taken, and the
// handler runs, as when it leaves just after.
//
// The handler's context (r.Context()) keeps the request's values but not
// its cancellation or deadline: a client that times out, or a server
// that closes the connection, does not cancel it, so a handler that
// charged and then writes its receipt with r.Context() does not fail
// half-way because the client left. Its only deadline is the middleware's
// own, three quarters of [Config.Lease] after the key was leased: the
// lease's fence; the rest of the lease is for recording. [Config.Lease]
// is therefore the handler's timeout. There is no lease renewal: a
// handler that works past its deadline may outlive its lease, and a retry
// may then take the key and run beside it. Check the context before each
// side effect and start none after the deadline.
//
// Put a timeout such as [http.TimeoutHandler] outside Wrap, never inside:
// outside, it answers the client 503 when it fires while the handler goes
// on to its own deadline, and the response is recorded for the retry.
// Inside, it would answer 503 while its handler still runs, the 503 would
// release the key, and the retry would run the handler beside itself.
// Wrap cannot see when that inner handler ends, so, outside
// [Config.Transactional], Wrap refuses an [http.TimeoutHandler] it is
// given: every covered request is answered 500 and logged at Error, from
// the first request on (and Wrap logs it at Error once). Wrap does not
// panic, as it does not for a zero [Middleware] or a nil handler: the
// package never panics on its input, and the first test that sends a
// covered request fails all the same. (Only a TimeoutHandler given to
// Wrap itself is seen; one behind another wrapper is not.) With
// [Config.Transactional] it is safe, as far as the handler's writes go
// through the transaction: the 503 rolls the transaction back before the
// key is released, and the transaction refuses every statement after.
//
// # Transactional mode
//
// With [Config.Transactional] and a store that is a [replay.Transactor]
// (the pgstore and sqlitestore modules), the middleware opens a transaction once the key
// is leased ([replay.Transactor.BeginWork]) and puts it in the handler's
// context, where the store's accessor finds it (pgstore.TxFrom,
// sqlitestore.TxFrom); with a
// store that is also a [replay.WorkAcquirer], the key is leased inside
// that transaction ([replay.WorkAcquirer.AcquireWork]), so that nothing
// is committed before the handler's writes and their record. A
// recorded status commits the handler's writes together with the fence
// check of the lease and the response ([replay.Work.Commit]), and only
// then is the response sent. A releasing outcome rolls the writes back
// before the key is released. A lease found lost at the commit keeps
// nothing (the retry gets the other holder's outcome); a commit whose
// outcome is unknown is not retried (the transaction is gone) and does
// not release the key: a retry gets the committed response, or, once the
// lease ends, runs. A commit the store rolled back for a reason it knows
// ([replay.ErrRolledBack]: a statement of the handler had failed, the
// record was refused) kept nothing and releases the key at once. All are
// answered 503 and logged at Error: the unknown outcome with its own
// problem type ([ProblemOutcomeUnknown]) and a Retry-After after which the
// store can tell the outcome ([Config.RetryAfter] when the lease was taken
// in the transaction, else the seconds until the lease ends), the others
// with a Retry-After of [Config.RetryAfter]; the handler's response is
// never sent unless it was committed. The whole response is held in
// memory until the commit, even one over [Config.MaxResponseBytes]
// (which is then committed as too large to replay).
//
// What runs how often, per key:
//
//	store                 guarantee
//	memory, Redis         at most once per lease: the handler must check
//	                      its context before each effect
//	PostgreSQL, with      the handler's writes in the transaction commit
//	Transactional         exactly once, with the record
//	PostgreSQL, without   as memory and Redis
//
// Effects outside the transaction (a call to a payment provider, a
// message sent) stay "at most once per lease" in every mode.
//
// # Stored records
//
// What [replay.Recorder.ConfirmRecord] receives as the result is a sealed
// record:
//
//	record = version (1 byte, 1) || key id (4 bytes) || nonce (24 bytes) || ciphertext || tag (16 bytes)
//
// the [EncodeResponse] form of the response (or of the too-large marker)
// encrypted with XAES-256-GCM (C2SP) under the subkey
// HKDF-SHA256(key, salt = 32 zero bytes, info = "ctoken.idempotency record
// xaes-256-gcm key") of the primary key of [Config.Keys], with a random
// nonce, and associated data
//
//	version || key id || len(store ID) (8 bytes, big-endian) || store ID || request fingerprint
//
// The key id is the one every ctoken token carries: the first 4 bytes of
// HKDF-SHA256(key, salt = 32 zero bytes, info = "ctoken.key-id"). A replay
// checks the record's length (45 bytes to [replay.MaxResultBytes]) before
// anything else, then its version, opens it with the ring's key its key id
// names (a previous key of the ring opens what it sealed: rotation), and
// decodes the plaintext strictly ([DecodeResponse]). An unknown key id, a
// changed byte anywhere, another store ID or fingerprint, or a cut record
// is [ErrRecord]: 500, logged at Error with a fixed message, the handler
// not run. Sealing adds 45 bytes to a record; [MaxStoredResponseBytes]
// leaves room for them. idempotency/testdata/sealed.json holds known
// answers (written by sealed.py from this description).
//
// # Observability
//
// Every request with a key is one [observe.Event] of kind
// [observe.KindIdempotency]: first run recorded → [observe.OutcomeProcessed];
// replayed → [observe.OutcomeDuplicate]; 409 → [observe.OutcomeInProgress];
// key released → [observe.OutcomeReleased]; mismatch and the other
// refusals (an [http.TimeoutHandler] inside Wrap included) →
// [observe.OutcomeRefused]; a store failure, or a done key
// without a usable response → [observe.OutcomeStoreFailure]; each with
// its [observe.RefusalReason] ([ReasonOf]) and the store's latency. A
// request that waited ([Config.Wait]) is one event too: the outcome it
// ended with, and the latency of all its store calls.
package idempotency
