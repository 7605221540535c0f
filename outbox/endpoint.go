package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/audit"
	"github.com/wharfhq/wharf/internal/catalog"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/delivery"
	"github.com/wharfhq/wharf/internal/egress"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/secretbox"
	"github.com/wharfhq/wharf/internal/shared"
)

// NoMaxInFlight is the MaxInFlight of an endpoint without a concurrency cap.
const NoMaxInFlight = -1

const (
	maxURLLen         = 2048
	maxDescriptionLen = 1024
	maxEventTypes     = 100
	maxMaxInFlight    = delivery.MaxInFlightLimit
	defaultListLimit  = 100
	maxListLimit      = 10000
)

// Endpoint is a receiver of webhooks. Its secrets are not part of it: they
// are returned only by EndpointCreate, EndpointRotateSecret and
// EndpointSecret.
type Endpoint struct {
	// ID identifies the endpoint.
	ID uuid.UUID
	// URL is where events are POSTed.
	URL string
	// Description is free text for people.
	Description string
	// EventTypes is the endpoint's filter: exact types, "prefix.*" (every
	// type starting with "prefix.") or "*". Empty means every type.
	EventTypes []string
	// DataFilter is the endpoint's content filter, a JSON object its
	// events' data must contain (see EndpointParams.DataFilter); nil when
	// it has none.
	DataFilter json.RawMessage
	// Tenant scopes the endpoint: it receives only events of its tenant.
	Tenant string
	// MaxInFlight caps the requests in flight to the endpoint at once; -1
	// (NoMaxInFlight) is no cap, as in EndpointParams and
	// EndpointUpdateParams, so a value read can be written back.
	MaxInFlight int
	// Timeout is the request timeout.
	Timeout time.Duration
	// Ordered makes deliveries with an ordering key wait for every earlier
	// one with the same key (earlier in PublishTx order: see
	// Event.OrderingKey).
	Ordered bool
	// Enabled is false once the endpoint is disabled, by EndpointDisable or
	// for failing; disabled endpoints get no new deliveries.
	Enabled bool
	// DisabledReason says why the endpoint is disabled.
	DisabledReason string
	// DisabledAt is when the endpoint was disabled.
	DisabledAt *time.Time
	// ConsecutiveFailures counts failed attempts since the last success.
	ConsecutiveFailures int
	// FailingSince is the first failure since the last success.
	FailingSince *time.Time
	// LastSuccessAt is the last successful attempt (kept to about a second).
	LastSuccessAt *time.Time
	// LastFailureAt is the last failed attempt.
	LastFailureAt *time.Time
	// RateLimit caps how fast deliveries go to the endpoint; nil when
	// nothing does.
	RateLimit *RateLimit
	// CircuitState is the endpoint's circuit breaker: CircuitClosed,
	// CircuitOpen (deliveries wait until CircuitOpenUntil) or
	// CircuitHalfOpen (one delivery probes the endpoint).
	CircuitState CircuitState
	// CircuitOpenedAt is when the circuit last opened, nil while closed.
	CircuitOpenedAt *time.Time
	// CircuitOpenUntil is when the circuit's cool-down ends (the database's
	// clock), nil while closed.
	CircuitOpenUntil *time.Time
	// CircuitOpenings counts the times the circuit opened since it was
	// last closed: each cool-down is twice the one before.
	CircuitOpenings int
	// Headers are the custom headers sent with every attempt.
	Headers http.Header
	// Auth describes how deliveries authenticate to the endpoint, without
	// its credentials; nil when they do not.
	Auth *EndpointAuthInfo
	// PreviousSecretExpiresAt is when the secret replaced by the last
	// rotation stops signing: until then both signatures are sent. Nil when
	// the secret was never rotated.
	PreviousSecretExpiresAt *time.Time
	// CreatedAt is when the endpoint was created.
	CreatedAt time.Time
	// UpdatedAt is when the endpoint was last changed.
	UpdatedAt time.Time
}

// EndpointWithSecret is an endpoint with its current signing secret.
type EndpointWithSecret struct {
	*Endpoint
	// Secret is the current "whsec_" signing secret. Give it to the
	// receiver; never log it.
	Secret string
}

