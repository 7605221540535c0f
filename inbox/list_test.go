package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
)

// Paging with the keyset cursor lists every message once, in order, even
// where messages share received_at (a batch) and while new ones arrive.
func TestListPagesWithACursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	for batch := range 3 {
		var msgs []inbox.Incoming
		for i := range 25 {
			msgs = append(msgs, inbox.Incoming{Source: "payments", EventID: fmt.Sprintf("evt_%d_%d", batch, i), Body: []byte(`{}`)})
		}
		receiveMany(t, b.pool, b.inbox, msgs)
	}
	all, err := b.inbox.List(ctx, &inbox.ListParams{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, all, 75)

	var walked []uuid.UUID
	params := &inbox.ListParams{Limit: 10}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 20, "paging does not end")
		page, err := b.inbox.List(ctx, params)
		require.NoError(t, err)
		for _, m := range page {
			walked = append(walked, m.ID)
		}
		if len(page) < params.Limit {
			break
		}
		params.After = inbox.Cursor(page[len(page)-1])
		if pages == 2 {
			// New messages arrive while paging: newer than the cursor,
			// so they neither repeat nor shift the pages.
			receiveMany(t, b.pool, b.inbox, payments("evt_late_1", "evt_late_2"))
		}
	}
	want := make([]uuid.UUID, len(all))
	for i, m := range all {
		want[i] = m.ID
	}
	require.Equal(t, want, walked)

	// Filters combine with the cursor.
	dead, err := b.inbox.List(ctx, &inbox.ListParams{Status: inbox.StatusDead, After: inbox.Cursor(all[0])})
	require.NoError(t, err)
	require.Empty(t, dead)

	for _, bad := range []string{"nope", "!!", inbox.Cursor(all[0])[:5]} {
		_, err := b.inbox.List(ctx, &inbox.ListParams{After: bad})
		require.ErrorIs(t, err, inbox.ErrInvalidCursor, "%q", bad)
	}
}
