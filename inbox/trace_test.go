package inbox_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/telemetrytest"
)

// A receive continues the trace of the traceparent the sender sent, and
// the processing span links back to it through the stored message.
func TestTracesFollowTheMessage(t *testing.T) {
	t.Parallel()
	tp, recorder := telemetrytest.NewTracer(t)
	b := setup(t, &setupOpts{cfg: &inbox.Config{TracerProvider: tp}})
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error { return nil })

	const senderTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req := b.signed(t, "payments", "evt_traced", []byte(`{"type":"a"}`), time.Now())
	req.Header.Set("traceparent", "00-"+senderTrace+"-00f067aa0ba902b7-01")
	a := do(t, req)
	require.Equal(t, http.StatusOK, a.Status)
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	spans := map[string]sdktrace.ReadOnlySpan{}
	require.Eventually(t, func() bool {
		for _, s := range recorder.Ended() {
			spans[s.Name()] = s
		}
		return spans["wharf.inbox.receive"] != nil && spans["wharf.inbox.process"] != nil
	}, 10*time.Second, 10*time.Millisecond)
	receive, process := spans["wharf.inbox.receive"], spans["wharf.inbox.process"]
	require.Equal(t, senderTrace, receive.SpanContext().TraceID().String(), "the receive continues the sender's trace")
	require.Equal(t, "00f067aa0ba902b7", receive.Parent().SpanID().String())
	require.Len(t, process.Links(), 1)
	require.Equal(t, receive.SpanContext().SpanID(), process.Links()[0].SpanContext.SpanID(), "processing links to the receive")
}