// EndpointParams are the parameters of a new endpoint.
type EndpointParams struct {
	// URL is where events are POSTed: an absolute http or https URL. It is
	// checked against the SSRF guard at every connection, not here.
	URL string
	// Description is free text for people. At most 1024 bytes of UTF-8
	// without NUL.
	Description string
	// EventTypes is the filter: exact types, "prefix.*" or "*". Empty or nil
	// means every type. At most 100 entries.
	EventTypes []string
	// DataFilter, beside EventTypes, is a JSON object the event's data must
	// contain for the endpoint to receive it, as Postgres's jsonb @> tests
	// containment: {"account":"acct_1"} takes the events whose data has
	// that account, {"tags":["vip"]} those whose tags include "vip",
	// {"order":{"status":"paid"}} a nested field. It is tested in the
	// publish statement, so fan-out stays one statement; operational
	// events (wharf.…) are not filtered, and no filter takes an event
	// whose data jsonb cannot hold (a NUL character, a lone surrogate
	// escape, bytes that are not UTF-8). At most 4 KiB. Defaults to none:
	// every event its type filter takes.
	DataFilter json.RawMessage
	// Tenant scopes the endpoint to one tenant's events. Empty means events
	// published without a tenant. At most 256 bytes of UTF-8 without NUL.
	Tenant string
	// Secret is the signing secret, "whsec_" and the base64 of 24 to 64
	// bytes. Defaults to a new secret of 32 random bytes.
	Secret string
	// MaxInFlight caps the requests in flight to the endpoint at once, 1 to
	// 1000. Defaults to Config.MaxInFlight; -1 (NoMaxInFlight) means no cap.
	MaxInFlight int
	// Timeout is the request timeout, at most Config.MaxEndpointTimeout (1
	// minute unless set). Defaults to Config.EndpointTimeout.
	Timeout time.Duration
	// Ordered makes deliveries with an ordering key wait for every earlier
	// one with the same key (earlier in PublishTx order: see
	// Event.OrderingKey). Defaults to false.
	Ordered bool
	// Headers are sent with every attempt, such as a routing or API
	// version header a receiver's gateway wants. Names are HTTP tokens
	// (stored canonical: "x-team" becomes "X-Team"); values are UTF-8
	// without control characters other than tab; at most 32 values and 8
	// KiB in all. Headers Wharf sets (webhook-id, webhook-timestamp,
	// webhook-signature, Content-Type, Content-Length, User-Agent,
	// traceparent, tracestate), hop-by-hop headers (Connection,
	// Transfer-Encoding…), Host, Expect, Content-Encoding and
	// Authorization (set Auth instead, which keeps it secret) are refused.
	// Headers are returned by reads (Endpoint.Headers): keep credentials in
	// Auth. Defaults to none.
	Headers http.Header
	// Auth is how deliveries authenticate to the endpoint besides the
	// signature: a bearer token, basic authentication or OAuth 2.0 client
	// credentials. Defaults to none.
	Auth *EndpointAuth
	// RateLimit caps how fast deliveries go to the endpoint, across every
	// process, beside MaxInFlight: deliveries beyond it wait (snoozed,
	// without using an attempt) for their turn. Defaults to none.
	RateLimit *RateLimit
}

// EndpointUpdateParams changes an endpoint; nil fields stay as they are.
type EndpointUpdateParams struct {
	// URL replaces the URL.
	URL *string
	// Description replaces the description.
	Description *string
	// EventTypes replaces the filter when not nil; an empty, non-nil slice
	// subscribes to every type.
	EventTypes []string
	// DataFilter replaces the content filter when not nil; an empty,
	// non-nil value (or JSON null) removes it. It decides which events
	// published from then on the endpoint receives.
	DataFilter json.RawMessage
	// MaxInFlight replaces the cap, 1 to 1000; -1 (NoMaxInFlight) means no
	// cap. A lower cap holds at once: no request starts while as many as it
	// are in flight, those started under the old cap included.
	MaxInFlight *int
	// Timeout replaces the request timeout.
	Timeout *time.Duration
	// Ordered replaces the ordering switch.
	Ordered *bool
	// Headers replaces the custom headers when not nil (checked as
	// EndpointParams.Headers); an empty, non-nil Header removes them.
	Headers http.Header
	// Auth replaces the authentication when not nil; a pointer to the zero
	// EndpointAuth removes it. A changed OAuth 2.0 client's cached token is
	// not used again.
	Auth *EndpointAuth
	// RateLimit replaces the rate limit when not nil; a pointer to the zero
	// RateLimit removes it. It applies to the tokens taken after it;
	// deliveries already waiting keep their turns (given at most a minute
	// ahead), and others need not queue behind them.
	RateLimit *RateLimit
}

