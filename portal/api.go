package portal

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/outbox"
)

// OpenAPI is the API's OpenAPI 3.1 document, served at
// {prefix}/api/v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

const (
	apiBase          = "/api/v1"
	maxBodyBytes     = 64 << 10
	defaultPageLimit = 50
	maxPageLimit     = 250
)

func (h *Handler) apiRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+apiBase+"/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(OpenAPI)
	})
	route := func(pattern string, write bool, fn func(http.ResponseWriter, *http.Request) error) {
		mux.Handle(pattern, h.api(write, fn))
	}
	route("GET "+apiBase+"/endpoints", false, h.listEndpoints)
	route("POST "+apiBase+"/endpoints", true, h.createEndpoint)
	route("GET "+apiBase+"/endpoints/{id}", false, h.getEndpoint)
	route("PATCH "+apiBase+"/endpoints/{id}", true, h.updateEndpoint)
	route("DELETE "+apiBase+"/endpoints/{id}", true, h.deleteEndpoint)
	route("POST "+apiBase+"/endpoints/{id}/rotate-secret", true, h.rotateSecret)
	route("GET "+apiBase+"/endpoints/{id}/secret", false, h.getSecret)
	route("POST "+apiBase+"/endpoints/{id}/test", true, h.sendTest)
	route("POST "+apiBase+"/endpoints/{id}/recover", true, h.recoverEndpoint)
	route("GET "+apiBase+"/event-types", false, h.listEventTypes)
	route("GET "+apiBase+"/audit-log", false, h.listAuditLog)
	route("GET "+apiBase+"/deliveries", false, h.listDeliveries)
	route("GET "+apiBase+"/deliveries/{id}", false, h.getDelivery)
	route("POST "+apiBase+"/deliveries/{id}/replay", true, h.replayDelivery)
	route("POST "+apiBase+"/deliveries/redrive", true, h.redriveDeliveries)
	mux.Handle(apiBase+"/", h.api(false, func(http.ResponseWriter, *http.Request) error {
		return &apiError{status: http.StatusNotFound, msg: "no such API path or method"}
	}))
}

// apiError is an error the client gets as {"error", "field"}.
type apiError struct {
	status int
	msg    string
	field  string
}

func (e *apiError) Error() string { return e.msg }

func notFound(what string) error {
	return &apiError{status: http.StatusNotFound, msg: what + " not found"}
}

func invalid(field, format string, args ...any) error {
	return &apiError{status: http.StatusUnprocessableEntity, msg: fmt.Sprintf(format, args...), field: field}
}

