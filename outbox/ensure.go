package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/internal/secretbox"
)

// ensureLockClass namespaces EndpointEnsure's advisory locks ("whre").
const ensureLockClass int32 = 0x77687265

// EndpointEnsureResult is what EndpointEnsure found or made.
type EndpointEnsureResult struct {
	*EndpointWithSecret
	// Created is true when no endpoint of the tenant had the URL.
	Created bool
	// Updated is true when one had, and a setting differed from params.
	Updated bool
}

// EndpointEnsure makes sure the tenant has exactly one endpoint with
// params.URL, configured as params says, and returns it with its secret:
// what an app calls at every start instead of EndpointCreate, which would
// add an endpoint (and so a second delivery of every event) per restart.
//
// An endpoint is identified by its tenant and URL. Without one,
// EndpointEnsure creates it, as EndpointCreate would. With one, it updates
// whatever of Description, EventTypes, MaxInFlight, Timeout, Ordered,
// Headers, Auth and RateLimit differs from params (zero values mean the
// defaults, as for EndpointCreate: nil Headers, Auth and RateLimit mean
// none), and leaves its
// secret, its health and whether it is enabled alone: a disabled endpoint
// stays disabled until EndpointEnable. A params.Secret other than the
// endpoint's is an error where errors.Is(err, ErrInvalidEndpoint) is true:
// change secrets with EndpointRotateSecret.
// Several endpoints with the URL (created before by EndpointCreate) are an
// error where errors.Is(err, ErrAmbiguousEndpoint) is true; delete all but
// one. Concurrent calls for one URL, from several processes starting at
// once, create one endpoint; EndpointEnsureTx relies on read committed
// isolation for that (in a repeatable read or serializable transaction
// that has already read, a concurrent ensure's endpoint is invisible).
// Zero params mean the defaults, so an ensure at restart also reverts an
// operator's EndpointUpdate of those settings: keep them in params.
func (o *Outbox) EndpointEnsure(ctx context.Context, params *EndpointParams) (*EndpointEnsureResult, error) {
	var res *EndpointEnsureResult
	err := o.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		res, err = o.EndpointEnsureTx(ctx, tx, params)
		return err
	})
	return res, err
}

// EndpointEnsureTx is EndpointEnsure in tx. Parameters it refuses return an
// error before any statement runs, so tx stays usable.
func (o *Outbox) EndpointEnsureTx(ctx context.Context, tx pgx.Tx, params *EndpointParams) (*EndpointEnsureResult, error) {
	return o.endpoints.ensure(ctx, tx, params)
}

// ensure is EndpointEnsureTx.
func (s *endpoints) ensure(ctx context.Context, tx pgx.Tx, params *EndpointParams) (*EndpointEnsureResult, error) {
	want, err := s.check(params)
	if err != nil {
		return nil, err
	}
	q := dbsqlc.New(tx)
	// Serialise ensures of one URL, so that two processes starting at once
	// cannot both create it.
	// A lock class of its own: tenants choose URLs, and a hash collision
	// must never make an ensure wait on (or block) retention's locks.
	if err := q.AdvisoryXactLock(ctx, dbsqlc.AdvisoryXactLockParams{
		Class: ensureLockClass,
		Key:   partition.LockKey("wharf.outbox.endpoint\x00" + params.Tenant + "\x00" + params.URL),
	}); err != nil {
		return nil, fmt.Errorf("outbox: ensure endpoint: %w", err)
	}
	rows, err := q.OutboxEndpointsByURL(ctx, dbsqlc.OutboxEndpointsByURLParams{Tenant: params.Tenant, Url: params.URL})
	if err != nil {
		return nil, fmt.Errorf("outbox: ensure endpoint: %w", err)
	}
	switch len(rows) {
	case 0:
		created, err := s.create(ctx, tx, params)
		if err != nil {
			return nil, err
		}
		return &EndpointEnsureResult{EndpointWithSecret: created, Created: true}, nil
	case 1:
	default:
		return nil, fmt.Errorf("%w: the tenant has several endpoints with URL %s; delete all but one (EndpointDelete)", ErrAmbiguousEndpoint, params.URL)
	}
	row := rows[0]
	secret, err := s.keys.Open(row.ID, secretbox.FieldSecret, row.Secret)
	if err != nil {
		return nil, err
	}
	if params.Secret != "" && params.Secret != secret {
		return nil, fmt.Errorf("%w: endpoint %s exists with another secret; change it with EndpointRotateSecret", ErrInvalidEndpoint, row.ID)
	}
	current := endpointFromRow(&row)
	var update EndpointUpdateParams
	changed := false
	if current.Description != params.Description {
		update.Description, changed = &params.Description, true
	}
	if !slices.Equal(current.EventTypes, want.eventTypes) {
		update.EventTypes, changed = want.eventTypes, true
		if update.EventTypes == nil {
			update.EventTypes = []string{}
		}
	}
	if !bytes.Equal(row.DataFilter, want.dataFilter) && !jsonEqual(row.DataFilter, want.dataFilter) {
		update.DataFilter, changed = json.RawMessage(want.dataFilter), true
		if update.DataFilter == nil {
			update.DataFilter = json.RawMessage{}
		}
	}
	if current.MaxInFlight != want.maxInFlight {
		update.MaxInFlight, changed = &want.maxInFlight, true
	}
	if current.Timeout != want.timeout {
		update.Timeout, changed = &want.timeout, true
	}
	if current.Ordered != params.Ordered {
		update.Ordered, changed = &params.Ordered, true
	}
	if !headersEqual(current.Headers, want.headers) {
		update.Headers, changed = want.headers, true
	}
	if row.RateLimitPerSecond != want.ratePerSecond || row.RateLimitBurst != want.rateBurst {
		update.RateLimit, changed = &RateLimit{PerSecond: want.ratePerSecond, Burst: int(want.rateBurst)}, true
	}
	if stored, err := s.keys.DecodeAuth(row.ID, row.Auth); err != nil || !stored.Equal(want.auth) {
		update.Auth, changed = params.Auth, true
		if update.Auth == nil {
			update.Auth = &EndpointAuth{}
		}
	}
	if changed {
		if current, err = s.update(ctx, tx, current.ID, &update); err != nil {
			return nil, err
		}
	}
	return &EndpointEnsureResult{EndpointWithSecret: &EndpointWithSecret{Endpoint: current, Secret: secret}, Updated: changed}, nil
}

