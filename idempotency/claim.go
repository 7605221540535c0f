package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// statusCompleted is a key's stored status once its response is saved.
const statusCompleted = "completed"

// keyedRequest is a request carrying an idempotency key, with its scope and
// fingerprint, and the id of the claim it makes.
type keyedRequest struct {
	route       string
	principal   string
	key         string
	fingerprint []byte
	claimID     uuid.UUID
}

// verdict is what the claim step decides for a request.
type verdict int

const (
	// verdictRun: the request holds the key; run the handler.
	verdictRun verdict = iota
	// verdictBusy: another request holds the key; answer 409.
	verdictBusy
	// verdictMismatch: the key was used for a different request; answer 422.
	verdictMismatch
	// verdictReplay: the key completed; replay the stored response.
	verdictReplay
)

// claim decides, inside tx, what to do with req, and claims the key when the
// handler is to run. The claim is visible to others once tx commits; until
// then the advisory lock taken here turns concurrent claimants away (409)
// without making them wait.
func (m *Middleware) claim(ctx context.Context, tx pgx.Tx, req *keyedRequest) (verdict, *dbsqlc.WharfIdempotencyKey, error) {
	q := dbsqlc.New(tx)
	locked, err := q.IdempotencyKeyTryLock(ctx, dbsqlc.IdempotencyKeyTryLockParams{
		LockClass: lockClass,
		LockKey:   lockKey(req.route, req.principal, req.key),
	})
	if err != nil {
		return 0, nil, fmt.Errorf("lock key: %w", err)
	}
	if !locked {
		return verdictBusy, nil, nil
	}

	// Every time compared here is the database's clock (see the query):
	// nodes whose clocks disagree still agree on which keys are in progress,
	// timed out or expired.
	var previous *uuid.UUID
	found, err := q.IdempotencyKeyGetForUpdate(ctx, dbsqlc.IdempotencyKeyGetForUpdateParams{
		Route: req.route, Principal: req.principal, IdempotencyKey: req.key,
		InProgressTimeoutSeconds: m.conf.InProgressTimeout.Seconds(),
	})
	row := &found.WharfIdempotencyKey
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return 0, nil, fmt.Errorf("read key: %w", err)
	case found.Expired:
		// Expired but not yet pruned: as if never used.
		previous = &row.ClaimID
	case !bytes.Equal(row.Fingerprint, req.fingerprint):
		return verdictMismatch, nil, nil
	case row.Status == statusCompleted:
		return verdictReplay, row, nil
	case !found.ClaimTimedOut:
		return verdictBusy, nil, nil
	default:
		m.conf.Logger.WarnContext(ctx, "idempotency: taking over a key left in progress past InProgressTimeout",
			"route", req.route, "key", req.key, "claimed_at", row.ClaimedAt)
		previous = &row.ClaimID
	}

	n, err := q.IdempotencyKeyClaim(ctx, dbsqlc.IdempotencyKeyClaimParams{
		Route:               req.route,
		Principal:           req.principal,
		IdempotencyKey:      req.key,
		Fingerprint:         req.fingerprint,
		ClaimID:             req.claimID,
		KeyRetentionSeconds: m.conf.KeyRetention.Seconds(),
		PreviousClaimID:     previous,
	})
	if err != nil {
		return 0, nil, fmt.Errorf("claim key: %w", err)
	}
	if n == 0 {
		// Changed since it was read: only a writer that skipped the lock
		// could do that. Someone else has it.
		return verdictBusy, nil, nil
	}
	return verdictRun, nil, nil
}

// claimAlone runs claim in a short transaction of its own, committing the
// in_progress key before the handler runs (non-transactional mode).
func (m *Middleware) claimAlone(ctx context.Context, req *keyedRequest) (v verdict, row *dbsqlc.WharfIdempotencyKey, err error) {
	err = pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		v, row, err = m.claim(ctx, tx, req)
		return err
	})
	return v, row, err
}

