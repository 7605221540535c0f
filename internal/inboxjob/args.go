package inboxjob

import (
	"time"

	"github.com/google/uuid"
)

// ProcessArgs are the River job args of a message: row ids only, never the
// payload. ReceivedAt is part of the message's key (the partition key).
type ProcessArgs struct {
	MessageID  uuid.UUID `json:"message_id"`  // the message's id
	ReceivedAt time.Time `json:"received_at"` // the message's partition key
	// NotBefore, when set, is when the message is to run: the job snoozes
	// until then. A handler's snooze in a batch is retried alone on a job
	// inserted available with its time here, rather than scheduled for it:
	// River makes a scheduled job available only at its scheduler's next
	// run (every 5 s), where a snooze or a worker's retry due sooner stays
	// available.
	NotBefore *time.Time `json:"not_before,omitempty"`
	// FailedInBatch marks the retry of a message whose handler failed in a
	// batch, whose transaction recorded that attempt. The job's first run
	// runs no handler: it returns that failure to River, which schedules
	// the retry by the client's RetryPolicy (and its first attempt stands
	// for the batch's, so that MaxAttempts counts handler runs).
	FailedInBatch bool `json:"failed_in_batch,omitempty"`
	// Unordered says that the message has no ordering key: the job may
	// share its transaction with batch jobs (see process's merge).
	Unordered bool `json:"unordered,omitempty"`
}

// Kind is the River job kind of inbox processing.
func (ProcessArgs) Kind() string { return "wharf_inbox_process" }

// BatchArgs are the River job args of the messages of one receive batch:
// row ids only. The messages share ReceivedAt.
type BatchArgs struct {
	ReceivedAt time.Time   `json:"received_at"` // the messages' partition key
	MessageIDs []uuid.UUID `json:"message_ids"` // the messages' ids
	// Waits counts how many times these messages, waiting for earlier ones
	// of their ordering keys that were being processed, were handed over to a
	// new batch job (see process's handOver).
	Waits int `json:"waits,omitempty"`
	// Unordered says that none of the messages has an ordering key: the
	// job may share its transaction with other such jobs (see process's
	// merge).
	Unordered bool `json:"unordered,omitempty"`
}

// Kind is the River job kind of batched inbox processing.
func (BatchArgs) Kind() string { return "wharf_inbox_process_batch" }

// RescueArgs are the args of the inbox's periodic rescue job.
type RescueArgs struct{}

// Kind is the River job kind of the inbox's periodic rescue.
func (RescueArgs) Kind() string { return "wharf_inbox_rescue" }

// MaxMessages caps the messages of one processing job whatever BatchSize:
// each handler that writes takes a subtransaction (two if it opens a
// savepoint of its own), and more than 64 in one transaction overflow
// Postgres's per-backend cache of them, which slows every other session's
// snapshots.
const MaxMessages = 30

// batchMaxAttempts is a batch job's attempts, whatever MaxAttempts: they
// are not handler attempts (the first runs the batch, the others only hand
// its messages to jobs of their own, until the database lets them), so a
// small MaxAttempts must not discard a batch with its messages unprocessed.
const batchMaxAttempts = 25
