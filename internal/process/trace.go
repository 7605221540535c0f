package process

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/telemetry"
)

// startProcess starts the span of one handler run, linked to the span that
// received the message.
func (p *Processor) startProcess(ctx context.Context, msg *dbsqlc.WharfInboxMessage) (context.Context, trace.Span) {
	return p.config.Tracer.Start(ctx, "wharf.inbox.process",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(telemetry.Link(msg.TraceContext)...),
		trace.WithAttributes(
			attribute.String("wharf.source", msg.Source),
			attribute.String("wharf.event_type", msg.EventType),
			attribute.String("wharf.message_id", msg.ID.String()),
		))
}

// startProcessGroup starts the span of a batch handler's call on msgs,
// linked to each message's receipt.
func (p *Processor) startProcessGroup(ctx context.Context, msgs []*dbsqlc.WharfInboxMessage) (context.Context, trace.Span) {
	var links []trace.Link
	for _, m := range msgs {
		links = append(links, telemetry.Link(m.TraceContext)...)
	}
	return p.config.Tracer.Start(ctx, "wharf.inbox.process_batch",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("wharf.source", msgs[0].Source),
			attribute.String("wharf.event_type", msgs[0].EventType),
			attribute.Int("wharf.messages", len(msgs)),
		))
}

// endProcess ends a handler run's span with its outcome.
func endProcess(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, "handler failed")
	}
	span.End()
}

// startGroupSpans starts the spans of a batch handler's call on msgs: one
// for the call, linked to each message's receipt, with a span per message
// under it; the context it returns carries the call's, so that what the
// handler writes (an outbox event) continues its trace. end ends them all
// with the call's outcome.
func (p *Processor) startGroupSpans(ctx context.Context, msgs []*dbsqlc.WharfInboxMessage) (_ context.Context, end func(error)) {
	ctx, span := p.startProcessGroup(ctx, msgs)
	spans := make([]trace.Span, len(msgs))
	for i, m := range msgs {
		_, spans[i] = p.startProcess(ctx, m)
	}
	return ctx, func(err error) {
		for _, s := range spans {
			endProcess(s, err)
		}
		endProcess(span, err)
	}
}
