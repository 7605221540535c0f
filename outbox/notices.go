package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// Operational event types: the outbox publishes them, with the endpoint's
// tenant, in reaction to changes of that tenant's endpoints and
// deliveries, so that a tenant can subscribe an endpoint (its pager, an
// email webhook) to its integration's health. An endpoint receives them
// only when its filter names them or a "wharf." prefix of them
// ("wharf.*", "wharf.endpoint.*"): never through "*", another prefix or an
// empty filter. Applications cannot publish these types themselves.
const (
	// EventEndpointDisabled: an endpoint was disabled, by someone or for
	// failing (410 Gone, or failing for DisableAfter). Data:
	// endpoint_id, reason, at.
	EventEndpointDisabled = "wharf.endpoint.disabled"
	// EventEndpointEnabled: an endpoint was enabled again. Data:
	// endpoint_id, at.
	EventEndpointEnabled = "wharf.endpoint.enabled"
	// EventCircuitOpened: an endpoint's circuit opened; its deliveries
	// wait until. Data: endpoint_id, until, openings, at.
	EventCircuitOpened = "wharf.endpoint.circuit_opened"
	// EventCircuitClosed: an endpoint's circuit closed again. Data:
	// endpoint_id, at.
	EventCircuitClosed = "wharf.endpoint.circuit_closed"
	// EventSecretRotated: an endpoint's signing secret was rotated; the
	// previous one signs too until previous_secret_until. Data:
	// endpoint_id, previous_secret_until, at.
	EventSecretRotated = "wharf.endpoint.secret_rotated"
	// EventDeliveryDead: a delivery was dead-lettered. Data: endpoint_id,
	// delivery_id, event_id, event_type, attempts, reason, at. The
	// deliveries of operational events themselves are never told of.
	EventDeliveryDead = "wharf.delivery.dead"
	// TestEventType is the type of the portal's test event when the
	// catalog lists none the endpoint subscribes to.
	TestEventType = "wharf.test"
)

// reservedPrefix starts the types only the outbox publishes.
const reservedPrefix = "wharf."

// operationalTypes describe the operational types in the catalog.
var operationalTypes = []EventType{
	{Name: EventEndpointDisabled, Description: "An endpoint was disabled, by someone or for failing; it gets no new events until enabled.",
		Example: json.RawMessage(`{"endpoint_id":"0196b8a4-2f0c-7c3e-9a51-3f5d2b9c8e10","reason":"endpoint answered 410 Gone","at":"2026-01-02T03:04:05Z"}`)},
	{Name: EventEndpointEnabled, Description: "An endpoint was enabled again.",
		Example: json.RawMessage(`{"endpoint_id":"0196b8a4-2f0c-7c3e-9a51-3f5d2b9c8e10","at":"2026-01-02T03:04:05Z"}`)},
	{Name: EventCircuitOpened, Description: "An endpoint kept failing: its circuit opened, and its deliveries wait until the time given.",
		Example: json.RawMessage(`{"endpoint_id":"0196b8a4-2f0c-7c3e-9a51-3f5d2b9c8e10","until":"2026-01-02T03:05:05Z","openings":1,"at":"2026-01-02T03:04:05Z"}`)},
	{Name: EventCircuitClosed, Description: "An endpoint answered again: its circuit closed.",
		Example: json.RawMessage(`{"endpoint_id":"0196b8a4-2f0c-7c3e-9a51-3f5d2b9c8e10","at":"2026-01-02T03:04:05Z"}`)},
	{Name: EventSecretRotated, Description: "An endpoint's signing secret was rotated; the previous one also signs until the time given.",
		Example: json.RawMessage(`{"endpoint_id":"0196b8a4-2f0c-7c3e-9a51-3f5d2b9c8e10","previous_secret_until":"2026-01-03T03:04:05Z","at":"2026-01-02T03:04:05Z"}`)},
	{Name: EventDeliveryDead, Description: "A delivery ran out of attempts (or its endpoint answered 410, or was disabled): it will not be sent again unless replayed.",
		Example: json.RawMessage(`{"endpoint_id":"0196b8a4-2f0c-7c3e-9a51-3f5d2b9c8e10","delivery_id":"0196b8a4-3a1d-7f20-8b6e-5c4d3e2f1a0b","event_id":"evt_0196b8a4-1b2c-7d3e-8f4a-5b6c7d8e9f0a","event_type":"invoice.paid","attempts":8,"reason":"status 500","at":"2026-01-02T03:04:05Z"}`)},
}

