package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/ops"
	"github.com/wharfhq/wharf/internal/shared"
	"github.com/wharfhq/wharf/outbox"
)

// maxEndpointsListed caps the endpoints page.
const maxEndpointsListed = 1000

// deliveryFilter is the query string of /outbox, a stable URL shape.
type deliveryFilter struct {
	Status, Endpoint, Type, Since, Q, After string
}

func deliveryFilterOf(v url.Values) deliveryFilter {
	return deliveryFilter{Status: v.Get("status"), Endpoint: v.Get("endpoint"), Type: v.Get("type"),
		Since: v.Get("since"), Q: strings.TrimSpace(v.Get("q")), After: v.Get("after")}
}

func (h *Handler) deliveryParams(f deliveryFilter) (*outbox.DeliveryListParams, error) {
	switch outbox.DeliveryStatus(f.Status) {
	case "", outbox.StatusPending, outbox.StatusRetrying, outbox.StatusSucceeded, outbox.StatusDead:
	default:
		return nil, badRequest{fmt.Sprintf("status %q is not one of pending, retrying, succeeded or dead", ellipsis(f.Status, 40))}
	}
	if err := checkFilterText(f.Type, f.Q, f.Endpoint); err != nil {
		return nil, err
	}
	since, err := parseSince(f.Since, h.now())
	if err != nil {
		return nil, err
	}
	p := &outbox.DeliveryListParams{Status: outbox.DeliveryStatus(f.Status), EventType: f.Type, Since: since,
		After: f.After, Limit: h.cfg.PageSize}
	if f.Endpoint != "" {
		id, err := uuid.Parse(f.Endpoint)
		if err != nil {
			return nil, badRequest{"endpoint is not an endpoint id (a UUID)"}
		}
		p.EndpointID = &id
	}
	if f.Q != "" {
		if _, err := outbox.ParseEventID(f.Q); err != nil {
			return nil, badRequest{fmt.Sprintf("q %q is not an event id (evt_… or a UUID)", ellipsis(f.Q, 60))}
		}
		p.EventID = f.Q
	}
	return p, nil
}

func (h *Handler) deliveryList(w http.ResponseWriter, r *http.Request) {
	f := deliveryFilterOf(r.URL.Query())
	data := map[string]any{"Title": "Outbox", "Filter": f, "Done": doneMessage(r.URL.Query())}
	params, err := h.deliveryParams(f)
	var bad badRequest
	if errors.As(err, &bad) {
		data["Error"] = bad.msg
		h.render(w, r, http.StatusBadRequest, "outbox", data)
		return
	}
	ds, err := h.outbox.DeliveryList(r.Context(), params)
	switch {
	case errors.Is(err, outbox.ErrInvalidCursor):
		data["Error"] = "The page link is broken: start from the first page."
		h.render(w, r, http.StatusBadRequest, "outbox", data)
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, "The deliveries could not be read.", err)
		return
	}
	lines, err := ops.DeliveryLines(r.Context(), h.queries, ds)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The deliveries could not be read.", err)
		return
	}
	data["Deliveries"] = lines
	data["Redrivable"] = (params.Status == outbox.StatusDead || params.Status == outbox.StatusSucceeded) && f.Q == ""
	if len(ds) == params.Limit {
		next := f
		next.After = outbox.DeliveryCursor(ds[len(ds)-1])
		data["Next"] = next
	}
	h.render(w, r, http.StatusOK, "outbox", data)
}

// deliveryRedrive sends again every dead (or succeeded) delivery the
// outbox page's filter and a range of status codes select, or counts them
// when dry_run is set (see Outbox.Redrive).
func (h *Handler) deliveryRedrive(r *http.Request) (string, error) {
	f := deliveryFilterOf(r.PostForm)
	f.After, f.Q = "", ""
	params, err := h.deliveryParams(f)
	if err != nil {
		return "", err
	}
	if params.Status != outbox.StatusDead && params.Status != outbox.StatusSucceeded {
		return "", badRequest{"Replay by filter takes a status filter of dead or succeeded."}
	}
	codes := strings.TrimSpace(r.PostForm.Get("codes"))
	redrive := &outbox.RedriveParams{Status: params.Status, EndpointID: params.EndpointID, EventType: params.EventType,
		Since: params.Since, DryRun: r.PostForm.Get("dry_run") != ""}
	if redrive.MinStatusCode, redrive.MaxStatusCode, err = ops.ParseStatusCodes(codes); err != nil {
		return "", badRequest{"Status codes: " + ellipsis(err.Error(), 120)}
	}
	res, err := h.outbox.Redrive(r.Context(), redrive, nil)
	switch {
	case errors.Is(err, outbox.ErrInvalidRedrive), errors.Is(err, outbox.ErrEndpointDisabled):
		return "", badRequest{ellipsis(err.Error(), 200)}
	case err != nil && res != nil && res.Batches > 0:
		return "", fmt.Errorf("after %d replayed: %w", res.Replayed, err)
	case err != nil:
		return "", err
	}
	q := url.Values{"status": {f.Status}, "done": {"redriven"}, "n": {fmt.Sprint(res.Replayed)},
		"matched": {fmt.Sprint(res.Matched)}, "skipped": {fmt.Sprint(res.Skipped)}}
	if redrive.DryRun {
		q.Set("done", "redrive-counted")
	}
	for k, v := range map[string]string{"endpoint": f.Endpoint, "type": f.Type, "since": f.Since} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return "/outbox?" + q.Encode(), nil
}

