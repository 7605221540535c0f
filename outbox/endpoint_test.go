package outbox_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

func TestEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CreateGeneratesSecretAndDefaults", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		ep, err := bundle.outbox.EndpointCreate(ctx, &outbox.EndpointParams{
			URL: "https://example.com/hooks", EventTypes: []string{"a.b", "a.*", "a.b"}, Description: "mine",
		})
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(ep.Secret, "whsec_"))
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(ep.Secret, "whsec_"))
		require.NoError(t, err)
		require.Len(t, key, 32)
		require.Equal(t, []string{"a.b", "a.*"}, ep.EventTypes)
		require.Equal(t, outbox.DefaultMaxInFlight, ep.MaxInFlight)
		require.Equal(t, outbox.DefaultEndpointTimeout, ep.Timeout)
		require.True(t, ep.Enabled)

		got, err := bundle.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.Equal(t, ep.Endpoint, got)
		secret, err := bundle.outbox.EndpointSecret(ctx, ep.ID)
		require.NoError(t, err)
		require.Equal(t, ep.Secret, secret)

		other, err := bundle.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://example.com/2"})
		require.NoError(t, err)
		require.NotEqual(t, ep.Secret, other.Secret)
	})

	t.Run("BadParamsChangeNothing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		for name, params := range map[string]*outbox.EndpointParams{
			"nil":          nil,
			"empty url":    {URL: ""},
			"relative url": {URL: "/hooks"},
			"ftp":          {URL: "ftp://example.com/"},
			"no host":      {URL: "http:///x"},
			"fragment":     {URL: "https://example.com/#x"},
			"filter":       {URL: "https://example.com/", EventTypes: []string{"a.*.b"}},
			"blank filter": {URL: "https://example.com/", EventTypes: []string{""}},
			"secret":       {URL: "https://example.com/", Secret: "whsec_short"},
			"no prefix":    {URL: "https://example.com/", Secret: base64.StdEncoding.EncodeToString(make([]byte, 32))},
			"cap":          {URL: "https://example.com/", MaxInFlight: -5},
			"timeout":      {URL: "https://example.com/", Timeout: time.Hour},
		} {
			_, err := bundle.outbox.EndpointCreate(ctx, params)
			require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, name)
			if params != nil && params.Secret != "" {
				require.NotContains(t, err.Error(), params.Secret, "errors never carry secrets")
			}
		}
		list, err := bundle.outbox.EndpointList(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, list)
	})

	t.Run("InvalidTextIsRefusedAndTransactionStaysUsable", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		existing := bundle.endpoint(t, "https://example.com/existing", nil)

		tx, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck

		// Postgres refuses NUL and invalid UTF-8 in text: had any of these
		// reached it, it would have aborted tx.
		for name, params := range map[string]*outbox.EndpointParams{
			"tenant with NUL":           {URL: "https://example.com/", Tenant: "acme\x00"},
			"invalid UTF-8 tenant":      {URL: "https://example.com/", Tenant: "acme\xff"},
			"description with NUL":      {URL: "https://example.com/", Description: "a\x00b"},
			"invalid UTF-8 description": {URL: "https://example.com/", Description: "caf\xe9"},
			"URL with NUL":              {URL: "https://example.com/\x00"},
			"invalid UTF-8 URL":         {URL: "https://example.com/caf\xe9"},
			"invalid UTF-8 host":        {URL: "https://exa\xffmple.com/"},
			"event type with NUL":       {URL: "https://example.com/", EventTypes: []string{"a\x00"}},
			"invalid UTF-8 event type":  {URL: "https://example.com/", EventTypes: []string{"a.\xff.*"}},
		} {
			_, err := bundle.outbox.EndpointCreateTx(ctx, tx, params)
			require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, name)
		}
		for name, params := range map[string]*outbox.EndpointUpdateParams{
			"description with NUL":      {Description: ptr("a\x00b")},
			"invalid UTF-8 description": {Description: ptr("caf\xe9")},
			"invalid UTF-8 URL":         {URL: ptr("https://example.com/caf\xe9")},
			"event type with NUL":       {EventTypes: []string{"a\x00"}},
		} {
			_, err := bundle.outbox.EndpointUpdateTx(ctx, tx, existing.ID, params)
			require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, name)
		}
		for _, reason := range []string{"maintenance\x00", "caf\xe9"} {
			_, err := bundle.outbox.EndpointDisableTx(ctx, tx, existing.ID, reason)
			require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, "reason %q", reason)
		}
		_, err = bundle.outbox.EndpointList(ctx, &outbox.EndpointListParams{Tenant: ptr("acme\x00")})
		require.ErrorIs(t, err, outbox.ErrInvalidEndpoint)
		_, err = bundle.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{Status: "dead\x00"})
		require.Error(t, err)

		// The transaction is intact: a later statement in it succeeds and
		// commits what that statement wrote, and nothing else.
		created, err := bundle.outbox.EndpointCreateTx(ctx, tx, &outbox.EndpointParams{
			URL: "https://example.com/café", Description: "ünïcode", Tenant: "açme",
		})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		list, err := bundle.outbox.EndpointList(ctx, nil)
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, existing.Endpoint, list[0], "the refused update and disable changed nothing")
		require.Equal(t, created.Endpoint, list[1])
	})

	t.Run("UpdateDisableEnableDelete", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		ep := bundle.endpoint(t, "https://example.com/a", &outbox.EndpointParams{Tenant: "acme", EventTypes: []string{"x"}})
		bundle.endpoint(t, "https://example.com/b", nil)

		url, noCap, timeout, ordered := "https://example.com/new", -1, 3*time.Second, true
		updated, err := bundle.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{
			URL: &url, EventTypes: []string{}, MaxInFlight: &noCap, Timeout: &timeout, Ordered: &ordered,
		})
		require.NoError(t, err)
		require.Equal(t, url, updated.URL)
		require.Empty(t, updated.EventTypes)
		require.Equal(t, outbox.NoMaxInFlight, updated.MaxInFlight, "no cap reads as it is written")
		require.Equal(t, timeout, updated.Timeout)
		require.True(t, updated.Ordered)
		require.Equal(t, "acme", updated.Tenant)

		// What is read can be written back, capped or not.
		got, err := bundle.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.Equal(t, -1, got.MaxInFlight)
		again, err := bundle.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{MaxInFlight: &got.MaxInFlight})
		require.NoError(t, err)
		require.Equal(t, -1, again.MaxInFlight)
		uncapped := bundle.endpoint(t, "https://example.com/uncapped", &outbox.EndpointParams{MaxInFlight: got.MaxInFlight})
		require.Equal(t, -1, uncapped.MaxInFlight)
		capped := 3
		again, err = bundle.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{MaxInFlight: &capped})
		require.NoError(t, err)
		require.Equal(t, 3, again.MaxInFlight)
		zero := 0
		_, err = bundle.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{MaxInFlight: &zero})
		require.ErrorIs(t, err, outbox.ErrInvalidEndpoint)

		bad := "not a url"
		_, err = bundle.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{URL: &bad})
		require.ErrorIs(t, err, outbox.ErrInvalidEndpoint)
		_, err = bundle.outbox.EndpointUpdate(ctx, uuid.New(), &outbox.EndpointUpdateParams{})
		require.ErrorIs(t, err, outbox.ErrNotFound)

		disabled, err := bundle.outbox.EndpointDisable(ctx, ep.ID, "maintenance")
		require.NoError(t, err)
		require.False(t, disabled.Enabled)
		require.Equal(t, "maintenance", disabled.DisabledReason)
		enabled, err := bundle.outbox.EndpointEnable(ctx, ep.ID)
		require.NoError(t, err)
		require.True(t, enabled.Enabled)
		require.Empty(t, enabled.DisabledReason)

		tenant := "acme"
		list, err := bundle.outbox.EndpointList(ctx, &outbox.EndpointListParams{Tenant: &tenant})
		require.NoError(t, err)
		require.Len(t, list, 1)
		all, err := bundle.outbox.EndpointList(ctx, &outbox.EndpointListParams{Limit: 10})
		require.NoError(t, err)
		require.Len(t, all, 3)

		require.NoError(t, bundle.outbox.EndpointDelete(ctx, ep.ID))
		require.ErrorIs(t, bundle.outbox.EndpointDelete(ctx, ep.ID), outbox.ErrNotFound)
		_, err = bundle.outbox.EndpointGet(ctx, ep.ID)
		require.ErrorIs(t, err, outbox.ErrNotFound)
	})

	t.Run("TxTwinsRollBack", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		tx, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		ep, err := bundle.outbox.EndpointCreateTx(ctx, tx, &outbox.EndpointParams{URL: "https://example.com/"})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		_, err = bundle.outbox.EndpointGet(ctx, ep.ID)
		require.ErrorIs(t, err, outbox.ErrNotFound)

		require.NoError(t, pgx.BeginFunc(ctx, bundle.pool, func(tx pgx.Tx) error {
			_, err := bundle.outbox.EndpointCreateTx(ctx, tx, &outbox.EndpointParams{URL: "https://example.com/"})
			return err
		}))
		list, err := bundle.outbox.EndpointList(ctx, nil)
		require.NoError(t, err)
		require.Len(t, list, 1)
	})

	t.Run("DeletedEndpointsDeliveriesFinishWithoutSending", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		receiver := okSink(t)
		ep := bundle.endpoint(t, receiver.URL(), nil)
		res := bundle.publish(t, &outbox.Event{Type: "x"})
		require.Equal(t, 1, res[0].Deliveries)
		require.NoError(t, bundle.outbox.EndpointDelete(ctx, ep.ID))

		startRiver(t, bundle.pool, bundle.outbox)
		require.Eventually(t, func() bool {
			var state string
			require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT state FROM river_job").Scan(&state))
			return state == "completed"
		}, 10*time.Second, 10*time.Millisecond)
		require.Empty(t, receiver.all())
	})

	t.Run("DeleteWhileAnAttemptIsRecordedDoesNotDeadlock", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		arrived, release := make(chan struct{}, 1), make(chan struct{})
		receiver := newSink(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusInternalServerError) // a failure writes the endpoint's health
		})
		ep := bundle.endpoint(t, receiver.URL(), nil)
		startRiver(t, bundle.pool, bundle.outbox)
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release) // before River stops
			}
		})
		bundle.publish(t, &outbox.Event{Type: "x"})
		<-arrived

		// waiting reports whether a statement containing text waits for a
		// lock.
		waiting := func(text string) bool {
			var n int
			require.NoError(t, bundle.pool.QueryRow(ctx, `
				SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`,
				text).Scan(&n))
			return n > 0
		}

		// Line the two up: another transaction holds the endpoint's row
		// (as a delivery's insert does), the deletion queues for it, then
		// the attempt is recorded. Taking the delivery before the endpoint,
		// the record waited behind the deletion while the deletion's
		// cascade waited for the delivery: a deadlock.
		holder, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		defer holder.Rollback(ctx) //nolint:errcheck
		_, err = holder.Exec(ctx, "SELECT 1 FROM wharf_outbox_endpoints WHERE id = $1 FOR KEY SHARE", ep.ID)
		require.NoError(t, err)
		deleted := make(chan error, 1)
		go func() { deleted <- bundle.outbox.EndpointDelete(ctx, ep.ID) }()
		require.Eventually(t, func() bool { return waiting("DELETE FROM wharf_outbox_endpoints") },
			10*time.Second, 5*time.Millisecond)
		close(release)
		require.Eventually(t, func() bool {
			var attempts int
			require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_attempts").Scan(&attempts))
			return attempts > 0 || waiting("INSERT INTO wharf_outbox_attempts")
		}, 10*time.Second, 5*time.Millisecond)
		require.NoError(t, holder.Commit(ctx))

		require.NoError(t, <-deleted)
		_, err = bundle.outbox.EndpointGet(ctx, ep.ID)
		require.ErrorIs(t, err, outbox.ErrNotFound)
		require.Eventually(t, func() bool {
			var state string
			require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT state FROM river_job").Scan(&state))
			return state == "completed" || state == "retryable" || state == "available"
		}, 10*time.Second, 5*time.Millisecond)
		var errs string
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT coalesce(errors::text, '') FROM river_job").Scan(&errs))
		require.NotContains(t, errs, "deadlock")
	})

	t.Run("ReplayOfPendingDeliveryIsRefused", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		ep := bundle.endpoint(t, "https://example.com/", nil)
		res := bundle.publish(t, &outbox.Event{Type: "x"})
		list, err := bundle.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EventID: res[0].EventID})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, ep.ID, list[0].EndpointID)
		require.ErrorIs(t, bundle.outbox.DeliveryReplay(ctx, list[0].ID), outbox.ErrDeliveryInProgress)
		_, err = bundle.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EventID: "nope"})
		require.ErrorIs(t, err, outbox.ErrNotFound)
	})
}

func ptr[T any](v T) *T { return &v }
