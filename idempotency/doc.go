// Package idempotency is net/http middleware that makes an application's
// own mutating endpoints safe to retry, in the style of Stripe's
// Idempotency-Key header, with keys stored in Postgres beside the
// application's data.
//
// A client that sends a POST and times out cannot know whether it took
// effect. With a key (`Idempotency-Key: <unique value>`) it can simply retry:
// the first request runs the handler and its response is stored; retries of
// the same request get that response again, marked `Idempotent-Replayed:
// true`, and the handler does not run twice.
//
// [New] returns a [Middleware] for a pool, a [PrincipalFunc] (whom a key
// belongs to) and a [Config]; [Middleware.Wrap] wraps each handler to
// protect. In transactional mode a handler writes through [Tx], so its
// writes commit with the key. Keys are read from [HeaderKey]; replays are
// marked with [HeaderReplayed]. [DeleteExpired] prunes expired keys (package
// jobs runs it on a schedule). docs/idempotency.md shows a setup and its
// configuration.
//
// # Response contract
//
//   - Methods not in Config.Methods (default POST, PATCH) pass through.
//   - No key: pass through, or 400 when Config.RequireKey is set. A key that
//     is empty, repeated, longer than MaxKeyLength or not visible ASCII: 400.
//   - A key is scoped by route and principal (Config.Route, PrincipalFunc):
//     the same key on another route or from another principal is another
//     key. No principal: 401. Without a ServeMux pattern the route is the
//     escaped path; one longer than 512 bytes: 414.
//   - First use of a key: the handler runs. Its response is stored (status,
//     Config.ReplayHeaders, body up to Config.MaxStoredResponseBody) when
//     its status is below 500, 4xx included, since those are deterministic —
//     except 408, 425 and 429, which are transient (see below).
//   - Same key, same request (method, path and query, body): the stored
//     response, with `Idempotent-Replayed: true`. When the first response's
//     body was over MaxStoredResponseBody, the replay has its status and
//     ReplayHeaders, an empty body and `Idempotent-Body-Omitted: true`.
//   - Same key, different request: 422.
//   - Same key while the first request is still running: 409 with
//     Retry-After, at once (never queued behind the running handler).
//   - The handler panics or answers 5xx, 408 Request Timeout, 425 Too Early
//     or 429 Too Many Requests: nothing is stored and the key is released
//     (in transactional mode the handler's writes roll back), so a retry
//     runs the handler again. Those answers mean "not now", not a verdict a
//     retry should get back for as long as the key is kept.
//   - Response body over Config.MaxBufferedResponseBody (default 1 MiB):
//     see "Responses are buffered" below.
//   - Request body over Config.MaxRequestBody: 413. The database unreachable,
//     or the outcome not committed: 503, nothing recorded.
//   - Keys expire Config.KeyRetention (default 24 h) after they are claimed;
//     an expired key is as good as new. DeleteExpired prunes them.
//
// Every time the middleware stores or compares (claim, takeover, expiry,
// pruning) is the database's clock, never a node's: nodes whose clocks
// disagree still agree on which keys are in progress and which expired.
//
// Every answer of the middleware's own is JSON, {"error": "…"}.
//
// # Transactional mode
//
// With Config.Transactional the handler runs in a transaction (Tx) that also
// records the key, so the key's completion commits atomically with the
// handler's writes, and rolls back with them. One transaction, on one
// connection, does everything:
//
//  1. pg_try_advisory_xact_lock on a hash of (route, principal, key). A
//     request that does not get it answers 409 straight away: another
//     request with the key is running. The lock is what makes a concurrent
//     duplicate see "in progress" without waiting for the first handler, even
//     though the first request's claim is not committed.
//  2. Read the key FOR UPDATE (in a new statement, so everything the previous
//     holder committed is seen): replay it, answer 422, or claim it by
//     writing it in_progress.
//  3. SAVEPOINT, then the handler, which gets the savepoint as its Tx.
//  4. Status below 500: release the savepoint, mark the key completed with
//     the response, COMMIT, and only then send the response. Otherwise (5xx,
//     panic, commit failure) ROLLBACK.
//
// Because the in_progress claim is never committed on its own, a handler
// killed mid-way leaves nothing behind: if the process dies, Postgres ends
// the transaction when the connection drops, which rolls back the handler's
// writes and the claim and releases the lock, and the next retry runs the
// handler. There is no stuck key to recover and no timeout involved. The
// price is a connection held for the handler's duration, which a handler
// that writes in a transaction holds anyway.
//
// The alternative considered, claiming the key in a short transaction of its
// own and then running the handler in a second one that marks it completed,
// also gives duplicates an immediate 409 (they see the committed in_progress
// row), but a crash between the two leaves a key no one owns, recoverable
// only after a timeout. The advisory lock gives the same immediate 409 with
// nothing to recover. A hash collision between two keys in flight at the
// same moment costs one of them a needless 409, never a duplicate run: the
// key's row, not the lock, decides what runs.
//
// The handler's savepoint behaves as pgx's nested transactions do: Rollback
// undoes the handler's writes (the key stays claimed, so a handler can undo
// and still answer 422), Commit keeps them, and not ending it keeps them
// too. A handler that leaves the transaction failed (a statement errored and
// it did not roll back) but answers below 500 gets 500 instead, and nothing
// is recorded. Handlers must not use the Tx after returning.
//
// # Non-transactional mode
//
// Without Config.Transactional, the claim (same lock, same checks) commits
// in a short transaction before the handler runs, so duplicates see
// in_progress and answer 409; the response is recorded after the handler
// returns, then sent. A 5xx, a transient 4xx or a panic deletes the claim.
// A process that dies mid-handler leaves the key in_progress: retries get
// 409 until Config.InProgressTimeout (default 5 minutes) has passed since
// the claim, by the database's clock, after which a retry of the same request takes the key over and
// runs the handler. The timeout must exceed the handler's longest run, or a
// slow first request and its retry could both run; the default errs long
// because a duplicate effect is worse than a client waiting. KeyRetention
// must exceed the timeout (New refuses a Config where it does not), or a
// key left in progress would expire first and be free at once. A late first
// request cannot overwrite the new claim's outcome: completion and release
// name the claim they belong to.
//
// Recording after the fact cannot be atomic with the handler's own effects.
// Recording is tried three times within a fraction of a second; when it
// still fails, the handler's response is sent anyway and the key stays
// in_progress: retries get 409 until InProgressTimeout, and after it a retry
// runs the handler a second time. Use transactional mode where the
// handler's effects are in the same database.
//
// # Responses are buffered
//
// Nothing reaches the client before the outcome is committed, so a client
// never sees a success that its retry would not replay. Handlers that stream
// (http.Flusher) are not supported; informational (1xx) responses are
// dropped.
//
// The buffer is bounded by Config.MaxBufferedResponseBody (default 1 MiB),
// so a request holds at most that much response in memory. A handler that
// writes more:
//
//   - Non-transactional: its effects have happened, so its answer is sent,
//     whole. As the body crosses the limit the outcome is recorded (the key
//     completed with the status and ReplayHeaders but no body, as past
//     MaxStoredResponseBody; a status that is not stored releases the key),
//     and only then does the response start, the rest streaming as the
//     handler writes it. A retry gets the status and headers with
//     `Idempotent-Body-Omitted: true`, never a truncated body, and never a
//     second run. A handler that panics after that point leaves the key
//     completed: the client got the status, and a truncated body.
//   - Transactional: nothing may be sent before the commit, so the rest
//     cannot be sent at all. Writes past the limit fail with
//     ErrResponseTooLarge, the transaction rolls back (the handler's writes
//     and the key), and the client gets 500: no effect, and a retry runs
//     the handler again. Size the limit above the largest response the
//     handler sends.
package idempotency
