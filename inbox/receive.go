package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// ErrInvalidMessage is wrapped by Receive's error when the message cannot be
// stored as given (an empty or overlong source or event id, say). Nothing is
// written.
var ErrInvalidMessage = errors.New("inbox: invalid message")

// Incoming is a message to receive.
type Incoming struct {
	// Source names the sender; keys are scoped by it. 1–128 characters.
	Source string
	// EventID is the sender's id for the event, shared by every delivery of
	// it. 1–MaxEventIDLength characters.
	EventID string
	// EventType selects the handler; may be empty.
	EventType string
	// Header holds the request headers to keep with the message.
	// Credentials (Authorization, Cookie, Proxy-Authorization) are dropped.
	Header http.Header
	// Body is the raw body, stored byte for byte.
	Body []byte
	// PayloadHash fingerprints the payload, to spot an event id reused for a
	// different payload. Defaults to the SHA-256 of Body.
	PayloadHash []byte
}

// Result says what Receive did.
type Result struct {
	// MessageID identifies the stored message: the new one, or for a
	// duplicate the one first received.
	MessageID uuid.UUID
	// Duplicate is true when the event had been received before; nothing
	// new was stored or enqueued.
	Duplicate bool
	// ReceivedAt is when the event was first received.
	ReceivedAt time.Time
	// PayloadMismatch is true for a duplicate whose payload differs from the
	// first receipt's. The mismatch is counted on the dedupe key.
	PayloadMismatch bool
	// JobID is the River job that will process a new message; 0 for a
	// duplicate.
	JobID int64
}

// processArgs are the River job args of a message: row ids only, never the
// payload. ReceivedAt is part of the message's key (the partition key).
type processArgs struct {
	MessageID  uuid.UUID `json:"message_id"`
	ReceivedAt time.Time `json:"received_at"`
}

// Kind is the River job kind of inbox processing.
func (processArgs) Kind() string { return "wharf_inbox_process" }

// Receive claims msg's dedupe key, stores the message and inserts its River
// job, all in tx: the caller's commit makes the receipt durable and its
// rollback leaves no trace. When the key was already claimed no message or
// job is written and the result is a duplicate carrying the first receipt's
// id and time; the key row is locked until tx ends (concurrent duplicates
// queue on it) and counts a payload mismatch.
//
// An error wrapping ErrInvalidMessage means msg was rejected before anything
// was written. Any other error comes from the database; River's insert
// aborts tx on failure, so roll back.
func (ib *Inbox) Receive(ctx context.Context, tx pgx.Tx, msg Incoming) (*Result, error) {
	if err := msg.validate(); err != nil {
		return nil, err
	}
	hash := msg.PayloadHash
	if len(hash) == 0 {
		sum := sha256.Sum256(msg.Body)
		hash = sum[:]
	}
	headers, err := json.Marshal(storedHeaders(msg.Header))
	if err != nil {
		return nil, fmt.Errorf("inbox: encode headers: %w", err)
	}
	now := ib.clock()
	if err := ib.partitions.Ensure(ctx, tx, messagesTable, now); err != nil {
		return nil, err
	}

	proposed, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("inbox: message id: %w", err)
	}
	key, err := dbsqlc.New(tx).InboxKeyClaim(ctx, dbsqlc.InboxKeyClaimParams{
		Source:      msg.Source,
		EventID:     msg.EventID,
		PayloadHash: hash,
		MessageID:   proposed,
		ReceivedAt:  now,
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: claim key: %w", err)
	}
	if key.MessageID != proposed {
		return &Result{
			MessageID:       key.MessageID,
			Duplicate:       true,
			ReceivedAt:      key.ReceivedAt,
			PayloadMismatch: string(key.PayloadHash) != string(hash),
		}, nil
	}

	job, err := ib.river.InsertTx(ctx, tx, processArgs{MessageID: proposed, ReceivedAt: now}, ib.insertOpts())
	if err != nil {
		return nil, fmt.Errorf("inbox: insert job: %w", err)
	}
	err = dbsqlc.New(tx).InboxMessageInsert(ctx, dbsqlc.InboxMessageInsertParams{
		ID:          proposed,
		ReceivedAt:  now,
		Source:      msg.Source,
		EventID:     msg.EventID,
		EventType:   msg.EventType,
		Headers:     headers,
		Body:        msg.Body,
		PayloadHash: hash,
		JobID:       &job.Job.ID,
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: store message: %w", err)
	}
	return &Result{MessageID: proposed, ReceivedAt: now, JobID: job.Job.ID}, nil
}

func (ib *Inbox) insertOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: ib.queue, MaxAttempts: ib.maxAttempts}
}

func (m *Incoming) validate() error {
	if !validText(m.Source, 1, 128) {
		return fmt.Errorf("%w: source must be 1–128 characters of UTF-8 without NUL", ErrInvalidMessage)
	}
	if !validText(m.EventID, 1, MaxEventIDLength) {
		return fmt.Errorf("%w: event id must be 1–%d characters of UTF-8 without NUL", ErrInvalidMessage, MaxEventIDLength)
	}
	if !validText(m.EventType, 0, MaxEventTypeLength) {
		return fmt.Errorf("%w: event type must be at most %d characters of UTF-8 without NUL", ErrInvalidMessage, MaxEventTypeLength)
	}
	return nil
}

// validText reports whether s can be stored in a text column and has
// between min and max characters.
func validText(s string, min, max int) bool {
	n := utf8.RuneCountInString(s)
	return n >= min && n <= max && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// credentialHeaders are never stored: they authenticate the sender to a
// proxy or the app, and are secrets in their own right.
var credentialHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization"}

func storedHeaders(h http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		return http.Header{}
	}
	for _, name := range credentialHeaders {
		out.Del(name)
	}
	return out
}