func (h *Handler) deliveryShow(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.fail(w, r, http.StatusNotFound, "No such delivery: the id is not a UUID.", nil)
		return
	}
	d, err := h.outbox.DeliveryGet(ctx, id)
	switch {
	case errors.Is(err, outbox.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, "No such delivery: it may have been dropped by retention.", nil)
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, "The delivery could not be read.", err)
		return
	}
	attempts, err := h.outbox.AttemptList(ctx, id)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The delivery's attempts could not be read.", err)
		return
	}
	data := map[string]any{"Title": "Delivery " + d.EventID, "D": d, "Attempts": attempts,
		"Replayable": d.Status == outbox.StatusDead || d.Status == outbox.StatusSucceeded,
		"Done":       doneMessage(r.URL.Query())}
	data["NextAttempt"] = d.NextAttemptAt
	if ep, err := h.outbox.EndpointGet(ctx, d.EndpointID); err == nil {
		data["EndpointURL"] = shared.RedactURL(ep.URL)
		data["NextAttempt"], data["HeldByCircuit"] = ops.NextAttempt(d, ep.CircuitState, ep.CircuitOpenUntil)
	}
	eventID, _ := outbox.ParseEventID(d.EventID)
	ev, err := h.queries.DashboardEventGet(ctx, dbsqlc.DashboardEventGetParams{ID: eventID, CreatedAt: d.EventCreatedAt})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, "The delivery's event could not be read.", err)
		return
	default:
		body, kind := showBody(ev.Payload)
		data["EventType"], data["Payload"], data["PayloadKind"], data["EventScrubbed"] = ev.Type, body, kind, ev.ScrubbedAt != nil
	}
	h.render(w, r, http.StatusOK, "delivery", data)
}

func (h *Handler) deliveryReplay(r *http.Request) (string, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return "", outbox.ErrNotFound
	}
	switch err := h.outbox.DeliveryReplay(r.Context(), id); {
	case errors.Is(err, outbox.ErrEndpointDisabled):
		return "", badRequest{"This delivery cannot be replayed: its endpoint is disabled. Enable it first."}
	case errors.Is(err, outbox.ErrDeliveryInProgress):
		return "", badRequest{"This delivery is still being delivered: there is nothing to replay yet."}
	case errors.Is(err, outbox.ErrEventGone):
		return "", badRequest{"This delivery cannot be replayed: its event is no longer stored (retention)."}
	case err != nil:
		return "", err
	}
	return "/outbox/deliveries/" + id.String() + "?done=replayed", nil
}

// endpointRow is one endpoint on the endpoints page.
type endpointRow struct {
	*outbox.Endpoint
	URL               string
	Attempts, Success int64
	Pending, Dead     int64
}

func (h *Handler) endpointList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	eps, err := h.outbox.EndpointList(ctx, &outbox.EndpointListParams{Limit: maxEndpointsListed})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The endpoints could not be read.", err)
		return
	}
	health, _, err := h.endpointHealth(ctx, h.now().Add(-h.cfg.ChartWindow))
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The endpoints could not be read.", err)
		return
	}
	rows := make([]*endpointRow, len(eps))
	for i, e := range eps {
		rows[i] = &endpointRow{Endpoint: e, URL: shared.RedactURL(e.URL)}
		if got := health[e.ID]; got != nil {
			rows[i].Attempts, rows[i].Success, rows[i].Pending, rows[i].Dead = got.Attempts, got.Succeeded, got.Pending, got.Dead
		}
	}
	h.render(w, r, http.StatusOK, "endpoints", map[string]any{"Title": "Endpoints", "Endpoints": rows,
		"Window": h.cfg.ChartWindow, "Truncated": len(eps) == maxEndpointsListed, "Done": doneMessage(r.URL.Query())})
}

// endpointAction enables, disables, rotates the secret of or replays the
// dead deliveries of one endpoint.
func (h *Handler) endpointAction(r *http.Request) (string, error) {
	ctx := r.Context()
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return "", outbox.ErrNotFound
	}
	done := url.Values{}
	switch op := r.PathValue("op"); op {
	case "enable":
		_, err = h.outbox.EndpointEnable(ctx, id)
		done.Set("done", "enabled")
	case "disable":
		reason := strings.TrimSpace(r.PostForm.Get("reason"))
		if reason == "" {
			reason = "disabled from the dashboard"
		}
		_, err = h.outbox.EndpointDisable(ctx, id, ellipsis(reason, 500))
		done.Set("done", "disabled")
	case "rotate-secret":
		_, err = h.outbox.EndpointRotateSecret(ctx, id, nil)
		done.Set("done", "rotated")
	case "replay-dead":
		var since time.Time
		if since, err = parseSince(r.PostForm.Get("since"), h.now()); err != nil {
			return "", err
		}
		var n int
		n, err = h.outbox.DeliveryReplayDead(ctx, id, since)
		done.Set("done", "replayed-dead")
		done.Set("n", fmt.Sprint(n))
	default:
		return "", badRequest{"Unknown endpoint action."}
	}
	if err != nil {
		return "", err
	}
	return "/outbox/endpoints?" + done.Encode() + "#ep-" + id.String(), nil
}
