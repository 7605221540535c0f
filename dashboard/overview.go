package dashboard

import (
	"context"
	"html/template"
	"net/http"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/ops"
	"github.com/wharfhq/wharf/internal/shared"
)

// overviewEndpoints caps the endpoints the overview charts (the busiest).
const overviewEndpoints = 20

// sourceOverview is one source's row and chart on the overview.
type sourceOverview struct {
	Source     string
	Received   int64
	Duplicates int64
	// DuplicateRatio is ops.DuplicateRatio of Duplicates and Received.
	DuplicateRatio float64
	Failed         int64
	Dead           int64 // received in the window and dead now
	DeadNow        int64 // dead now, whenever received
	Lag            time.Duration
	Chart          template.HTML
}

// endpointOverview is one endpoint's row on the overview.
type endpointOverview struct {
	ID        uuid.UUID
	URL       string
	Enabled   bool
	Attempts  int64
	Succeeded int64
	Pending   int64
	Dead      int64
}

var outcomeSegments = []segment{
	{"2xx", "ok"}, {"3xx", "redirect"}, {"4xx", "client"}, {"5xx", "server"}, {"no answer", "noanswer"}, {"other", "other"},
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := h.now().UTC()
	// ChartWindow/hour buckets, the last one the hour now in progress.
	since := now.Truncate(time.Hour).Add(time.Hour - h.cfg.ChartWindow)
	var hours []time.Time
	for t := since; !t.After(now); t = t.Add(time.Hour) {
		hours = append(hours, t)
	}
	hourIndex := func(t time.Time) int { return int(t.Sub(since) / time.Hour) }

	// Ended hours from the rollup, the rest counted live; failing and dead
	// from the partial index of unfinished messages.
	rolled, err := h.queries.DashboardInboxRolledHourly(ctx, since)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The overview could not be read.", err)
		return
	}
	live, err := h.queries.DashboardInboxLiveHourly(ctx, since)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The overview could not be read.", err)
		return
	}
	failing, err := h.queries.DashboardInboxFailingHourly(ctx, since)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The overview could not be read.", err)
		return
	}
	received := make([]dbsqlc.DashboardInboxLiveHourlyRow, 0, len(rolled)+len(live))
	for _, row := range rolled {
		received = append(received, dbsqlc.DashboardInboxLiveHourlyRow(row))
	}
	received = append(received, live...)
	dups, err := h.queries.DashboardDuplicatesHourly(ctx, since)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The overview could not be read.", err)
		return
	}
	gauges, err := h.queries.InboxGaugeBySource(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The overview could not be read.", err)
		return
	}
	type sourceSeries struct {
		row                     *sourceOverview
		received, dups, failing []int64
	}
	bySource := map[string]*sourceSeries{}
	get := func(source string) *sourceSeries {
		s := bySource[source]
		if s == nil {
			n := len(hours)
			s = &sourceSeries{row: &sourceOverview{Source: source}, received: make([]int64, n), dups: make([]int64, n), failing: make([]int64, n)}
			bySource[source] = s
		}
		return s
	}
	// A row past the last bucket (the database's clock ahead of this
	// process's) counts in the totals and the last bucket.
	bucket := func(t time.Time) int { return min(max(hourIndex(t), 0), len(hours)-1) }
	for _, row := range received {
		s, i := get(row.Source), bucket(row.Hour)
		s.received[i] += row.Received
		s.row.Received += row.Received
	}
	for _, row := range failing {
		s, i := get(row.Source), bucket(row.Hour)
		s.failing[i] += row.Failed + row.Dead
		s.row.Failed += row.Failed
		s.row.Dead += row.Dead
	}
	for _, row := range dups {
		s, i := get(row.Source), bucket(row.Hour)
		s.dups[i] += row.Duplicates
		s.row.Duplicates += row.Duplicates
	}
	for _, g := range gauges {
		s := get(g.Source)
		s.row.DeadNow = g.Dead
		s.row.Lag = max(now.Sub(g.OldestUnfinished), 0).Round(time.Second)
	}
	sources := make([]*sourceOverview, 0, len(bySource))
	var depthRows, lagRows []stackedRow
	for _, s := range bySource {
		s.row.DuplicateRatio = ops.DuplicateRatio(s.row.Duplicates, s.row.Received)
		s.row.Chart = hourlyChart("Messages per hour from "+s.row.Source, hours, []series{
			{"received", "received", s.received},
			{"duplicates blocked", "duplicate", s.dups},
			{"failing or dead", "failing", s.failing},
		})
		sources = append(sources, s.row)
	}
	sort.Slice(sources, func(i, j int) bool { return sources[i].Source < sources[j].Source })
	for _, s := range sources {
		depthRows = append(depthRows, stackedRow{s.Source, []int64{s.DeadNow}})
		lagRows = append(lagRows, stackedRow{s.Source, []int64{int64(s.Lag / time.Second)}})
	}

	endpoints, outcomes, err := h.endpointOverview(r, since)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The overview could not be read.", err)
		return
	}
	var deadTotal int64
	var outboxDepth []stackedRow
	for _, e := range endpoints {
		deadTotal += e.Dead
		if e.Dead > 0 {
			outboxDepth = append(outboxDepth, stackedRow{e.URL, []int64{e.Dead}})
		}
	}
	data := map[string]any{
		"Title":     "Overview",
		"Window":    h.cfg.ChartWindow,
		"SinceArg":  ops.Duration(h.cfg.ChartWindow),
		"Since":     since,
		"Sources":   sources,
		"Endpoints": endpoints,
		"DeadTotal": deadTotal,
	}
	if len(sources) > 0 {
		data["InboxDepth"] = stackedChart("Dead inbox messages per source", []segment{{"dead", "failing"}}, depthRows)
		data["Lag"] = stackedChart("Oldest unprocessed message age per source, seconds", []segment{{"seconds", "received"}}, lagRows)
	}
	if len(outcomes) > 0 {
		data["Outcomes"] = stackedChart("Delivery attempts per endpoint by outcome", outcomeSegments, outcomes)
	}
	if len(outboxDepth) > 0 {
		data["OutboxDepth"] = stackedChart("Dead deliveries per endpoint", []segment{{"dead", "failing"}}, outboxDepth)
	}
	h.render(w, r, http.StatusOK, "overview", data)
}