// reserved reports whether applications may not publish type t.
func reserved(t string) bool { return strings.HasPrefix(t, reservedPrefix) && t != TestEventType }

// noticeBatch bounds the notices one transaction publishes.
const noticeBatch = 100

// NoticeInterval is how often the periodic notice job publishes what
// changes left; a change the outbox makes itself asks for a run at once.
const NoticeInterval = 5 * time.Second

// noticeArgs are the args of the job that publishes notices.
type noticeArgs struct{}

// Kind is the job's River kind.
func (noticeArgs) Kind() string { return "wharf.outbox.notices" }

type noticeWorker struct {
	river.WorkerDefaults[noticeArgs]
	outbox *Outbox
}

func (w *noticeWorker) Work(ctx context.Context, _ *river.Job[noticeArgs]) error {
	_, err := w.outbox.PublishNotices(ctx)
	return err
}

// PublishNotices publishes the operational events that changes left (see
// EventEndpointDisabled), each exactly once, and returns how many. The
// outbox's job runs it; call it yourself only in tests.
func (o *Outbox) PublishNotices(ctx context.Context) (int, error) {
	total := 0
	for {
		var n int
		err := o.inTx(ctx, func(tx pgx.Tx) error {
			q := o.queries.WithTx(tx)
			rows, err := q.OutboxNoticeClaim(ctx, noticeBatch)
			if err != nil || len(rows) == 0 {
				return err
			}
			ids := make([]int64, len(rows))
			arg := dbsqlc.OutboxNoticeSubscribedParams{Tenants: make([]string, len(rows)), Types: make([]string, len(rows))}
			for i, r := range rows {
				ids[i] = r.ID
				arg.Tenants[i], arg.Types[i] = r.Tenant, r.Type
			}
			subscribed, err := q.OutboxNoticeSubscribed(ctx, arg)
			if err != nil {
				return err
			}
			// Only what some endpoint receives is stored as an event.
			var events []*Event
			for _, s := range subscribed {
				if s.Subscribed {
					r := rows[s.N-1]
					events = append(events, &Event{Type: r.Type, Tenant: r.Tenant, Data: r.Data})
				}
			}
			if _, err := o.publish(ctx, tx, events, true); err != nil {
				return err
			}
			n = len(rows)
			return q.OutboxNoticeDelete(ctx, ids)
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("outbox: publish notices: %w", err)
		}
		if n < noticeBatch {
			return total, nil
		}
	}
}

// kickNotices asks for a notice job after a change the engine committed
// left notices, unless one waits to run: that one will see them, since
// they committed before it runs. River's unique jobs would not do: they
// count a running job as a duplicate, and a running job may have made its
// last claim before the notices committed. The periodic job covers a
// failure.
func (o *Outbox) kickNotices(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	waiting, err := o.queries.OutboxNoticeJobWaiting(ctx)
	if err == nil && !waiting {
		err = o.engine.InsertJob(ctx, nil, noticeArgs{}, &river.InsertOpts{Queue: o.config.Queue})
	}
	if err != nil {
		o.config.Logger.WarnContext(ctx, "outbox: asking for the notice job failed; the periodic one publishes them", "error", err)
	}
}

// kickNoticesTx asks for a notice job in tx, for a change made in tx. It
// always inserts one: a job waiting now may run before tx commits, and
// miss its notices. (These are people's actions: a job each is cheap.)
func (o *Outbox) kickNoticesTx(ctx context.Context, db dbsqlc.DBTX) error {
	tx, ok := db.(pgx.Tx)
	if !ok {
		return nil
	}
	return o.engine.InsertJob(ctx, tx, noticeArgs{}, &river.InsertOpts{Queue: o.config.Queue})
}

// noticePeriodicJob publishes what the asks missed.
func (o *Outbox) noticePeriodicJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(NoticeInterval),
		func() (river.JobArgs, *river.InsertOpts) {
			return noticeArgs{}, &river.InsertOpts{Queue: o.config.Queue, UniqueOpts: river.UniqueOpts{ByPeriod: NoticeInterval}}
		},
		&river.PeriodicJobOpts{ID: noticeArgs{}.Kind()})
}