// EndpointListParams filters EndpointList. A nil *EndpointListParams lists
// the first 100 endpoints.
type EndpointListParams struct {
	// Tenant lists only that tenant's endpoints when not nil.
	Tenant *string
	// Limit is the most endpoints of one page. Defaults to 100, at most
	// 10000.
	Limit int
	// After is the cursor of the last endpoint of the previous page
	// (EndpointCursor of it). Defaults to the first page.
	After string
}

// EndpointCursor returns the list cursor of e: give it as
// EndpointListParams.After to list the endpoints after e.
func EndpointCursor(e *Endpoint) string { return shared.EncodeTimeCursor(e.CreatedAt, e.ID) }

// endpoints writes and reads endpoints: it checks their parameters, seals
// their secrets and judges their URLs by the SSRF guard. Its methods take
// the pool or the caller's transaction, for the Endpoint… methods and
// their …Tx twins.
type endpoints struct {
	config  *Config
	keys    *secretbox.Ring
	egress  *egress.Client
	catalog *catalog.Catalog
	// kick asks, in the change's transaction, for the job that publishes
	// the notices a change left.
	kick func(ctx context.Context, db dbsqlc.DBTX) error
}

// EndpointCreate creates an endpoint and returns it with its secret. Bad
// parameters return an error where errors.Is(err, ErrInvalidEndpoint) is
// true.
func (o *Outbox) EndpointCreate(ctx context.Context, params *EndpointParams) (*EndpointWithSecret, error) {
	return inTx(ctx, o, func(tx pgx.Tx) (*EndpointWithSecret, error) { return o.endpoints.create(ctx, tx, params) })
}

// EndpointCreateTx is EndpointCreate in tx. Parameters it refuses return an error
// before any statement runs, so tx stays usable.
func (o *Outbox) EndpointCreateTx(ctx context.Context, tx pgx.Tx, params *EndpointParams) (*EndpointWithSecret, error) {
	return o.endpoints.create(ctx, tx, params)
}

func (s *endpoints) create(ctx context.Context, db dbsqlc.DBTX, params *EndpointParams) (*EndpointWithSecret, error) {
	want, err := s.check(params)
	if err != nil {
		return nil, err
	}
	secret, err := secretOrNew(params.Secret)
	if err != nil {
		return nil, err
	}
	headers, err := outboxtype.EncodeHeaders(want.headers)
	if err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("outbox: endpoint id: %w", err)
	}
	stored, err := s.keys.Seal(id, secretbox.FieldSecret, secret)
	if err != nil {
		return nil, err
	}
	auth, err := s.keys.EncodeAuth(id, want.auth)
	if err != nil {
		return nil, err
	}
	row, err := dbsqlc.New(db).OutboxEndpointInsert(ctx, dbsqlc.OutboxEndpointInsertParams{
		ID:                 id,
		Url:                params.URL,
		Description:        params.Description,
		EventTypes:         want.eventTypes,
		Tenant:             params.Tenant,
		Secret:             stored,
		MaxInFlight:        want.storedCap,
		TimeoutMs:          int32(want.timeout / time.Millisecond),
		Ordered:            params.Ordered,
		Headers:            headers,
		Auth:               auth,
		RateLimitPerSecond: want.ratePerSecond,
		RateLimitBurst:     want.rateBurst,
		Now:                s.config.now(),
		DataFilter:         want.dataFilter,
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: create endpoint: %w", err)
	}
	if err := s.record(ctx, db, &row, "endpoint.create", "", map[string]any{"url": shared.RedactURL(row.Url)}); err != nil {
		return nil, err
	}
	return &EndpointWithSecret{Endpoint: endpointFromRow(&row), Secret: secret}, nil
}

// EndpointGet returns an endpoint, or an error where errors.Is(err,
// ErrNotFound) is true.
func (o *Outbox) EndpointGet(ctx context.Context, id uuid.UUID) (*Endpoint, error) {
	row, err := endpointRow(ctx, o.pool, id)
	if err != nil {
		return nil, err
	}
	return endpointFromRow(row), nil
}

