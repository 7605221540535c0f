package outbox_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// TestSecondRotationDuringOverlap backs the README: a second rotation
// during an overlap drops the first secret at once; requests carry the
// second and third secrets' signatures only.
func TestSecondRotationDuringOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testConfig())
	s := okSink(t)
	first := b.endpoint(t, s.URL(), nil)
	second, err := b.outbox.EndpointRotateSecret(ctx, first.ID, nil)
	require.NoError(t, err)
	third, err := b.outbox.EndpointRotateSecret(ctx, first.ID, nil)
	require.NoError(t, err)
	startRiver(t, b.pool, b.outbox)
	res := b.publish(t, &outbox.Event{Type: "a", Data: map[string]int{}})
	b.awaitDelivery(t, first.ID, res[0].EventID, outbox.StatusSucceeded)

	got := s.all()[0]
	verify := func(secret string) error {
		v := signature.NewStandardWebhooks(signature.Secrets{secret}, nil)
		return v.Verify(ctx, &signature.Request{Method: http.MethodPost, Header: got.Header, Body: got.Body})
	}
	require.ErrorIs(t, verify(first.Secret), signature.ErrNoMatch, "the first secret was dropped at the second rotation")
	require.NoError(t, verify(second.Secret), "the second secret overlaps the third")
	require.NoError(t, verify(third.Secret))
}

// TestReplayedDeadOrderedDeliveryGoesAfterLaterEvents backs the README: a
// dead delivery does not block its key, so a later event of the key is
// delivered, and replaying the dead one sends it after that later event.
func TestReplayedDeadOrderedDeliveryGoesAfterLaterEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig()
	cfg.RetrySchedule = []time.Duration{0} // one attempt: a failure is dead
	b := setup(t, cfg)
	s := newSink(t, failFirst(1))
	ep := b.endpoint(t, s.URL(), &outbox.EndpointParams{Ordered: true})
	startRiver(t, b.pool, b.outbox)

	firstEvent := b.publish(t, &outbox.Event{Type: "a", Data: map[string]int{"n": 1}, OrderingKey: "order_1"})[0]
	dead := b.awaitDelivery(t, ep.ID, firstEvent.EventID, outbox.StatusDead)
	later := b.publish(t, &outbox.Event{Type: "a", Data: map[string]int{"n": 2}, OrderingKey: "order_1"})[0]
	b.awaitDelivery(t, ep.ID, later.EventID, outbox.StatusSucceeded)
	require.NoError(t, b.outbox.DeliveryReplay(ctx, dead.ID))
	b.awaitDelivery(t, ep.ID, firstEvent.EventID, outbox.StatusSucceeded)

	var order []string
	for _, r := range s.all() {
		order = append(order, r.Header.Get("webhook-id"))
	}
	require.Equal(t, []string{firstEvent.EventID, later.EventID, firstEvent.EventID}, order,
		"failed first, then the later event, then the replay")
}
