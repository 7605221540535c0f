package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// River job kinds of the delivery jobs (outbox.DeliveryKind,
// outbox.DeliveryBatchKind).
const (
	Kind      = "wharf_outbox_delivery"
	BatchKind = "wharf_outbox_delivery_batch"
)

// Args are the args of a delivery's own job (outbox.DeliveryArgs, which
// documents them): the delivery's id and generation, never the payload.
type Args struct {
	// DeliveryID identifies the delivery (one event to one endpoint).
	DeliveryID uuid.UUID `json:"delivery_id"`
	// Generation is the delivery's generation the job was inserted for: 0
	// when published, one more on each replay. A job of an older generation
	// than the delivery's (a replay superseded it) finishes without sending.
	Generation int `json:"generation,omitempty"`
	// AttemptOffset is how many attempts the delivery had before this job:
	// those a batch job made (see BatchArgs) before it handed the delivery
	// over to a job of its own.
	AttemptOffset int `json:"attempt_offset,omitempty"`

	// retryIn is the wait Work decided before the next attempt (the
	// schedule, stretched by Retry-After or throttling): River asks the
	// worker's NextRetry right after Work returns an error, with the same
	// *Job (river's wrapperWorkUnit), and only Work has seen the response.
	// NextRetry adds it to its own clock: River refuses a time before the
	// clock it read after Work returned, and a wait of 0 decided as a time
	// was always before it. A job River rescues after a crash was never
	// seen by Work: retrySet is false, and NextRetry falls back to the
	// plain schedule. Neither is encoded.
	retryIn  time.Duration
	retrySet bool
}

// Kind returns Kind.
func (Args) Kind() string { return Kind }

// Ref names a delivery at the generation a batch job was inserted for
// (outbox.DeliveryRef).
type Ref struct {
	DeliveryID uuid.UUID `json:"delivery_id"`
	Generation int       `json:"generation,omitempty"`
	// AttemptsBefore is how many attempts the delivery had when the job
	// was inserted: those of earlier generations, for a replay. The job's
	// own attempts are the delivery's count less these.
	AttemptsBefore int `json:"attempts_before,omitempty"`
}

// BatchArgs are the args of a batch delivery job (outbox.DeliveryBatchArgs,
// which documents them).
type BatchArgs struct {
	// EndpointID is the deliveries' endpoint.
	EndpointID uuid.UUID `json:"endpoint_id"`
	// Deliveries are the deliveries, in the order they were stored
	// (publish order, for PublishManyTx).
	Deliveries []Ref `json:"deliveries"`
}

// Kind returns BatchKind.
func (BatchArgs) Kind() string { return BatchKind }

// spareRuns is how many more runs than attempts a delivery job may have
// (its River MaxAttempts is the schedule's length plus spareRuns). A run
// that ends without a recorded outcome (the worker crashed or panicked, or
// recording failed) still uses one of River's attempts; the spare runs let
// the job then dead-letter the delivery itself rather than River discard the
// job and leave the delivery pending with no job.
const spareRuns = 3

// MaxInFlightLimit is the largest cap an endpoint may have; insertion
// counts no cap as this one.
const MaxInFlightLimit = 1000

// minSpreadBatch bounds how far InsertJobs spreads an endpoint's
// deliveries over the jobs its cap lets run at once: no more than one job
// per minSpreadBatch deliveries (rounded up).
const minSpreadBatch = 16

// Pending is a delivery that needs a job.
type Pending struct {
	ID, EndpointID uuid.UUID
	Generation     int32
	OrderingKey    string
	// Attempts are those of earlier generations (a replay's).
	Attempts int32
	Endpoint Shape
}

// Shape is what the grouping of deliveries into jobs heeds of their
// endpoint.
type Shape struct {
	// MaxInFlight is the endpoint's stored cap (0: none).
	MaxInFlight int32
	// RateLimited endpoints get a job per delivery: a batch job would hand
	// each over (see gate).
	RateLimited bool
}

// FirstDelay is the wait before a published delivery's first attempt: the
// schedule's first entry, without jitter.
func (e *Engine) FirstDelay() time.Duration { return e.retries.firstDelay() }