// EndpointGetTx is EndpointGet in tx.
func (o *Outbox) EndpointGetTx(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*Endpoint, error) {
	row, err := endpointRow(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	return endpointFromRow(row), nil
}

// EndpointSecret returns an endpoint's current signing secret, decrypted
// when Config.SecretKeys sealed it; a secret it cannot decrypt returns an
// error where errors.Is(err, ErrSecretDecrypt) is true.
func (o *Outbox) EndpointSecret(ctx context.Context, id uuid.UUID) (string, error) {
	return o.endpoints.secret(ctx, o.pool, id)
}

// EndpointSecretTx is EndpointSecret in tx.
func (o *Outbox) EndpointSecretTx(ctx context.Context, tx pgx.Tx, id uuid.UUID) (string, error) {
	return o.endpoints.secret(ctx, tx, id)
}

func (s *endpoints) secret(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID) (string, error) {
	row, err := endpointRow(ctx, db, id)
	if err != nil {
		return "", err
	}
	return s.keys.Open(row.ID, secretbox.FieldSecret, row.Secret)
}

func endpointRow(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID) (*dbsqlc.WharfOutboxEndpoint, error) {
	row, err := dbsqlc.New(db).OutboxEndpointGet(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("outbox: endpoint %s: %w", id, translateError(err))
	}
	return &row, nil
}

// EndpointList returns a page of endpoints, oldest first; page on with
// EndpointListParams.After set to EndpointCursor of the last.
func (o *Outbox) EndpointList(ctx context.Context, params *EndpointListParams) ([]*Endpoint, error) {
	if params == nil {
		params = &EndpointListParams{}
	}
	limit, err := listLimit(params.Limit)
	if err != nil {
		return nil, err
	}
	if params.Tenant != nil {
		if err := checkTenant(*params.Tenant); err != nil {
			return nil, err
		}
	}
	query := dbsqlc.OutboxEndpointListParams{Tenant: params.Tenant, MaxRows: limit}
	if params.After != "" {
		at, id, err := shared.DecodeTimeCursor(params.After)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidCursor, err)
		}
		query.AfterCreatedAt, query.AfterID = &at, &id
	}
	rows, err := o.queries.OutboxEndpointList(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("outbox: list endpoints: %w", err)
	}
	out := make([]*Endpoint, len(rows))
	for i := range rows {
		out[i] = endpointFromRow(&rows[i])
	}
	return out, nil
}

// EndpointUpdate changes an endpoint and returns it. Bad parameters return
// an error where errors.Is(err, ErrInvalidEndpoint) is true and change
// nothing.
func (o *Outbox) EndpointUpdate(ctx context.Context, id uuid.UUID, params *EndpointUpdateParams) (*Endpoint, error) {
	return inTx(ctx, o, func(tx pgx.Tx) (*Endpoint, error) { return o.endpoints.update(ctx, tx, id, params) })
}

// EndpointUpdateTx is EndpointUpdate in tx. Parameters it refuses return an error
// before any statement runs, so tx stays usable.
func (o *Outbox) EndpointUpdateTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, params *EndpointUpdateParams) (*Endpoint, error) {
	return o.endpoints.update(ctx, tx, id, params)
}

