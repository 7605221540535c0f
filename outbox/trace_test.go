package outbox_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/outbox"
)

// Each attempt is a child span of the publishing span, and the endpoint
// gets its traceparent.
func TestDeliveryCarriesTheTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp, recorder := telemetrytest.NewTracer(t)
	cfg := testConfig()
	cfg.TracerProvider = tp
	b := setup(t, cfg)
	receiver := newSink(t, status(http.StatusNoContent))
	ep := b.endpoint(t, receiver.URL(), nil)

	appCtx, appSpan := tp.Tracer("app").Start(ctx, "create order")
	var res *outbox.PublishResult
	require.NoError(t, pgx.BeginFunc(appCtx, b.pool, func(tx pgx.Tx) error {
		var err error
		res, err = b.outbox.PublishTx(appCtx, tx, &outbox.Event{Type: "order.created", Data: map[string]int{}})
		return err
	}))
	appSpan.End()
	startRiver(t, b.pool, b.outbox)
	b.awaitDelivery(t, ep.ID, res.EventID, outbox.StatusSucceeded)

	got := receiver.all()
	require.Len(t, got, 1)
	traceparent := got[0].Header.Get("traceparent")
	require.True(t, strings.HasPrefix(traceparent, "00-"+appSpan.SpanContext().TraceID().String()+"-"),
		"the endpoint continues the publisher's trace: %q", traceparent)
	var deliver sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, s := range recorder.Ended() {
			if s.Name() == "wharf.outbox.deliver" {
				deliver = s
			}
		}
		return deliver != nil
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, appSpan.SpanContext().TraceID(), deliver.SpanContext().TraceID())
	require.Contains(t, traceparent, deliver.SpanContext().SpanID().String(), "the request carries the attempt's span")
}
