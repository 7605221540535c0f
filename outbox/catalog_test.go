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

// requiredFields is a stand-in schema compiler for these tests (the real
// one, JSON Schema, is the jsonschema module's, tested there): a schema is
// a list of field names the data must have.
func requiredFields(schema json.RawMessage) (outbox.SchemaValidator, error) {
	var fields []string
	if err := json.Unmarshal(schema, &fields); err != nil {
		return nil, err
	}
	return requiredValidator(fields), nil
}

type requiredValidator []string

func (v requiredValidator) Validate(data json.RawMessage) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return &outbox.SchemaViolation{Message: "not an object"}
	}
	for _, f := range v {
		if _, ok := obj[f]; !ok {
			return &outbox.SchemaViolation{Pointer: "/" + f, Message: "missing"}
		}
	}
	return nil
}

func catalogConfig(strict bool) *outbox.Config {
	cfg := testConfig()
	cfg.Catalog = &outbox.Catalog{
		Strict:  strict,
		Compile: requiredFields,
		Types: []outbox.EventType{
			{Name: "invoice.paid", Description: "An invoice was paid.", Schema: json.RawMessage(`["id","cents"]`), Example: json.RawMessage(`{"id":"in_1","cents":100}`)},
			{Name: "invoice.voided", Description: "An invoice was voided."},
			{Name: "account.closed", Description: "An account was closed.", Deprecated: true},
		},
	}
	return cfg
}

func TestCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("PublishRefusesDataThatFailsItsSchemaAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, catalogConfig(false))
		bundle.endpoint(t, "https://example.com/hook", nil)
		tx, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = bundle.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "invoice.paid", Data: map[string]any{"id": "in_1"}})
		require.ErrorIs(t, err, outbox.ErrInvalidEvent)
		var de *outbox.EventDataError
		require.True(t, errors.As(err, &de))
		require.Equal(t, "/cents", de.Pointer)
		require.Equal(t, "invoice.paid", de.Type)
		require.Contains(t, err.Error(), "/cents")
		// The transaction is untouched: it still works and holds no event.
		var events int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_events").Scan(&events))
		require.Zero(t, events)

		res, err := bundle.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "invoice.paid", Data: map[string]any{"id": "in_1", "cents": 5}})
		require.NoError(t, err)
		require.Equal(t, 1, res.Deliveries)
		// Not strict: a type the catalog does not list goes unchecked.
		_, err = bundle.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "user.created", Data: 1})
		require.NoError(t, err)
	})

	t.Run("StrictRefusesUnknownTypesAndFilters", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, catalogConfig(true))
		tx, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = bundle.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "user.created", Data: 1})
		require.ErrorIs(t, err, outbox.ErrInvalidEvent)
		require.Contains(t, err.Error(), "not in the event catalog")
		_, err = bundle.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "invoice.voided", Data: 1})
		require.NoError(t, err)

		for _, filter := range []string{"invoice.payed", "user.*", "invoice"} {
			_, err := bundle.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://example.com/a", EventTypes: []string{filter}})
			require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, filter)
			var fe *outbox.FieldError
			require.True(t, errors.As(err, &fe), filter)
			require.Equal(t, "event_types", fe.Field)
		}
		ep, err := bundle.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://example.com/a", EventTypes: []string{"invoice.*", "account.closed", "*"}})
		require.NoError(t, err)
		_, err = bundle.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{EventTypes: []string{"nope"}})
		require.ErrorIs(t, err, outbox.ErrInvalidEndpoint)
		got, err := bundle.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.Equal(t, []string{"invoice.*", "account.closed", "*"}, got.EventTypes)
	})

	t.Run("ListsTypesByName", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, catalogConfig(false))
		var names []string
		for _, typ := range bundle.outbox.EventTypes() {
			names = append(names, typ.Name)
		}
		require.Equal(t, []string{"account.closed", "invoice.paid", "invoice.voided", outbox.EventDeliveryDead,
			outbox.EventCircuitClosed, outbox.EventCircuitOpened, outbox.EventEndpointDisabled, outbox.EventEndpointEnabled,
			outbox.EventSecretRotated}, names, "the application's and the operational ones, by name")
		typ, ok := bundle.outbox.EventTypeByName("invoice.paid")
		require.True(t, ok)
		require.JSONEq(t, `{"id":"in_1","cents":100}`, string(typ.Example))
		_, ok = bundle.outbox.EventTypeByName("invoice")
		require.False(t, ok)
	})

	t.Run("NewRefusesABadCatalog", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		for name, c := range map[string]*outbox.Catalog{
			"duplicate":          {Types: []outbox.EventType{{Name: "a.b"}, {Name: "a.b"}}},
			"bad name":           {Types: []outbox.EventType{{Name: "a *"}}},
			"schema, no Compile": {Types: []outbox.EventType{{Name: "a.b", Schema: json.RawMessage(`["x"]`), Example: json.RawMessage(`{"x":1}`)}}},
			"schema, no example": {Compile: requiredFields, Types: []outbox.EventType{{Name: "a.b", Schema: json.RawMessage(`["x"]`)}}},
			"bad schema":         {Compile: requiredFields, Types: []outbox.EventType{{Name: "a.b", Schema: json.RawMessage(`{}`), Example: json.RawMessage(`{}`)}}},
			"example not JSON":   {Types: []outbox.EventType{{Name: "a.b", Example: json.RawMessage(`{`)}}},
			"example fails":      {Compile: requiredFields, Types: []outbox.EventType{{Name: "a.b", Schema: json.RawMessage(`["x"]`), Example: json.RawMessage(`{}`)}}},
		} {
			cfg := testConfig()
			cfg.Catalog = c
			_, err := outbox.New(bundle.pool, cfg)
			require.ErrorIs(t, err, outbox.ErrInvalidConfig, name)
			require.Contains(t, err.Error(), "Catalog", name)
		}
	})
}

func TestPublishTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bundle := setup(t, testConfig())
	receiver, other := okSink(t), okSink(t)
	// The filter does not match: a targeted event goes all the same, to
	// this endpoint only.
	ep := bundle.endpoint(t, receiver.URL(), &outbox.EndpointParams{Tenant: "acme", EventTypes: []string{"invoice.paid"}})
	bundle.endpoint(t, other.URL(), &outbox.EndpointParams{Tenant: "acme"})
	foreign := bundle.endpoint(t, other.URL(), &outbox.EndpointParams{Tenant: "globex"})
	off := bundle.endpoint(t, other.URL(), &outbox.EndpointParams{Tenant: "acme"})
	_, err := bundle.outbox.EndpointDisable(ctx, off.ID, "test")
	require.NoError(t, err)

	publishTo := func(id uuid.UUID) (*outbox.PublishResult, error) {
		tx, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		res, err := bundle.outbox.PublishToTx(ctx, tx, id, &outbox.Event{Type: "wharf.test", Tenant: "acme", Data: map[string]string{"hello": "there"}})
		if err != nil {
			return nil, err
		}
		return res, tx.Commit(ctx)
	}
	_, err = publishTo(foreign.ID)
	require.ErrorIs(t, err, outbox.ErrNotFound)
	_, err = publishTo(uuid.New())
	require.ErrorIs(t, err, outbox.ErrNotFound)
	_, err = publishTo(off.ID)
	require.ErrorIs(t, err, outbox.ErrEndpointDisabled)

	startRiver(t, bundle.pool, bundle.outbox)
	res, err := publishTo(ep.ID)
	require.NoError(t, err)
	require.Equal(t, 1, res.Deliveries)
	d := bundle.awaitDelivery(t, ep.ID, res.EventID, outbox.StatusSucceeded)
	require.Equal(t, "wharf.test", d.EventType)
	require.Equal(t, "acme", d.Tenant)
	require.Equal(t, map[string]int{res.EventID: 1}, receiver.byWebhookID())
	require.NoError(t, receiver.all()[0].verifyWith(ep.Secret))
	require.Empty(t, other.all())

	var events int
	require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_events WHERE type = 'wharf.test'").Scan(&events))
	require.Equal(t, 1, events, "refused targeted publishes store nothing")

	tenant := "acme"
	list, err := bundle.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{Tenant: &tenant})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "wharf.test", list[0].EventType)
	tenant = "globex"
	list, err = bundle.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{Tenant: &tenant})
	require.NoError(t, err)
	require.Empty(t, list)

	// Recovering another endpoint of the tenant never sends it the event
	// meant for ep (found by review: it did).
	late := bundle.endpoint(t, other.URL(), &outbox.EndpointParams{Tenant: "acme"})
	n, err := bundle.outbox.EndpointRecover(ctx, late.ID, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestEndpointErrorsNameTheirField(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bundle := setup(t, testConfig())
	for field, params := range map[string]*outbox.EndpointParams{
		"url":         {URL: "ftp://example.com"},
		"description": {URL: "https://example.com", Description: strings.Repeat("x", 2000)},
		"event_types": {URL: "https://example.com", EventTypes: []string{"a b"}},
	} {
		_, err := bundle.outbox.EndpointCreate(ctx, params)
		var fe *outbox.FieldError
		require.True(t, errors.As(err, &fe), field)
		require.Equal(t, field, fe.Field)
		require.ErrorIs(t, err, outbox.ErrInvalidEndpoint)
	}
	// A host the SSRF guard always refuses is the URL's fault too.
	_, err := bundle.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: "http://169.254.169.254/latest"})
	var fe *outbox.FieldError
	require.True(t, errors.As(err, &fe))
	require.Equal(t, "url", fe.Field)
	require.ErrorIs(t, err, outbox.ErrBlockedAddress)
}
