package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
)

// MaxOrderingKeyLength is the longest ordering key accepted, in characters.
const MaxOrderingKeyLength = 512

// orderingKey returns the ordering key of a request to s: its
// OrderingHeader, else the first of its OrderingFields present in the body
// as a string or number; "" when the source orders nothing or the request
// has no key.
func (s *Source) orderingKey(h http.Header, body parsedBody) string {
	if s.OrderingHeader != "" {
		if v := strings.TrimSpace(h.Get(s.OrderingHeader)); v != "" {
			return storableKey(v)
		}
	}
	for _, field := range s.OrderingFields {
		if v, ok := lookupScalar(body.value, field); ok && v != "" {
			return storableKey(v)
		}
	}
	return ""
}

// storableKey is v, or "sha256:" and its hex SHA-256 when v is too long or
// not storable text: one key still maps to one sequence.
func storableKey(v string) string {
	if validText(v, 1, MaxOrderingKeyLength) {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Skip dead-letters a message that is still to process or failing, on an
// operator's word, with reason as its last error, and deletes its waiting
// job: the later messages of its ordering key then go on. Like any dead
// message it can be replayed (which holds the later ones again, if they
// are still unfinished). It returns an error where errors.Is(err,
// ErrNotFound) is true for an unknown id, and ErrNotSkippable for a
// message already processed or dead.
func (ib *Inbox) Skip(ctx context.Context, id uuid.UUID, reason string) error {
	return ib.txFunc(ctx, func(tx pgx.Tx) error { return ib.SkipTx(ctx, tx, id, reason) })
}

// ErrNotSkippable is returned by Skip for a message that is processed or
// already dead.
var ErrNotSkippable = errors.New("inbox: message is finished; nothing to skip")

// SkipTx is Skip in tx.
func (ib *Inbox) SkipTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, reason string) error {
	q := dbsqlc.New(tx)
	row, err := q.InboxMessageGetByIDForUpdate(ctx, id)
	if err != nil {
		return translate(err)
	}
	text := inboxjob.LastError("skipped by an operator: " + reason)
	skipped, err := q.InboxMessageSkip(ctx, dbsqlc.InboxMessageSkipParams{
		Reason: text, Now: ib.clock(), ReceivedAt: row.ReceivedAt, ID: row.ID,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("inbox: skip message %s (%s): %w", id, row.Status, ErrNotSkippable)
	}
	if err != nil {
		return fmt.Errorf("inbox: skip message %s: %w", id, err)
	}
	if err := ib.ordering.WakeNext(ctx, tx, &skipped); err != nil {
		return err
	}
	if skipped.JobID != nil {
		job, err := ib.river.JobGetTx(ctx, tx, *skipped.JobID)
		switch {
		case errors.Is(err, rivertype.ErrNotFound):
		case err != nil:
			return fmt.Errorf("inbox: skip message %s: look up job: %w", id, err)
		default:
			if err := ib.jobs.Delete(ctx, tx, job); err != nil {
				return err
			}
		}
	}
	return nil
}