func (s *endpoints) update(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID, params *EndpointUpdateParams) (*Endpoint, error) {
	if params == nil {
		return nil, fmt.Errorf("%w: nil params", ErrInvalidEndpoint)
	}
	update := dbsqlc.OutboxEndpointUpdateParams{ID: id, Now: s.config.now(), Url: params.URL, Description: params.Description, Ordered: params.Ordered}
	if params.URL != nil {
		if err := s.checkURL(*params.URL); err != nil {
			return nil, err
		}
	}
	if params.Description != nil {
		if err := checkDescription(*params.Description); err != nil {
			return nil, &FieldError{Field: "description", Err: err}
		}
	}
	if params.EventTypes != nil {
		eventTypes, err := s.checkEventTypes(params.EventTypes)
		if err != nil {
			return nil, &FieldError{Field: "event_types", Err: err}
		}
		update.EventTypes = eventTypes
	}
	if params.DataFilter != nil {
		filter, err := checkDataFilter(params.DataFilter)
		if err != nil {
			return nil, &FieldError{Field: "data_filter", Err: err}
		}
		update.SetDataFilter, update.DataFilter = true, filter
	}
	if params.MaxInFlight != nil {
		if *params.MaxInFlight == 0 {
			return nil, fmt.Errorf("%w: MaxInFlight must be positive, or -1 for no cap", ErrInvalidEndpoint)
		}
		maxInFlight, err := s.maxInFlight(*params.MaxInFlight)
		if err != nil {
			return nil, err
		}
		update.MaxInFlight = &maxInFlight
	}
	if params.Timeout != nil {
		if err := checkTimeout(*params.Timeout, s.config.MaxEndpointTimeout); err != nil {
			return nil, fmt.Errorf("%w: timeout %w", ErrInvalidEndpoint, err)
		}
		ms := int32(*params.Timeout / time.Millisecond)
		update.TimeoutMs = &ms
	}
	if params.Headers != nil {
		headers, err := checkHeaders(params.Headers)
		if err != nil {
			return nil, err
		}
		if update.Headers, err = outboxtype.EncodeHeaders(headers); err != nil {
			return nil, err
		}
	}
	if params.Auth != nil {
		auth, err := checkAuth(s.egress, params.Auth)
		if err != nil {
			return nil, err
		}
		if update.Auth, err = s.keys.EncodeAuth(id, auth); err != nil {
			return nil, err
		}
	}
	if params.RateLimit != nil {
		perSecond, burst, err := checkRateLimit(params.RateLimit)
		if err != nil {
			return nil, err
		}
		update.RateLimitPerSecond, update.RateLimitBurst = &perSecond, &burst
	}
	row, err := dbsqlc.New(db).OutboxEndpointUpdate(ctx, update)
	if err != nil {
		return nil, fmt.Errorf("outbox: update endpoint %s: %w", id, translateError(err))
	}
	if fields := params.fields(); len(fields) > 0 {
		if err := s.record(ctx, db, &row, "endpoint.update", "", map[string]any{"fields": fields}); err != nil {
			return nil, err
		}
	}
	return endpointFromRow(&row), nil
}

// EndpointDisable disables an endpoint with a reason: it gets no new
// deliveries, and its pending ones are dead-lettered when their turn comes
// (replay them after EndpointEnable). A reason that is not UTF-8 or holds a
// NUL byte returns an error where errors.Is(err, ErrInvalidEndpoint) is
// true and changes nothing.
func (o *Outbox) EndpointDisable(ctx context.Context, id uuid.UUID, reason string) (*Endpoint, error) {
	return inTx(ctx, o, func(tx pgx.Tx) (*Endpoint, error) { return o.endpoints.disable(ctx, tx, id, reason) })
}

// EndpointDisableTx is EndpointDisable in tx. Parameters it refuses return an error
// before any statement runs, so tx stays usable.
func (o *Outbox) EndpointDisableTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, reason string) (*Endpoint, error) {
	return o.endpoints.disable(ctx, tx, id, reason)
}

func (s *endpoints) disable(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID, reason string) (*Endpoint, error) {
	if reason == "" {
		reason = "disabled by the application"
	}
	if err := checkText("reason", reason); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEndpoint, err)
	}
	row, err := dbsqlc.New(db).OutboxEndpointDisable(ctx, dbsqlc.OutboxEndpointDisableParams{ID: id, Reason: shared.Text(reason, 1024), Now: s.config.now()})
	if err != nil {
		return nil, fmt.Errorf("outbox: disable endpoint %s: %w", id, translateError(err))
	}
	if err := s.record(ctx, db, &row, "endpoint.disable", reason, nil); err != nil {
		return nil, err
	}
	if err := s.kick(ctx, db); err != nil {
		return nil, err
	}
	return endpointFromRow(&row), nil
}

// EndpointEnable enables an endpoint, forgets its failure streak and
// closes its circuit (also when it is enabled: an operator's way to let
// deliveries go at once to an endpoint known to be back).
func (o *Outbox) EndpointEnable(ctx context.Context, id uuid.UUID) (*Endpoint, error) {
	return inTx(ctx, o, func(tx pgx.Tx) (*Endpoint, error) { return o.endpoints.enable(ctx, tx, id) })
}

// EndpointEnableTx is EndpointEnable in tx.
func (o *Outbox) EndpointEnableTx(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*Endpoint, error) {
	return o.endpoints.enable(ctx, tx, id)
}

func (s *endpoints) enable(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID) (*Endpoint, error) {
	row, err := dbsqlc.New(db).OutboxEndpointEnable(ctx, dbsqlc.OutboxEndpointEnableParams{ID: id, Now: s.config.now()})
	if err != nil {
		return nil, fmt.Errorf("outbox: enable endpoint %s: %w", id, translateError(err))
	}
	if err := s.record(ctx, db, &row, "endpoint.enable", "", nil); err != nil {
		return nil, err
	}
	if err := s.kick(ctx, db); err != nil {
		return nil, err
	}
	return endpointFromRow(&row), nil
}