// InsertJob inserts a job of the outbox's other kinds with the engine's
// insert-only client: in tx when not nil.
func (e *Engine) InsertJob(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) error {
	var err error
	if tx != nil {
		_, err = e.inserter.InsertTx(ctx, tx, args, opts)
	} else {
		_, err = e.inserter.Insert(ctx, args, opts)
	}
	if err != nil {
		return fmt.Errorf("outbox: insert %s job: %w", args.Kind(), err)
	}
	return nil
}

// InlineJobs is what the publish statement needs to write its deliveries'
// River jobs itself, a job each, as River's insert would (see
// dbsqlc.OutboxPublishParams): one event's deliveries, one to each
// endpoint, get a job each whatever their endpoint (see InsertJobs), and
// writing them in the publish's own statement saves a publish in its
// transaction a round trip, two when it notifies.
type InlineJobs struct {
	Kind        string
	Queue       string
	MaxAttempts int16
	ScheduledAt *time.Time // nil: the database's now
	State       string
	// Notify, with its topic and payload, is River's insert notification
	// (see wake).
	Notify                     bool
	NotifyTopic, NotifyPayload string
}

// InlineJobs returns the fields of one event's delivery jobs, due after
// delay, for the publish statement to write (see InlineJobs).
func (e *Engine) InlineJobs(delay time.Duration) InlineJobs {
	opts := e.insertOpts(delay)
	jobs := InlineJobs{Kind: Args{}.Kind(), Queue: opts.Queue, MaxAttempts: int16(opts.MaxAttempts), State: "available"}
	if !opts.ScheduledAt.IsZero() {
		at := opts.ScheduledAt
		jobs.ScheduledAt, jobs.State = &at, "scheduled"
		return jobs // the scheduler makes it available, not a notification
	}
	if e.wake.inTx() {
		jobs.Notify, jobs.NotifyTopic, jobs.NotifyPayload = true, e.wake.topic, e.wake.payload
	}
	return jobs
}

// InsertJobs inserts the jobs of deliveries, to run after delay, in one
// round trip: batch jobs (BatchArgs) for the deliveries to one endpoint
// without an ordering key, in their order, and a job of its own for any
// other (and for a batch of one).
//
// An endpoint's n deliveries go to ceil(n/Config.DeliveryBatchSize) batch
// jobs of about the same size, or, when its cap lets more requests run at
// once than that, to as many jobs as its cap (no cap counts as the largest
// one, 1,000) but no more than ceil(n/minSpreadBatch): a burst to an
// endpoint whose requests take a while is then sent by as many workers as
// it allows, while a burst to one that answers at once still costs a job
// per batch.
func (e *Engine) InsertJobs(ctx context.Context, tx pgx.Tx, deliveries []Pending, delay time.Duration) error {
	if len(deliveries) == 0 {
		return nil
	}
	opts := e.insertOpts(delay)
	var params []river.InsertManyParams
	single := func(d Pending) {
		params = append(params, river.InsertManyParams{
			Args: Args{DeliveryID: d.ID, Generation: int(d.Generation)}, InsertOpts: opts,
		})
	}
	perEndpoint := make(map[uuid.UUID][]Pending)
	var endpoints []uuid.UUID
	for _, d := range deliveries {
		if d.OrderingKey != "" || d.Endpoint.RateLimited || e.config.DeliveryBatchSize == 1 {
			single(d)
			continue
		}
		if _, ok := perEndpoint[d.EndpointID]; !ok {
			endpoints = append(endpoints, d.EndpointID)
		}
		perEndpoint[d.EndpointID] = append(perEndpoint[d.EndpointID], d)
	}
	for _, id := range endpoints {
		batch := perEndpoint[id]
		for _, size := range e.batchSizes(len(batch), batch[0].Endpoint.MaxInFlight) {
			if size == 1 {
				single(batch[0])
			} else {
				args := BatchArgs{EndpointID: id, Deliveries: make([]Ref, size)}
				for i, d := range batch[:size] {
					args.Deliveries[i] = Ref{DeliveryID: d.ID, Generation: int(d.Generation), AttemptsBefore: int(d.Attempts)}
				}
				params = append(params, river.InsertManyParams{Args: args, InsertOpts: opts})
			}
			batch = batch[size:]
		}
	}
	if _, err := e.inserter.InsertManyFastTx(ctx, tx, params); err != nil {
		return fmt.Errorf("outbox: insert delivery jobs: %w", err)
	}
	return nil
}

