// Package inboxjob is what every engine of the inbox shares about a stored
// message and its River jobs: the jobs' args and kinds, inserting jobs and
// handing messages to them, deleting a job no message needs, a message's
// statuses, and whether a job still owns its message. Package inbox and
// its engines (internal/ordering, internal/process, internal/receive)
// import it; it imports none of them.
package inboxjob

import (
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/shared"
)

// A message's statuses, as stored (package inbox's Status values).
const (
	StatusReceived  = "received"
	StatusProcessed = "processed"
	StatusFailed    = "failed"
	StatusDead      = "dead"
)

// What a late arrival's source makes of it (late_policy, as stored;
// package inbox's LatePolicy values): a message whose event was received
// before, its dedupe key since pruned.
const (
	LateProcess   = "process"   // its handler runs, as for any message
	LateSkip      = "skip"      // stored processed; no handler runs
	LateReconcile = "reconcile" // its source's reconcile handler runs
)

// MessagesTable is the day-partitioned table of the inbox's messages.
const MessagesTable = "wharf_inbox_messages"

// OwnedBy reports whether row still waits for job jobID: not processed,
// erased or moved to another job (a replay, a split) since the job was
// given it.
func OwnedBy(row *dbsqlc.WharfInboxMessage, jobID int64) bool {
	return row.JobID != nil && *row.JobID == jobID && row.ScrubbedAt == nil &&
		(row.Status == StatusReceived || row.Status == StatusFailed)
}

// maxErrorLength bounds the last_error stored on a message.
const maxErrorLength = 4096

// LastError makes a handler's error (or an operator's reason) storable as
// a message's last_error: a text column cannot hold NUL or invalid UTF-8,
// and an error that cannot be stored would leave its message unrecorded,
// neither failed nor dead.
func LastError(s string) string { return shared.Text(s, maxErrorLength) }

// JobID returns the id of row's job; 0 when it has none.
func JobID(row *dbsqlc.WharfInboxMessage) int64 {
	if row.JobID == nil {
		return 0
	}
	return *row.JobID
}