// EndpointDelete deletes an endpoint with its deliveries; their jobs finish
// without sending. Attempt logs stay until retention drops them.
func (o *Outbox) EndpointDelete(ctx context.Context, id uuid.UUID) error {
	_, err := inTx(ctx, o, func(tx pgx.Tx) (struct{}, error) { return struct{}{}, o.endpoints.delete(ctx, tx, id) })
	return err
}

// EndpointDeleteTx is EndpointDelete in tx.
func (o *Outbox) EndpointDeleteTx(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	return o.endpoints.delete(ctx, tx, id)
}

// endpointDelete locks the endpoint's row, then (by ON DELETE CASCADE) its
// deliveries' and its leases' rows: the lock order every statement that
// locks more than one of these rows keeps (see OutboxAttemptRecord), so
// that a deletion and an attempt being recorded cannot deadlock.
func (s *endpoints) delete(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID) error {
	rows, err := dbsqlc.New(db).OutboxEndpointDelete(ctx, id)
	if err != nil {
		return fmt.Errorf("outbox: delete endpoint %s: %w", id, err)
	}
	if len(rows) == 0 {
		return fmt.Errorf("outbox: delete endpoint %s: %w", id, ErrNotFound)
	}
	return s.record(ctx, db, &rows[0], "endpoint.delete", "", map[string]any{"url": shared.RedactURL(rows[0].Url)})
}

// RotateSecretParams tunes EndpointRotateSecret. A nil *RotateSecretParams
// means a generated secret and the configured overlap.
type RotateSecretParams struct {
	// Secret is the new secret. Defaults to a new one of 32 random bytes.
	Secret string
	// Overlap is how long the previous secret keeps signing too. Defaults
	// to Config.SecretRotationOverlap; -1 drops it at once.
	Overlap time.Duration
}

// EndpointRotateSecret gives an endpoint a new secret and returns it. The
// previous secret keeps signing for the overlap, so receivers can switch at
// their pace; a rotation during an overlap ends that overlap's old secret.
func (o *Outbox) EndpointRotateSecret(ctx context.Context, id uuid.UUID, params *RotateSecretParams) (*EndpointWithSecret, error) {
	return inTx(ctx, o, func(tx pgx.Tx) (*EndpointWithSecret, error) { return o.endpoints.rotateSecret(ctx, tx, id, params) })
}

// EndpointRotateSecretTx is EndpointRotateSecret in tx.
func (o *Outbox) EndpointRotateSecretTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, params *RotateSecretParams) (*EndpointWithSecret, error) {
	return o.endpoints.rotateSecret(ctx, tx, id, params)
}

func (s *endpoints) rotateSecret(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID, params *RotateSecretParams) (*EndpointWithSecret, error) {
	if params == nil {
		params = &RotateSecretParams{}
	}
	overlap := params.Overlap
	switch {
	case overlap == 0:
		overlap = s.config.SecretRotationOverlap
	case overlap == -1:
		overlap = 0
	case overlap < 0:
		return nil, fmt.Errorf("%w: overlap must not be negative (-1 drops the old secret at once)", ErrInvalidEndpoint)
	}
	secret, err := secretOrNew(params.Secret)
	if err != nil {
		return nil, err
	}
	stored, err := s.keys.Seal(id, secretbox.FieldSecret, secret)
	if err != nil {
		return nil, err
	}
	now := s.config.now()
	row, err := dbsqlc.New(db).OutboxEndpointRotateSecret(ctx, dbsqlc.OutboxEndpointRotateSecretParams{
		ID: id, Secret: stored, PreviousExpiresAt: now.Add(overlap), Now: now,
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: rotate secret of endpoint %s: %w", id, translateError(err))
	}
	if err := s.record(ctx, db, &row, "endpoint.rotate_secret", "", map[string]any{"previous_secret_until": now.Add(overlap)}); err != nil {
		return nil, err
	}
	if err := s.kick(ctx, db); err != nil {
		return nil, err
	}
	return &EndpointWithSecret{Endpoint: endpointFromRow(&row), Secret: secret}, nil
}

// record writes the audit log's entry of an action on an endpoint, in db
// (the action's transaction).
func (s *endpoints) record(ctx context.Context, db dbsqlc.DBTX, row *dbsqlc.WharfOutboxEndpoint, action, reason string, details map[string]any) error {
	return audit.Write(ctx, db, s.config.now(), audit.Record{
		Tenant: row.Tenant, Action: action, ObjectType: "endpoint", ObjectID: row.ID.String(),
		Reason: reason, Details: details,
	})
}

// fields names the fields an update sets, for the audit log.
func (p *EndpointUpdateParams) fields() []string {
	var out []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"url", p.URL != nil}, {"description", p.Description != nil}, {"event_types", p.EventTypes != nil},
		{"data_filter", p.DataFilter != nil},
		{"max_in_flight", p.MaxInFlight != nil}, {"timeout", p.Timeout != nil}, {"ordered", p.Ordered != nil},
		{"headers", p.Headers != nil}, {"auth", p.Auth != nil}, {"rate_limit", p.RateLimit != nil},
	} {
		if f.set {
			out = append(out, f.name)
		}
	}
	return out
}