// complete records rec as the outcome of req's claim and reports whether the
// claim was still req's to complete.
func (m *Middleware) complete(ctx context.Context, db dbsqlc.DBTX, req *keyedRequest, rec *recorder) (bool, error) {
	headers, err := rec.storedHeaders(m.conf.ReplayHeaders)
	if err != nil {
		return false, fmt.Errorf("encode headers: %w", err)
	}
	// nil stores NULL: body not kept. An empty body is stored empty.
	var body []byte
	if limit := m.conf.MaxStoredResponseBody; !rec.overflowed && (limit < 0 || rec.size <= limit) {
		body = append([]byte{}, rec.body...)
	} else {
		// Past the buffer, size is what was written so far.
		m.conf.Logger.WarnContext(ctx, "idempotency: response body larger than MaxStoredResponseBody; replays will carry no body",
			"route", req.route, "key", req.key, "size", rec.size, "streamed", rec.overflowed, "limit", limit)
	}
	n, err := dbsqlc.New(db).IdempotencyKeyComplete(ctx, dbsqlc.IdempotencyKeyCompleteParams{
		ResponseStatus:  int32(rec.finish()),
		ResponseHeaders: headers,
		ResponseBody:    body,
		Route:           req.route,
		Principal:       req.principal,
		IdempotencyKey:  req.key,
		ClaimID:         req.claimID,
	})
	if err != nil {
		return false, fmt.Errorf("complete key: %w", err)
	}
	return n == 1, nil
}

// completeTries and completeBackoff bound how hard completeRetrying tries to
// record a non-transactional outcome: a brief database hiccup should not
// leave the key in progress, where it would let a retry after
// InProgressTimeout run the handler again.
const completeTries = 3

var completeBackoff = [completeTries - 1]time.Duration{50 * time.Millisecond, 250 * time.Millisecond}

// completeRetrying is complete on the pool (non-transactional mode), tried up
// to completeTries times while it fails and ctx allows.
func (m *Middleware) completeRetrying(ctx context.Context, req *keyedRequest, rec *recorder) (bool, error) {
	for try := 0; ; try++ {
		kept, err := m.complete(ctx, m.pool, req, rec)
		if err == nil || try == completeTries-1 {
			return kept, err
		}
		m.conf.Logger.WarnContext(ctx, "idempotency: recording the response failed; retrying",
			"route", req.route, "key", req.key, "try", try+1, "error", err)
		select {
		case <-ctx.Done():
			return false, err
		case <-time.After(completeBackoff[try]):
		}
	}
}

// release deletes req's in_progress claim so that a retry runs the handler
// (non-transactional mode, after a panic or a 5xx). It outlives a cancelled
// request: a key left claimed would answer 409 until InProgressTimeout.
func (m *Middleware) release(ctx context.Context, req *keyedRequest) {
	ctx, cancel := finishContext(ctx)
	defer cancel()
	_, err := dbsqlc.New(m.pool).IdempotencyKeyRelease(ctx, dbsqlc.IdempotencyKeyReleaseParams{
		Route: req.route, Principal: req.principal, IdempotencyKey: req.key, ClaimID: req.claimID,
	})
	if err != nil {
		m.conf.Logger.ErrorContext(ctx, "idempotency: could not release key; it stays in progress until InProgressTimeout",
			"route", req.route, "key", req.key, "error", err)
	}
}

// answer writes the response for a verdict other than verdictRun and
// reports whether it did.
func (m *Middleware) answer(ctx context.Context, w http.ResponseWriter, v verdict, row *dbsqlc.WharfIdempotencyKey) bool {
	switch v {
	case verdictBusy:
		m.requests.Add(ctx, 1, m.byOutcome.Of("in_progress"))
		writeInProgress(w, m.conf.RetryAfter)
	case verdictMismatch:
		m.requests.Add(ctx, 1, m.byOutcome.Of("conflict"))
		writeError(w, http.StatusUnprocessableEntity, msgMismatch)
	case verdictReplay:
		m.requests.Add(ctx, 1, m.byOutcome.Of("replayed"))
		m.replay(w, row)
	default:
		m.requests.Add(ctx, 1, m.byOutcome.Of("new"))
		return false
	}
	return true
}

// replay writes a completed key's stored response.
func (m *Middleware) replay(w http.ResponseWriter, row *dbsqlc.WharfIdempotencyKey) {
	var headers map[string][]string
	if row.ResponseStatus == nil || json.Unmarshal(row.ResponseHeaders, &headers) != nil {
		m.conf.Logger.Error("idempotency: stored response unreadable", "route", row.Route, "key", row.IdempotencyKey)
		writeError(w, http.StatusInternalServerError, msgCorrupt)
		return
	}
	dst := w.Header()
	for name, values := range headers {
		dst[name] = values
	}
	dst.Set(HeaderReplayed, "true")
	if row.ResponseBody == nil {
		dst.Set(HeaderBodyOmitted, "true")
	}
	w.WriteHeader(int(*row.ResponseStatus))
	_, _ = w.Write(row.ResponseBody)
}