// batchSizes splits n deliveries to an endpoint with the stored cap
// maxInFlight among batch jobs, as InsertJobs says: the sizes, in order,
// which differ by at most one.
func (e *Engine) batchSizes(n int, maxInFlight int32) []int {
	size := e.config.DeliveryBatchSize
	jobs := (n + size - 1) / size
	parallel := int(maxInFlight)
	if parallel == 0 {
		parallel = MaxInFlightLimit
	}
	if jobs < parallel {
		floor := min(minSpreadBatch, size)
		jobs = max(jobs, min(parallel, (n+floor-1)/floor))
	}
	sizes := make([]int, jobs)
	for i := range sizes {
		sizes[i] = n / jobs
		if i < n%jobs {
			sizes[i]++
		}
	}
	return sizes
}

// insertOpts returns the options of delivery jobs that first run after
// delay. MaxAttempts is the schedule's length plus spareRuns: runs past the
// schedule (after a run that recorded nothing: a crash, a panic, a failure
// to record) dead-letter the delivery instead of River discarding the job
// with the delivery still unfinished.
func (e *Engine) insertOpts(delay time.Duration) *river.InsertOpts {
	opts := &river.InsertOpts{Queue: e.config.Queue, MaxAttempts: len(e.config.RetrySchedule) + spareRuns}
	if delay > 0 {
		opts.ScheduledAt = time.Now().Add(delay)
	}
	return opts
}

// scheduleAt makes opts' job due at at, or later if it already is.
func scheduleAt(opts *river.InsertOpts, at time.Time) {
	if at.After(time.Now()) && at.After(opts.ScheduledAt) {
		opts.ScheduledAt = at
	}
}

// LiveJob returns a job of the delivery's generation that River may still
// run (waiting, scheduled, retryable or running): a job of its own or a
// batch job, or nil. It looks the job up by kind and args; River indexes
// args (GIN), so this is no scan.
func (e *Engine) LiveJob(ctx context.Context, tx pgx.Tx, id uuid.UUID, generation int32) (*rivertype.JobRow, error) {
	// The containment documents go as JSON text: pgx cannot encode a
	// struct in the text format of its exec and simple_protocol modes
	// (PgBouncer in transaction mode).
	own, err := json.Marshal(Args{DeliveryID: id})
	if err != nil {
		return nil, err
	}
	inBatch, err := json.Marshal(map[string]any{"deliveries": []Ref{{DeliveryID: id}}})
	if err != nil {
		return nil, err
	}
	params := river.NewJobListParams().
		Kinds(Kind, BatchKind).
		States(rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
			rivertype.JobStateRunning, rivertype.JobStateScheduled).
		Where("(args @> @own_args::jsonb OR args @> @batch_args::jsonb)",
			river.NamedArgs{"own_args": string(own), "batch_args": string(inBatch)}).
		First(100)
	res, err := e.inserter.JobListTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("look up its jobs: %w", err)
	}
	for _, job := range res.Jobs {
		if jobHolds(job, id, int(generation)) {
			return job, nil
		}
	}
	return nil, nil
}

// jobHolds reports whether job, a delivery job or a batch job, is for
// delivery id at generation.
func jobHolds(job *rivertype.JobRow, id uuid.UUID, generation int) bool {
	if job.Kind == BatchKind {
		_, ok := refOf(job.EncodedArgs, id, generation)
		return ok
	}
	var args Args
	return json.Unmarshal(job.EncodedArgs, &args) == nil && args.DeliveryID == id && args.Generation == generation
}

// refOf returns the place of delivery id at generation in the batch job
// whose args are args.
func refOf(args json.RawMessage, id uuid.UUID, generation int) (Ref, bool) {
	var batch BatchArgs
	if json.Unmarshal(args, &batch) != nil {
		return Ref{}, false
	}
	for _, ref := range batch.Deliveries {
		if ref.DeliveryID == id && ref.Generation == generation {
			return ref, true
		}
	}
	return Ref{}, false
}