// api authenticates a request, runs fn and writes its error.
func (h *Handler) api(write bool, fn func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, err := h.authenticate(r, false)
		if err != nil {
			if unauthenticated(err) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="wharf"`)
				h.writeError(w, r, &apiError{status: http.StatusUnauthorized, msg: "missing, invalid or expired credentials"})
				return
			}
			h.writeError(w, r, err)
			return
		}
		if write && a.readOnly {
			h.writeError(w, r, &apiError{status: http.StatusForbidden, msg: "this token is read-only"})
			return
		}
		// A write authenticated by the application's own credentials
		// (cookies a browser adds by itself) must be JSON: a cross-site
		// form cannot send that without a CORS preflight.
		if write && !bearer(r) && !isJSON(r) {
			h.writeError(w, r, &apiError{status: http.StatusUnsupportedMediaType, msg: "send the request as Content-Type: application/json"})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		if err := fn(w, r.WithContext(withAccess(r.Context(), a))); err != nil {
			h.writeError(w, r, err)
		}
	})
}

// bearer is whether r carries a bearer token, which no browser adds by
// itself.
func bearer(r *http.Request) bool {
	scheme, _, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer")
}

func isJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// writeError answers err: an apiError as it says, an outbox error by its
// kind, anything else as 500, logged and not shown.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	var fe *outbox.FieldError
	var de *outbox.EventDataError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &fe):
		ae = &apiError{status: http.StatusUnprocessableEntity, msg: fe.Error(), field: fe.Field}
	case errors.Is(err, outbox.ErrInvalidEndpoint), errors.Is(err, outbox.ErrInvalidRedrive):
		ae = &apiError{status: http.StatusUnprocessableEntity, msg: err.Error()}
	case errors.As(err, &de):
		ae = &apiError{status: http.StatusUnprocessableEntity, msg: err.Error(), field: "event_type"}
	case errors.Is(err, outbox.ErrNotFound):
		ae = &apiError{status: http.StatusNotFound, msg: "not found"}
	case errors.Is(err, outbox.ErrDeliveryInProgress), errors.Is(err, outbox.ErrEndpointDisabled):
		ae = &apiError{status: http.StatusConflict, msg: err.Error()}
	case errors.Is(err, outbox.ErrEventGone):
		ae = &apiError{status: http.StatusGone, msg: err.Error()}
	case errors.Is(err, outbox.ErrInvalidCursor):
		ae = &apiError{status: http.StatusBadRequest, msg: "invalid cursor", field: "cursor"}
	default:
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			ae = &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("the body is larger than %d bytes", maxBodyBytes)}
			break
		}
		if r.Context().Err() == nil {
			h.cfg.Logger.ErrorContext(r.Context(), "wharf portal: request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		}
		ae = &apiError{status: http.StatusInternalServerError, msg: "internal error"}
	}
	body := map[string]string{"error": ae.msg}
	if ae.field != "" {
		body["field"] = ae.field
	}
	writeJSON(w, ae.status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// decode reads a JSON object body into v; unknown fields are 422, bad
// JSON 400. An empty body is allowed when optional.
func decode(r *http.Request, v any, optional bool) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		if optional {
			return nil
		}
		return &apiError{status: http.StatusBadRequest, msg: "the request needs a JSON body"}
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return invalid(typeErr.Field, "%s must be %s", typeErr.Field, jsonKind(typeErr.Type.Kind().String()))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return invalid(field, "unknown field %q", field)
		}
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("malformed JSON at byte %d", syntax.Offset)}
		}
		return &apiError{status: http.StatusBadRequest, msg: "malformed JSON: the body must be one JSON object"}
	}
	if dec.More() {
		return &apiError{status: http.StatusBadRequest, msg: "malformed JSON: more than one value"}
	}
	return nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice":
		return "an array"
	case "struct", "map", "ptr":
		return "an object"
	}
	return "a number"
}

// endpoint returns the tenant's endpoint id names: another tenant's is
// not found, as is a malformed id.
func (h *Handler) endpoint(ctx context.Context, db pgx.Tx, id string) (*outbox.Endpoint, error) {
	uid, err := uuid.Parse(id)
	if err != nil {
		return nil, notFound("endpoint")
	}
	var ep *outbox.Endpoint
	if db != nil {
		ep, err = h.cfg.Outbox.EndpointGetTx(ctx, db, uid)
	} else {
		ep, err = h.cfg.Outbox.EndpointGet(ctx, uid)
	}
	if errors.Is(err, outbox.ErrNotFound) || (err == nil && ep.Tenant != accessOf(ctx).tenant) {
		return nil, notFound("endpoint")
	}
	return ep, err
}

// delivery returns the tenant's delivery id names.
func (h *Handler) delivery(ctx context.Context, id string) (*outbox.Delivery, error) {
	uid, err := uuid.Parse(id)
	if err != nil {
		return nil, notFound("delivery")
	}
	d, err := h.cfg.Outbox.DeliveryGet(ctx, uid)
	if errors.Is(err, outbox.ErrNotFound) || (err == nil && d.Tenant != accessOf(ctx).tenant) {
		return nil, notFound("delivery")
	}
	return d, err
}

func (h *Handler) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, h.cfg.Pool, fn)
}

// pageLimit reads ?limit=.
func pageLimit(r *http.Request) (int, error) {
	raw := r.URL.Query().Get("limit")
	if raw == "" {
		return defaultPageLimit, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > maxPageLimit {
		return 0, &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("limit must be 1 to %d", maxPageLimit), field: "limit"}
	}
	return n, nil
}

func (h *Handler) listEndpoints(w http.ResponseWriter, r *http.Request) error {
	limit, err := pageLimit(r)
	if err != nil {
		return err
	}
	tenant := accessOf(r.Context()).tenant
	list, err := h.cfg.Outbox.EndpointList(r.Context(), &outbox.EndpointListParams{
		Tenant: &tenant, Limit: limit + 1, After: r.URL.Query().Get("cursor"),
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pageOf(list, limit, outbox.EndpointCursor, endpointOf))
	return nil
}

type endpointCreate struct {
	URL         *string         `json:"url"`
	Description string          `json:"description"`
	EventTypes  []string        `json:"event_types"`
	DataFilter  json.RawMessage `json:"data_filter"`
}

func (h *Handler) createEndpoint(w http.ResponseWriter, r *http.Request) error {
	var body endpointCreate
	if err := decode(r, &body, false); err != nil {
		return err
	}
	if body.URL == nil {
		return invalid("url", "url is required")
	}
	var created *outbox.EndpointWithSecret
	err := h.inTx(r.Context(), func(tx pgx.Tx) error {
		var err error
		created, err = h.cfg.Outbox.EndpointCreateTx(r.Context(), tx, &outbox.EndpointParams{
			URL: *body.URL, Description: body.Description, EventTypes: body.EventTypes, DataFilter: body.DataFilter,
			Tenant: accessOf(r.Context()).tenant,
		})
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, endpointWithSecret{endpointOf(created.Endpoint), created.Secret})
	return nil
}

func (h *Handler) getEndpoint(w http.ResponseWriter, r *http.Request) error {
	ep, err := h.endpoint(r.Context(), nil, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, endpointOf(ep))
	return nil
}

type endpointUpdate struct {
	URL         *string   `json:"url"`
	Description *string   `json:"description"`
	EventTypes  *[]string `json:"event_types"`
	// DataFilter is nil when absent, "null" when to remove.
	DataFilter json.RawMessage `json:"data_filter"`
	Disabled   *bool           `json:"disabled"`
}

func (h *Handler) updateEndpoint(w http.ResponseWriter, r *http.Request) error {
	var body endpointUpdate
	if err := decode(r, &body, false); err != nil {
		return err
	}
	var ep *outbox.Endpoint
	err := h.inTx(r.Context(), func(tx pgx.Tx) error {
		var err error
		if ep, err = h.endpoint(r.Context(), tx, r.PathValue("id")); err != nil {
			return err
		}
		params := &outbox.EndpointUpdateParams{URL: body.URL, Description: body.Description, DataFilter: body.DataFilter}
		if body.EventTypes != nil {
			params.EventTypes = *body.EventTypes
			if params.EventTypes == nil {
				params.EventTypes = []string{}
			}
		}
		if params.URL != nil || params.Description != nil || params.EventTypes != nil || params.DataFilter != nil {
			if ep, err = h.cfg.Outbox.EndpointUpdateTx(r.Context(), tx, ep.ID, params); err != nil {
				return err
			}
		}
		switch {
		case body.Disabled == nil || *body.Disabled == !ep.Enabled:
		case *body.Disabled:
			ep, err = h.cfg.Outbox.EndpointDisableTx(r.Context(), tx, ep.ID, "disabled by the tenant")
		default:
			ep, err = h.cfg.Outbox.EndpointEnableTx(r.Context(), tx, ep.ID)
		}
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, endpointOf(ep))
	return nil
}

func (h *Handler) deleteEndpoint(w http.ResponseWriter, r *http.Request) error {
	err := h.inTx(r.Context(), func(tx pgx.Tx) error {
		ep, err := h.endpoint(r.Context(), tx, r.PathValue("id"))
		if err != nil {
			return err
		}
		return h.cfg.Outbox.EndpointDeleteTx(r.Context(), tx, ep.ID)
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) rotateSecret(w http.ResponseWriter, r *http.Request) error {
	var body struct{}
	if err := decode(r, &body, true); err != nil {
		return err
	}
	var rotated *outbox.EndpointWithSecret
	err := h.inTx(r.Context(), func(tx pgx.Tx) error {
		ep, err := h.endpoint(r.Context(), tx, r.PathValue("id"))
		if err != nil {
			return err
		}
		rotated, err = h.cfg.Outbox.EndpointRotateSecretTx(r.Context(), tx, ep.ID, nil)
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, endpointWithSecret{endpointOf(rotated.Endpoint), rotated.Secret})
	return nil
}

// errSecretReadOnly refuses a read-only token the signing secret: with it
// anyone could forge webhooks the tenant's receiver trusts.
var errSecretReadOnly = &apiError{status: http.StatusForbidden, msg: "a read-only token cannot read the signing secret"}

func (h *Handler) getSecret(w http.ResponseWriter, r *http.Request) error {
	if accessOf(r.Context()).readOnly {
		return errSecretReadOnly
	}
	ep, err := h.endpoint(r.Context(), nil, r.PathValue("id"))
	if err != nil {
		return err
	}
	secret, err := h.cfg.Outbox.EndpointSecret(r.Context(), ep.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"secret": secret})
	return nil
}

type testRequest struct {
	EventType string `json:"event_type"`
}

func (h *Handler) sendTest(w http.ResponseWriter, r *http.Request) error {
	var body testRequest
	if err := decode(r, &body, true); err != nil {
		return err
	}
	res, err := h.test(r.Context(), r.PathValue("id"), body.EventType)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"event_id": res.EventID})
	return nil
}

// test sends a test event to the tenant's endpoint: eventType's example
// from the catalog (the first type the endpoint subscribes to when
// eventType is empty), or a wharf.test event without a catalog.
func (h *Handler) test(ctx context.Context, endpointID, eventType string) (*outbox.PublishResult, error) {
	var res *outbox.PublishResult
	err := h.inTx(ctx, func(tx pgx.Tx) error {
		ep, err := h.endpoint(ctx, tx, endpointID)
		if err != nil {
			return err
		}
		event, err := h.testEvent(ep, eventType)
		if err != nil {
			return err
		}
		res, err = h.cfg.Outbox.PublishToTx(ctx, tx, ep.ID, event)
		return err
	})
	return res, err
}

func (h *Handler) testEvent(ep *outbox.Endpoint, eventType string) (*outbox.Event, error) {
	event := &outbox.Event{Tenant: ep.Tenant}
	if eventType != "" {
		t, ok := h.cfg.Outbox.EventTypeByName(eventType)
		if !ok {
			return nil, invalid("event_type", "%q is not in the event catalog", eventType)
		}
		event.Type, event.Data = t.Name, exampleOf(t)
		return event, nil
	}
	for _, t := range h.cfg.Outbox.EventTypes() {
		if subscribes(ep.EventTypes, t.Name) && !t.Deprecated {
			event.Type, event.Data = t.Name, exampleOf(t)
			return event, nil
		}
	}
	event.Type = outbox.TestEventType
	event.Data = map[string]string{"message": "A test event from the webhook portal."}
	return event, nil
}

func exampleOf(t outbox.EventType) any {
	if len(t.Example) == 0 {
		return map[string]any{}
	}
	return t.Example
}

// subscribes is whether a filter matches a type, as the outbox matches:
// an operational type (wharf.…) only by its name or a "wharf." prefix.
func subscribes(filter []string, eventType string) bool {
	operational := strings.HasPrefix(eventType, "wharf.")
	if len(filter) == 0 {
		return !operational
	}
	for _, f := range filter {
		if f == eventType {
			return true
		}
		if operational && !strings.HasPrefix(f, "wharf.") {
			continue
		}
		if f == "*" {
			return true
		}
		if prefix, ok := strings.CutSuffix(f, "*"); ok && strings.HasSuffix(prefix, ".") && strings.HasPrefix(eventType, prefix) {
			return true
		}
	}
	return false
}

type recoverRequest struct {
	Since *string `json:"since"`
}

func (h *Handler) recoverEndpoint(w http.ResponseWriter, r *http.Request) error {
	var body recoverRequest
	if err := decode(r, &body, false); err != nil {
		return err
	}
	since, err := h.pastTime("since", body.Since, "since is required: the oldest event to send again")
	if err != nil {
		return err
	}
	ep, err := h.endpoint(r.Context(), nil, r.PathValue("id"))
	if err != nil {
		return err
	}
	n, err := h.cfg.Outbox.EndpointRecover(r.Context(), ep.ID, since)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]int{"deliveries": n})
	return nil
}

// pastTime reads a request's RFC 3339 time field, which must be in the
// past (after 2000); missing is the error required says, or the zero time
// when required is "".
func (h *Handler) pastTime(field string, v *string, required string) (time.Time, error) {
	if v == nil {
		if required != "" {
			return time.Time{}, invalid(field, "%s", required)
		}
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *v)
	switch {
	case err != nil:
		return t, invalid(field, "%s must be an RFC 3339 time", field)
	case t.After(h.cfg.Now()):
		return t, invalid(field, "%s is in the future", field)
	case t.Year() < 2000:
		return t, invalid(field, "%s is before the year 2000", field)
	}
	return t, nil
}

// redriveRequest selects the tenant's finished deliveries to send again
// (see outbox.RedriveParams).
type redriveRequest struct {
	Status        *string `json:"status"`
	EndpointID    *string `json:"endpoint_id"`
	EventType     *string `json:"event_type"`
	MinStatusCode *int    `json:"min_status_code"`
	MaxStatusCode *int    `json:"max_status_code"`
	Since         *string `json:"since"`
	Until         *string `json:"until"`
	DryRun        bool    `json:"dry_run"`
}

type redriveResultJSON struct {
	Matched  int  `json:"matched"`
	Replayed int  `json:"replayed"`
	Skipped  int  `json:"skipped"`
	DryRun   bool `json:"dry_run"`
}

// redriveDeliveries sends again the tenant's dead (or succeeded)
// deliveries a filter selects, or counts them on a dry run.
func (h *Handler) redriveDeliveries(w http.ResponseWriter, r *http.Request) error {
	var body redriveRequest
	if err := decode(r, &body, false); err != nil {
		return err
	}
	tenant := accessOf(r.Context()).tenant
	params := &outbox.RedriveParams{Tenant: &tenant, DryRun: body.DryRun}
	var err error
	if params.Since, err = h.pastTime("since", body.Since, "since is required: the oldest event to send again"); err != nil {
		return err
	}
	if params.Until, err = h.pastTime("until", body.Until, ""); err != nil {
		return err
	}
	if body.Status != nil {
		params.Status = outbox.DeliveryStatus(*body.Status)
		if params.Status != outbox.StatusDead && params.Status != outbox.StatusSucceeded {
			return invalid("status", "status must be dead or succeeded")
		}
	}
	if body.EventType != nil {
		params.EventType = *body.EventType
		if params.EventType == "" {
			return invalid("event_type", `event_type must be a type, "prefix.*" or "*"`)
		}
	}
	if (body.MinStatusCode == nil) != (body.MaxStatusCode == nil) {
		return invalid("max_status_code", "min_status_code and max_status_code go together")
	}
	if body.MinStatusCode != nil {
		params.MinStatusCode, params.MaxStatusCode = *body.MinStatusCode, *body.MaxStatusCode
		if params.MinStatusCode < 100 || params.MaxStatusCode > 599 || params.MinStatusCode > params.MaxStatusCode {
			return invalid("min_status_code", "min_status_code and max_status_code must be a range within 100–599")
		}
	}
	if body.EndpointID != nil {
		ep, err := h.endpoint(r.Context(), nil, *body.EndpointID)
		if err != nil {
			return err
		}
		params.EndpointID = &ep.ID
	}
	res, err := h.cfg.Outbox.Redrive(r.Context(), params, nil)
	if err != nil {
		return err
	}
	status := http.StatusAccepted
	if body.DryRun {
		status = http.StatusOK
	}
	writeJSON(w, status, redriveResultJSON{Matched: res.Matched, Replayed: res.Replayed, Skipped: res.Skipped, DryRun: body.DryRun})
	return nil
}

func (h *Handler) listEventTypes(w http.ResponseWriter, _ *http.Request) error {
	types := h.cfg.Outbox.EventTypes()
	out := make([]eventTypeJSON, len(types))
	for i, t := range types {
		out[i] = eventTypeOf(t)
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": out})
	return nil
}

func (h *Handler) listDeliveries(w http.ResponseWriter, r *http.Request) error {
	limit, err := pageLimit(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	tenant := accessOf(r.Context()).tenant
	params := &outbox.DeliveryListParams{
		Tenant: &tenant, Limit: limit + 1, After: q.Get("cursor"),
		EventType: q.Get("event_type"),
	}
	if et := params.EventType; len(et) > 256 || !utf8.ValidString(et) || strings.ContainsFunc(et, unicode.IsControl) {
		return &apiError{status: http.StatusBadRequest, msg: "event_type must be an event type", field: "event_type"}
	}
	if raw := q.Get("endpoint_id"); raw != "" {
		ep, err := h.endpoint(r.Context(), nil, raw)
		if err != nil {
			return err
		}
		params.EndpointID = &ep.ID
	}
	if raw := q.Get("status"); raw != "" {
		switch s := outbox.DeliveryStatus(raw); s {
		case outbox.StatusPending, outbox.StatusRetrying, outbox.StatusSucceeded, outbox.StatusDead:
			params.Status = s
		default:
			return &apiError{status: http.StatusBadRequest, msg: "status must be pending, retrying, succeeded or dead", field: "status"}
		}
	}
	if raw := q.Get("since"); raw != "" {
		since, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			return &apiError{status: http.StatusBadRequest, msg: "since must be an RFC 3339 time", field: "since"}
		}
		params.Since = since
	}
	list, err := h.cfg.Outbox.DeliveryList(r.Context(), params)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pageOf(list, limit, outbox.DeliveryCursor, deliveryOf))
	return nil
}

func (h *Handler) getDelivery(w http.ResponseWriter, r *http.Request) error {
	d, err := h.delivery(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	attempts, err := h.cfg.Outbox.AttemptList(r.Context(), d.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, deliveryDetailOf(d, attempts))
	return nil
}

func (h *Handler) replayDelivery(w http.ResponseWriter, r *http.Request) error {
	d, err := h.replay(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, deliveryOf(d))
	return nil
}

// replay sends the tenant's delivery again and returns it as it now is.
func (h *Handler) replay(ctx context.Context, id string) (*outbox.Delivery, error) {
	d, err := h.delivery(ctx, id)
	if err != nil {
		return nil, err
	}
	err = h.inTx(ctx, func(tx pgx.Tx) error {
		if err := h.cfg.Outbox.DeliveryReplayTx(ctx, tx, d.ID); err != nil {
			return err
		}
		d, err = h.cfg.Outbox.DeliveryGetTx(ctx, tx, d.ID)
		return err
	})
	return d, err
}
