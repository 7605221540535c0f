package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// TestEndpointDataFilter: an endpoint with a content filter gets only the
// events whose data contains it (jsonb @>), whether published one at a
// time or together, beside its type filter; without one it gets every
// event of its types. Removing the filter takes effect for the events
// published after.
func TestEndpointDataFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bundle := setup(t, testConfig())
	all := bundle.endpoint(t, "https://all.example/hook", nil)
	acct1 := bundle.endpoint(t, "https://acct1.example/hook", &outbox.EndpointParams{DataFilter: json.RawMessage(` {"account": "acct_1"} `)})
	vip := bundle.endpoint(t, "https://vip.example/hook", &outbox.EndpointParams{
		EventTypes: []string{"order.*"}, DataFilter: json.RawMessage(`{"tags":["vip"],"order":{"status":"paid"}}`),
	})
	require.JSONEq(t, `{"account":"acct_1"}`, string(acct1.DataFilter))
	require.Nil(t, all.DataFilter)

	bundle.publish(t, &outbox.Event{Type: "balance.updated", Data: map[string]any{"account": "acct_1", "balance": 5}})
	bundle.publish(t,
		&outbox.Event{Type: "balance.updated", Data: map[string]any{"account": "acct_2"}},
		&outbox.Event{Type: "order.created", Data: map[string]any{"account": "acct_1", "tags": []string{"new", "vip"}, "order": map[string]any{"status": "paid", "id": 7}}},
		&outbox.Event{Type: "order.created", Data: map[string]any{"tags": []string{"vip"}, "order": map[string]any{"status": "open"}}},
		&outbox.Event{Type: "balance.updated", Data: json.RawMessage(`[1,2]`)},
	)
	require.Equal(t, 5, deliveriesOf(t, bundle, all.ID))
	require.Equal(t, 2, deliveriesOf(t, bundle, acct1.ID), "acct_1's balance and order")
	require.Equal(t, 1, deliveriesOf(t, bundle, vip.ID), "the paid vip order")

	got, err := bundle.outbox.EndpointUpdate(ctx, acct1.ID, &outbox.EndpointUpdateParams{DataFilter: json.RawMessage("null")})
	require.NoError(t, err)
	require.Nil(t, got.DataFilter)
	bundle.publish(t, &outbox.Event{Type: "balance.updated", Data: map[string]any{"account": "acct_3"}})
	require.Equal(t, 3, deliveriesOf(t, bundle, acct1.ID), "no filter any more")
	got, err = bundle.outbox.EndpointUpdate(ctx, acct1.ID, &outbox.EndpointUpdateParams{Description: ptr("kept")})
	require.NoError(t, err)
	require.Nil(t, got.DataFilter, "an update without DataFilter leaves it")
}

// TestRecoverHeedsTheDataFilter: recovering an endpoint creates
// deliveries only of the missed events its content filter takes.
func TestRecoverHeedsTheDataFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bundle := setup(t, testConfig())
	since := time.Now().Add(-time.Minute)
	ep := bundle.endpoint(t, "https://acct1.example/hook", &outbox.EndpointParams{DataFilter: json.RawMessage(`{"account":"acct_1"}`)})
	_, err := bundle.outbox.EndpointDisable(ctx, ep.ID, "maintenance")
	require.NoError(t, err)
	bundle.publish(t,
		&outbox.Event{Type: "balance.updated", Data: map[string]any{"account": "acct_1"}},
		&outbox.Event{Type: "balance.updated", Data: map[string]any{"account": "acct_2"}},
	)
	_, err = bundle.outbox.EndpointEnable(ctx, ep.ID)
	require.NoError(t, err)
	n, err := bundle.outbox.EndpointRecover(ctx, ep.ID, since)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, deliveriesOf(t, bundle, ep.ID))
}

// TestEnsureComparesDataFilters: EndpointEnsure leaves an endpoint whose
// content filter is the same JSON (spacing and key order aside) and
// updates one whose filter differs.
func TestEnsureComparesDataFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bundle := setup(t, testConfig())
	params := &outbox.EndpointParams{URL: "https://a.example/hook", DataFilter: json.RawMessage(`{"a":1,"b":{"c":2}}`)}
	first, err := bundle.outbox.EndpointEnsure(ctx, params)
	require.NoError(t, err)
	require.True(t, first.Created)
	params.DataFilter = json.RawMessage(`{ "b": {"c": 2}, "a": 1 }`)
	same, err := bundle.outbox.EndpointEnsure(ctx, params)
	require.NoError(t, err)
	require.False(t, same.Updated, "the same filter")
	params.DataFilter = nil
	cleared, err := bundle.outbox.EndpointEnsure(ctx, params)
	require.NoError(t, err)
	require.True(t, cleared.Updated)
	require.Nil(t, cleared.DataFilter)
}

