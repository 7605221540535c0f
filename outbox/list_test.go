package outbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// Deliveries and endpoints page with keyset cursors: every row once, in
// order.
func TestListsPageWithACursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testConfig())
	var endpoints []uuid.UUID
	for i := range 7 {
		ep := b.endpoint(t, fmt.Sprintf("http://127.0.0.1:9/hook%d", i), nil)
		endpoints = append(endpoints, ep.ID)
	}
	events := make([]*outbox.Event, 4)
	for i := range events {
		events[i] = &outbox.Event{Type: "a", Data: map[string]int{"i": i}}
	}
	b.publish(t, events...) // 28 deliveries

	var walkedEndpoints []uuid.UUID
	ep := &outbox.EndpointListParams{Limit: 3}
	for {
		page, err := b.outbox.EndpointList(ctx, ep)
		require.NoError(t, err)
		for _, e := range page {
			walkedEndpoints = append(walkedEndpoints, e.ID)
		}
		if len(page) < ep.Limit {
			break
		}
		ep.After = outbox.EndpointCursor(page[len(page)-1])
	}
	require.Equal(t, endpoints, walkedEndpoints, "oldest first, each once")

	all, err := b.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, all, 28)
	var walked []uuid.UUID
	dp := &outbox.DeliveryListParams{Limit: 5}
	for {
		page, err := b.outbox.DeliveryList(ctx, dp)
		require.NoError(t, err)
		for _, d := range page {
			walked = append(walked, d.ID)
		}
		if len(page) < dp.Limit {
			break
		}
		dp.After = outbox.DeliveryCursor(page[len(page)-1])
	}
	want := make([]uuid.UUID, len(all))
	for i, d := range all {
		want[i] = d.ID
	}
	require.Equal(t, want, walked)

	_, err = b.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{After: outbox.EndpointCursor(&outbox.Endpoint{})})
	require.ErrorIs(t, err, outbox.ErrInvalidCursor)
	_, err = b.outbox.EndpointList(ctx, &outbox.EndpointListParams{After: "x"})
	require.ErrorIs(t, err, outbox.ErrInvalidCursor)
}