func endpointFromRow(row *dbsqlc.WharfOutboxEndpoint) *Endpoint {
	ep := &Endpoint{
		ID:                      row.ID,
		URL:                     row.Url,
		Description:             row.Description,
		EventTypes:              row.EventTypes,
		DataFilter:              json.RawMessage(row.DataFilter),
		Tenant:                  row.Tenant,
		MaxInFlight:             maxInFlightFromRow(row.MaxInFlight),
		Timeout:                 time.Duration(row.TimeoutMs) * time.Millisecond,
		Ordered:                 row.Ordered,
		Enabled:                 row.Enabled,
		DisabledReason:          row.DisabledReason,
		DisabledAt:              row.DisabledAt,
		ConsecutiveFailures:     int(row.ConsecutiveFailures),
		FailingSince:            row.FailingSince,
		LastSuccessAt:           row.LastSuccessAt,
		LastFailureAt:           row.LastFailureAt,
		RateLimit:               rateLimitFromRow(row.RateLimitPerSecond, row.RateLimitBurst),
		CircuitState:            CircuitState(row.CircuitState),
		CircuitOpenedAt:         row.CircuitOpenedAt,
		CircuitOpenUntil:        row.CircuitOpenUntil,
		CircuitOpenings:         int(row.CircuitOpenings),
		Headers:                 outboxtype.DecodeHeaders(row.Headers),
		PreviousSecretExpiresAt: row.PreviousSecretExpiresAt,
		CreatedAt:               row.CreatedAt,
		UpdatedAt:               row.UpdatedAt,
	}
	if ep.EventTypes == nil {
		ep.EventTypes = []string{}
	}
	if auth, err := outboxtype.DecodeAuth(row.Auth); err == nil {
		ep.Auth = authInfo(auth)
	}
	return ep
}

// maxInFlight resolves an endpoint's MaxInFlight parameter to its stored
// form (0 for no cap).
func (s *endpoints) maxInFlight(n int) (int32, error) {
	switch {
	case n == 0:
		return int32(s.config.MaxInFlight), nil
	case n == NoMaxInFlight:
		return 0, nil
	case n < 0 || n > maxMaxInFlight:
		return 0, fmt.Errorf("%w: MaxInFlight must be 1 to %d, or -1 for no cap", ErrInvalidEndpoint, maxMaxInFlight)
	}
	return int32(n), nil
}

// maxInFlightFromRow returns the Endpoint.MaxInFlight of a stored cap (0
// stored is no cap).
func maxInFlightFromRow(n int32) int {
	if n == 0 {
		return NoMaxInFlight
	}
	return int(n)
}

func (s *endpoints) timeout(d time.Duration) (time.Duration, error) {
	if d == 0 {
		return s.config.EndpointTimeout, nil
	}
	if err := checkTimeout(d, s.config.MaxEndpointTimeout); err != nil {
		return 0, fmt.Errorf("%w: timeout %w", ErrInvalidEndpoint, err)
	}
	return d, nil
}

// FieldError is an ErrInvalidEndpoint error about one parameter, which it
// names in snake case ("url", "description", "event_types") for an API to
// point at: errors.As finds it.
type FieldError struct {
	// Field is the parameter.
	Field string
	// Err is the error, for which errors.Is(Err, ErrInvalidEndpoint) is
	// true.
	Err error
}