// TestEndpointDataFilterRefusesWhatIsNoObject: a content filter that is
// not a JSON object, too large, or holds what jsonb refuses (a NUL
// character, a lone surrogate, bytes that are not UTF-8) is refused as a
// field error, changing nothing.
func TestEndpointDataFilterRefusesWhatIsNoObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bundle := setup(t, testConfig())
	for name, filter := range map[string]string{
		"array": `[1]`, "string": `"a"`, "not json": `{"a":`, "nul": `{"a":"x\u0000y"}`,
		"lone surrogate": `{"a":"\ud800"}`, "not UTF-8": "{\"a\":\"\xff\"}",
		"too large": `{"a":"` + strings.Repeat("x", 5000) + `"}`,
	} {
		_, err := bundle.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://a.example", DataFilter: json.RawMessage(filter)})
		require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, name)
		var fe *outbox.FieldError
		require.True(t, errors.As(err, &fe), name)
		require.Equal(t, "data_filter", fe.Field, name)
	}
	eps, err := bundle.outbox.EndpointList(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, eps)
}

// deliveriesOf counts the deliveries of endpoint id.
func deliveriesOf(t *testing.T, b *testBundle, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM wharf_outbox_deliveries WHERE endpoint_id = $1", id).Scan(&n))
	return n
}

// TestDataFilterTakesDataJSONBCannotHold: an event whose data Postgres's
// jsonb cannot hold (a NUL character, a lone surrogate escape, bytes that
// are not UTF-8) is published as any other, and recovered, beside an
// endpoint with a content filter: no filter takes it, and the endpoints
// without one get it.
func TestDataFilterTakesDataJSONBCannotHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bundle := setup(t, testConfig())
	since := time.Now().Add(-time.Minute)
	all := bundle.endpoint(t, "https://all.example/hook", nil)
	acct1 := bundle.endpoint(t, "https://acct1.example/hook", &outbox.EndpointParams{DataFilter: json.RawMessage(`{"account":"acct_1"}`)})
	events := func() []*outbox.Event {
		return []*outbox.Event{
			{Type: "note.added", Data: map[string]any{"account": "acct_1", "note": "a\x00b"}},
			{Type: "note.added", Data: json.RawMessage(`{"account":"acct_1","note":"\ud800"}`)},
			{Type: "note.added", Data: json.RawMessage("{\"account\":\"acct_1\",\"note\":\"\xff\"}")},
			// jsonb holds these: a surrogate pair, an escaped backslash.
			{Type: "note.added", Data: json.RawMessage(`{"account":"acct_1","note":"\ud83d\ude00"}`)},
			{Type: "note.added", Data: json.RawMessage(`{"account":"acct_1","note":"\\u0000"}`)},
		}
	}
	bundle.publish(t, events()...)
	bundle.publish(t, events()[0])
	require.Equal(t, 6, deliveriesOf(t, bundle, all.ID))
	require.Equal(t, 2, deliveriesOf(t, bundle, acct1.ID), "the data jsonb holds")

	_, err := bundle.outbox.EndpointDisable(ctx, acct1.ID, "maintenance")
	require.NoError(t, err)
	bundle.publish(t, events()...)
	_, err = bundle.outbox.EndpointEnable(ctx, acct1.ID)
	require.NoError(t, err)
	n, err := bundle.outbox.EndpointRecover(ctx, acct1.ID, since)
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

// TestEnsureComparesDataFilterNumbersExactly: EndpointEnsure updates a
// filter whose number changed past float64's precision (jsonb keeps
// numbers exact), and leaves one written another way (1e2, 100).
func TestEnsureComparesDataFilterNumbersExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bundle := setup(t, testConfig())
	params := &outbox.EndpointParams{URL: "https://a.example/hook", DataFilter: json.RawMessage(`{"account":12345678901234567890,"n":100}`)}
	_, err := bundle.outbox.EndpointEnsure(ctx, params)
	require.NoError(t, err)
	params.DataFilter = json.RawMessage(`{"account":12345678901234567891,"n":100}`)
	changed, err := bundle.outbox.EndpointEnsure(ctx, params)
	require.NoError(t, err)
	require.True(t, changed.Updated, "another account")
	require.JSONEq(t, `{"account":12345678901234567891,"n":100}`, string(changed.DataFilter))
	params.DataFilter = json.RawMessage(`{"account":12345678901234567891,"n":1e2}`)
	same, err := bundle.outbox.EndpointEnsure(ctx, params)
	require.NoError(t, err)
	require.False(t, same.Updated, "the same numbers")
}