// endpointOverview reads every endpoint's attempts since a time, by
// outcome, and its pending and dead deliveries; it returns the busiest
// endpoints (overviewEndpoints of them) and their outcome bars.
func (h *Handler) endpointOverview(r *http.Request, since time.Time) ([]*endpointOverview, []stackedRow, error) {
	ctx := r.Context()
	byID, perOutcome, err := h.endpointHealth(ctx, since)
	if err != nil {
		return nil, nil, err
	}
	list := make([]*endpointOverview, 0, len(byID))
	for _, e := range byID {
		list = append(list, e)
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if a.Dead != b.Dead {
			return a.Dead > b.Dead
		}
		if a.Attempts != b.Attempts {
			return a.Attempts > b.Attempts
		}
		return a.ID.String() < b.ID.String()
	})
	if len(list) > overviewEndpoints {
		list = list[:overviewEndpoints]
	}
	ids := make([]uuid.UUID, len(list))
	for i, e := range list {
		ids[i] = e.ID
	}
	labels, err := h.queries.DashboardEndpointsByID(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range labels {
		byID[l.ID].URL, byID[l.ID].Enabled = shared.RedactURL(l.Url), l.Enabled
	}
	var rows []stackedRow
	for _, e := range list {
		if e.URL == "" {
			e.URL = ops.DeletedEndpoint(e.ID)
		}
		if e.Attempts > 0 {
			rows = append(rows, stackedRow{e.URL, perOutcome[e.ID]})
		}
	}
	return list, rows, nil
}

// endpointHealth reads, per endpoint, the attempts since a time (in all
// and by outcome segment) and the pending and dead deliveries now: every
// endpoint with either. The attempts of ended hours come from the rollup,
// the rest is counted live (DashboardAttemptOutcomes).
func (h *Handler) endpointHealth(ctx context.Context, since time.Time) (map[uuid.UUID]*endpointOverview, map[uuid.UUID][]int64, error) {
	outcomes, err := h.queries.DashboardAttemptOutcomes(ctx, since)
	if err != nil {
		return nil, nil, err
	}
	gauges, err := h.queries.OutboxGaugeByEndpoint(ctx)
	if err != nil {
		return nil, nil, err
	}
	byID := map[uuid.UUID]*endpointOverview{}
	perOutcome := map[uuid.UUID][]int64{}
	get := func(id uuid.UUID) *endpointOverview {
		e := byID[id]
		if e == nil {
			e = &endpointOverview{ID: id}
			byID[id] = e
			perOutcome[id] = make([]int64, len(outcomeSegments))
		}
		return e
	}
	for _, o := range outcomes {
		e := get(o.EndpointID)
		e.Attempts += o.Attempts
		i := len(outcomeSegments) - 1 // "other": an answer outside 2xx–5xx
		for j, s := range outcomeSegments {
			if s.Name == o.Outcome {
				i = j
			}
		}
		perOutcome[o.EndpointID][i] += o.Attempts
		if o.Outcome == "2xx" {
			e.Succeeded += o.Attempts
		}
	}
	for _, g := range gauges {
		e := get(g.EndpointID)
		e.Pending, e.Dead = g.Pending, g.Dead
	}
	return byID, perOutcome, nil
}