// endpointSettings are an EndpointParams checked, with defaults applied.
type endpointSettings struct {
	eventTypes  []string
	dataFilter  []byte // nil: none
	maxInFlight int    // as Endpoint.MaxInFlight says it
	storedCap   int32  // as stored: 0 is no cap
	timeout     time.Duration
	headers     http.Header
	auth        *outboxtype.Auth
	// ratePerSecond and rateBurst are the rate limit as stored: 0 and 0
	// for none.
	ratePerSecond float64
	rateBurst     int32
}

// check checks params as EndpointCreate does, before any statement.
func (s *endpoints) check(params *EndpointParams) (*endpointSettings, error) {
	if params == nil {
		return nil, fmt.Errorf("%w: nil params", ErrInvalidEndpoint)
	}
	if err := s.checkURL(params.URL); err != nil {
		return nil, err
	}
	if err := checkDescription(params.Description); err != nil {
		return nil, &FieldError{Field: "description", Err: err}
	}
	eventTypes, err := s.checkEventTypes(params.EventTypes)
	if err != nil {
		return nil, &FieldError{Field: "event_types", Err: err}
	}
	dataFilter, err := checkDataFilter(params.DataFilter)
	if err != nil {
		return nil, &FieldError{Field: "data_filter", Err: err}
	}
	if err := checkTenant(params.Tenant); err != nil {
		return nil, err
	}
	maxInFlight, err := s.maxInFlight(params.MaxInFlight)
	if err != nil {
		return nil, err
	}
	timeout, err := s.timeout(params.Timeout)
	if err != nil {
		return nil, err
	}
	if params.Secret != "" {
		if _, err := secretOrNew(params.Secret); err != nil {
			return nil, err
		}
	}
	headers, err := checkHeaders(params.Headers)
	if err != nil {
		return nil, err
	}
	auth, err := checkAuth(s.egress, params.Auth)
	if err != nil {
		return nil, err
	}
	ratePerSecond, rateBurst, err := checkRateLimit(params.RateLimit)
	if err != nil {
		return nil, err
	}
	return &endpointSettings{
		eventTypes: eventTypes, dataFilter: dataFilter, maxInFlight: maxInFlightFromRow(maxInFlight), storedCap: maxInFlight, timeout: timeout,
		headers: headers, auth: auth, ratePerSecond: ratePerSecond, rateBurst: rateBurst,
	}, nil
}

// jsonEqual reports whether a and b are the same JSON value (nil for
// none), as jsonb stores them: key order and spacing aside, numbers
// compared exactly (not as float64, which takes 12345678901234567890 and
// …891 for one).
func jsonEqual(a, b []byte) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	x, okX := decodeExact(a)
	y, okY := decodeExact(b)
	return okX && okY && reflect.DeepEqual(x, y)
}

// exactNumber is a JSON number in a canonical form: its sign, its digits
// without leading or trailing zeros, and its exponent ("-12e3").
type exactNumber string

// decodeExact decodes JSON text with its numbers as exactNumbers.
func decodeExact(b []byte) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil, false
	}
	var exact func(v any) any
	exact = func(v any) any {
		switch v := v.(type) {
		case json.Number:
			return canonicalNumber(string(v))
		case []any:
			for i := range v {
				v[i] = exact(v[i])
			}
		case map[string]any:
			for k := range v {
				v[k] = exact(v[k])
			}
		}
		return v
	}
	return exact(v), true
}

// canonicalNumber is the exactNumber of JSON number s: 100, 1e2 and
// 100.0 are "1e2".
func canonicalNumber(s string) exactNumber {
	sign := ""
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		sign, s = "-", rest
	}
	mantissa, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil {
			return exactNumber(sign + s) // an exponent past int: as written
		}
		mantissa, exp = s[:i], e
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	exp -= len(frac)
	if digits == "" {
		return "0"
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	return exactNumber(sign + trimmed + "e" + strconv.Itoa(exp))
}

// headersEqual reports whether two canonical header sets are the same.
func headersEqual(a, b http.Header) bool {
	return maps.EqualFunc(a, b, slices.Equal)
}