func (e *FieldError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// checkURL checks an endpoint's URL: its form, and a host the SSRF guard
// refuses whatever DNS says.
func (s *endpoints) checkURL(raw string) error {
	if err := checkURL("URL", raw); err != nil {
		return &FieldError{Field: "url", Err: err}
	}
	if err := checkLiteral(s.egress, raw); err != nil {
		return &FieldError{Field: "url", Err: err}
	}
	return nil
}

// checkURL accepts an absolute http or https URL; its errors call it field.
func checkURL(field, raw string) error {
	if raw == "" || len(raw) > maxURLLen {
		return fmt.Errorf("%w: %s must be 1 to %d bytes", ErrInvalidEndpoint, field, maxURLLen)
	}
	if err := checkText(field, raw); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEndpoint, err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: %s does not parse", ErrInvalidEndpoint, field)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: %s scheme must be http or https", ErrInvalidEndpoint, field)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%w: %s has no host", ErrInvalidEndpoint, field)
	}
	if u.Fragment != "" || strings.ContainsAny(raw, " \t\r\n") {
		return fmt.Errorf("%w: %s has a fragment or white space", ErrInvalidEndpoint, field)
	}
	return nil
}

func checkDescription(d string) error {
	if len(d) > maxDescriptionLen {
		return fmt.Errorf("%w: description longer than %d bytes", ErrInvalidEndpoint, maxDescriptionLen)
	}
	if err := checkText("description", d); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEndpoint, err)
	}
	return nil
}

func checkTenant(tenant string) error {
	if len(tenant) > maxTenantLen {
		return fmt.Errorf("%w: tenant longer than %d bytes", ErrInvalidEndpoint, maxTenantLen)
	}
	if err := checkText("tenant", tenant); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEndpoint, err)
	}
	return nil
}

// maxDataFilter bounds an endpoint's content filter.
const maxDataFilter = 4 << 10

// checkDataFilter validates a content filter (EndpointParams.DataFilter)
// and returns it as stored: nil for none (empty, or JSON null), else the
// object compacted.
func checkDataFilter(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if len(raw) > maxDataFilter {
		return nil, fmt.Errorf("%w: data filter larger than %d bytes", ErrInvalidEndpoint, maxDataFilter)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w: data filter must be a JSON object, as the event's data should contain it", ErrInvalidEndpoint)
	}
	if holdsNUL(obj) {
		// jsonb refuses the NUL character.
		return nil, fmt.Errorf("%w: data filter holds a NUL character", ErrInvalidEndpoint)
	}
	if !jsonbHolds(raw) {
		// Nor does it take a lone surrogate or bytes that are not UTF-8.
		return nil, fmt.Errorf("%w: data filter holds a lone surrogate escape or bytes that are not UTF-8", ErrInvalidEndpoint)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		return nil, fmt.Errorf("%w: data filter: %v", ErrInvalidEndpoint, err)
	}
	return out.Bytes(), nil
}

// holdsNUL reports whether a decoded JSON value has a string or key with
// a NUL character.
func holdsNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		return slices.ContainsFunc(v, holdsNUL)
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || holdsNUL(e) {
				return true
			}
		}
	}
	return false
}

// checkEventTypes validates a filter, against a strict catalog too, and
// returns it without duplicates.
func (s *endpoints) checkEventTypes(types []string) ([]string, error) {
	if len(types) > maxEventTypes {
		return nil, fmt.Errorf("%w: more than %d event types", ErrInvalidEndpoint, maxEventTypes)
	}
	out := make([]string, 0, len(types))
	seen := make(map[string]bool, len(types))
	for _, t := range types {
		if t != "*" {
			prefix, _ := strings.CutSuffix(t, ".*")
			if checkEventType(prefix) != nil {
				return nil, fmt.Errorf(`%w: event type filter %q is not a type, "prefix.*" or "*"`, ErrInvalidEndpoint, t)
			}
		}
		if err := s.catalog.CheckFilter(t); err != nil {
			return nil, fmt.Errorf("%w: event type filter %w", ErrInvalidEndpoint, err)
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out, nil
}

func listLimit(n int) (int32, error) {
	switch {
	case n == 0:
		return defaultListLimit, nil
	case n < 0 || n > maxListLimit:
		return 0, fmt.Errorf("outbox: limit must be 1 to %d", maxListLimit)
	}
	return int32(n), nil
}
