package outbox

import "github.com/wharfhq/wharf/internal/delivery"

// River job kinds of the outbox's delivery jobs.
const (
	// DeliveryKind is the River job kind of delivery jobs.
	DeliveryKind = delivery.Kind
	// DeliveryBatchKind is the River job kind of batch delivery jobs.
	DeliveryBatchKind = delivery.BatchKind
)

// DeliveryArgs are the args of a delivery job: the delivery's id and
// generation, never the payload. Its fields are documented on the type it
// names.
type DeliveryArgs = delivery.Args

// DeliveryRef names a delivery at the generation a job was inserted for.
type DeliveryRef = delivery.Ref

// DeliveryBatchArgs are the args of a batch delivery job: deliveries to one
// endpoint that were published together (one PublishManyTx, one
// DeliveryReplayDead, one EndpointRecover batch), up to
// Config.DeliveryBatchSize, attempted by one job, one after another, in
// the order they were stored (publish order, for PublishManyTx). The job
// makes the first attempt of each: one River job, one concurrency slot and
// one load for all of them, where a job per delivery would cost River's
// fetch and completion of each.
//
// A batch job also comes from a split: see below.
//
// A delivery the job cannot simply send (its endpoint is rate limited,
// ordered by a key, has a circuit that is not closed; its attempt failed
// and is to be retried; an earlier one's attempt failed or was not the
// job's to record) is handed over to a job of its own (DeliveryArgs),
// which goes on as any delivery's. The job loads its endpoint once, and
// each attempt's record tells it the endpoint's version: once the endpoint
// has changed (updated, disabled or enabled, its secret rotated; or
// disabled, or its circuit opened, by an attempt) the job sends nothing more
// and hands the rest to a new batch job, which loads it afresh and passes
// the same gates as any other job. The deliveries the job has not reached
// when Config.DeliveryBatchSpan has passed are handed over to new batch
// jobs, as many to a job as it sent in the span but in no more jobs than
// the endpoint has slots free for; or the job goes on sending when new
// jobs would not get them out sooner. A hand-over moves the
// delivery to its next generation and inserts its new job in one
// transaction, so later runs of the batch job leave it alone. A crash
// anywhere leaves every delivery either recorded, handed over, or still
// the batch job's, which River runs again.
type DeliveryBatchArgs = delivery.BatchArgs
