package dashboard_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/audit"
	"github.com/wharfhq/wharf/dashboard"
	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/dashtest"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/outbox"
)

// queryCounter counts the statements a pool sends.
type queryCounter struct{ n atomic.Int64 }

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}

func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type fixture struct {
	pool    *pgxpool.Pool
	seed    *dashtest.Seeded
	server  *httptest.Server
	queries *queryCounter
	inbox   *inbox.Inbox
	outbox  *outbox.Outbox
}

// setup seeds a fresh database and serves the dashboard over it (cfg may
// be nil) through a pool that counts its queries.
func setup(t *testing.T, cfg *dashboard.Config) *fixture {
	t.Helper()
	dbURL := testdb.NewURL(t)
	seedPool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(seedPool.Close)
	f := &fixture{pool: seedPool, seed: dashtest.Seed(t, seedPool), queries: &queryCounter{}}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	pcfg.ConnConfig.Tracer = f.queries
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	if cfg == nil {
		cfg = &dashboard.Config{}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	f.inbox, err = inbox.New(seedPool, &inbox.Config{Logger: cfg.Logger})
	require.NoError(t, err)
	f.outbox, err = outbox.New(seedPool, nil)
	require.NoError(t, err)
	h, err := dashboard.New(pool, cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	if cfg.Prefix != "" {
		mux.Handle(cfg.Prefix+"/", h)
	} else {
		mux.Handle("/", h)
	}
	f.server = httptest.NewServer(mux)
	t.Cleanup(f.server.Close)
	return f
}

// get fetches a page and returns its status and body.
func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := f.server.Client().Get(f.server.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// post submits a form as the dashboard's own page would (same origin),
// without following the redirect; it returns the status and Location.
func (f *fixture) post(t *testing.T, path string, form url.Values, site string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.server.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", site)
	client := *f.server.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Location")
}

// rows counts the table rows of a page's body (every list page has one
// table).
func rows(body string) int { return strings.Count(body, "<tr>") - strings.Count(body, "<thead><tr>") }

func TestPagesShowTheSeededState(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)

	code, body := f.get(t, "/")
	require.Equal(t, http.StatusOK, code, body)
	for _, want := range []string{"billing", "shipping", "<svg", "Messages per hour from billing",
		"Delivery attempts by outcome per endpoint", "Dead-letter depth per source", "Inbox, last 24h"} {
		require.Contains(t, body, want)
	}
	require.Contains(t, body, `href="/inbox?source=billing&amp;status=dead">3</a>`, "billing's dead messages link to the filtered list")
	billing := regexp.MustCompile(`(?s)>billing</a></td>\s*<td class="num">(\d+)</td>\s*<td class="num">(\d+)</td>\s*<td class="num">([^<]+)</td>`).FindStringSubmatch(body)
	require.NotNil(t, billing, "billing's row")
	require.Equal(t, []string{"12", "3", "20.0%"}, billing[1:], "received, duplicates blocked (one event twice), ratio: 3 of 15 deliveries, as wharf stats and the alert rule count")
	require.NotContains(t, body, f.seed.EndpointPassword)

	code, body = f.get(t, "/inbox/"+f.seed.DeadMessage.String())
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, f.seed.DeadEventID)
	require.Contains(t, body, "no account for customer cus_42")
	require.Contains(t, body, "[redacted]")
	require.NotContains(t, body, f.seed.SignatureValue, "signature headers are redacted")
	require.Contains(t, body, "&#34;customer&#34;: &#34;cus_42&#34;", "the JSON body is indented")
	require.Contains(t, body, `id="replay"`)

	code, body = f.get(t, "/outbox/endpoints")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "orders service")
	require.Contains(t, body, "http://xxxxx@127.0.0.1", "the URL's user info is masked")
	require.NotContains(t, body, "ops:", "the user name too")
	require.NotContains(t, body, f.seed.EndpointPassword)
	require.NotContains(t, body, "whsec_", "secrets are never rendered")
	require.Contains(t, body, "Replay 2 dead")
	require.Contains(t, body, "rate limit 50/s burst 10")
	require.Contains(t, body, "circuit open", "the failing endpoint's circuit opened")

	code, body = f.get(t, "/outbox/deliveries/"+f.seed.DeadDelivery.String())
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "order.refunded")
	require.Contains(t, body, `<td class="num">502</td>`, "the attempt log shows each answer")
	require.Equal(t, 2, strings.Count(body, `<td class="num">502</td>`), "two attempts, the retry schedule's length")

	code, body = f.get(t, "/partitions")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "wharf_inbox_messages")
	require.Contains(t, body, "wharf_outbox_events")
	require.Contains(t, body, "Retention 30d ·", "durations as the CLI writes them")
	require.Regexp(t, `<td class="num">\d+\.\d KiB</td>`, body, "sizes as the CLI writes them")
	require.NotContains(t, body, " kB<")

	code, body = f.get(t, "/outbox?status=succeeded")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, f.seed.Succeeded, rows(body))

	code, _ = f.get(t, "/inbox/"+"00000000-0000-0000-0000-000000000000")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = f.get(t, "/inbox/not-a-uuid")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = f.get(t, "/outbox/deliveries/not-a-uuid")
	require.Equal(t, http.StatusNotFound, code)
}

// The /inbox and /outbox query strings are a contract: each filter keeps
// exactly what it names, alone and together, and bad values are a 400 that
// says why.
func TestFilters(t *testing.T) {
	t.Parallel()
	f := setup(t, &dashboard.Config{PageSize: 5})
	count := func(path string) int {
		t.Helper()
		n := 0
		for path != "" {
			code, body := f.get(t, path)
			require.Equal(t, http.StatusOK, code, path)
			n += rows(body)
			next := regexp.MustCompile(`rel="next" href="([^"]+)"`).FindStringSubmatch(body)
			path = ""
			if next != nil {
				path = strings.ReplaceAll(next[1], "&amp;", "&")
			}
		}
		return n
	}
	require.Equal(t, 17, count("/inbox"), "every message once across pages")
	require.Equal(t, 3, count("/inbox?status=dead"))
	require.Equal(t, 3, count("/inbox?status=dead&source=billing"))
	require.Equal(t, 0, count("/inbox?status=dead&source=shipping"))
	require.Equal(t, 5, count("/inbox?type=parcel.sent"))
	require.Equal(t, 1, count("/inbox?q=evt_ship_03"), "an event id without its source")
	require.Equal(t, 1, count("/inbox?q=evt_ship_03&source=shipping&since=1h"))
	require.Equal(t, 0, count("/inbox?q=evt_ship_03&source=billing"))
	require.Equal(t, 0, count("/inbox?since="+url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))))
	require.Equal(t, 17, count("/inbox?since=7d"))
	require.Equal(t, 7, count("/outbox"))
	require.Equal(t, 2, count("/outbox?status=dead"))
	require.Equal(t, 4, count("/outbox?type=order.refunded"))
	require.Equal(t, 2, count("/outbox?endpoint="+f.seed.Endpoint.String()+"&type=order.refunded"))

	for path, why := range map[string]string{
		"/inbox?since=yesterday":   "since &#34;yesterday&#34; is neither",
		"/inbox?status=exploded":   "status &#34;exploded&#34; is not one of",
		"/inbox?after=garbage":     "The page link is broken",
		"/outbox?status=nope":      "status &#34;nope&#34; is not one of",
		"/outbox?endpoint=x":       "endpoint is not an endpoint id",
		"/outbox?q=12":             "is not an event id",
		"/outbox?since=-5h":        "is neither",
		"/inbox?since=99999999999": "is neither",
		"/inbox?type=%ff":          "not text",
		"/inbox?q=evt%00x":         "not text",
		"/inbox?source=%c3":        "not text",
		"/outbox?type=%ff":         "not text",
	} {
		code, body := f.get(t, path)
		require.Equal(t, http.StatusBadRequest, code, path)
		require.Contains(t, body, why, path)
	}
}

func TestActions(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	status := func() inbox.Status {
		m, err := f.inbox.Get(ctx, f.seed.DeadMessage)
		require.NoError(t, err)
		return m.Status
	}
	path := "/inbox/" + f.seed.DeadMessage.String() + "/replay"

	code, _ := f.post(t, path, nil, "cross-site")
	require.Equal(t, http.StatusForbidden, code, "a form posted from another site is refused")
	require.Equal(t, inbox.StatusDead, status(), "and changes nothing")

	code, loc := f.post(t, path, nil, "same-origin")
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/inbox/"+f.seed.DeadMessage.String()+"?done=replayed", loc)
	require.Equal(t, inbox.StatusReceived, status())
	_, body := f.get(t, loc)
	require.Contains(t, body, "Replayed: a job will process the message again.")

	code, _ = f.post(t, path, nil, "same-origin")
	require.Equal(t, http.StatusBadRequest, code, "its job is queued: not replayable twice")

	// ReplayMatching stops at its max: one of the other two.
	replayed, skipped, err := f.inbox.ReplayMatching(ctx, &inbox.ListParams{Status: inbox.StatusDead, Limit: 1}, 1, nil)
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 0}, [2]int{replayed, skipped})
	// Replay every dead billing message: the last one.
	code, loc = f.post(t, "/inbox/replay", url.Values{"status": {"dead"}, "source": {"billing"}, "since": {"1h"}}, "same-origin")
	require.Equal(t, http.StatusSeeOther, code)
	require.Contains(t, loc, "n=1")
	require.NotContains(t, loc, "more=")
	msgs, err := f.inbox.List(ctx, &inbox.ListParams{Status: inbox.StatusDead})
	require.NoError(t, err)
	require.Empty(t, msgs)
	code, _ = f.post(t, "/inbox/replay", url.Values{"status": {"processed"}}, "same-origin")
	require.Equal(t, http.StatusBadRequest, code, "replay all takes dead or failed")

	// Endpoints: disable, enable, rotate the secret (never shown), replay dead.
	ep := f.seed.Endpoint.String()
	before, err := f.outbox.EndpointSecret(ctx, f.seed.Endpoint)
	require.NoError(t, err)
	code, _ = f.post(t, "/outbox/endpoints/"+ep+"/disable", url.Values{"reason": {"customer asked"}}, "same-origin")
	require.Equal(t, http.StatusSeeOther, code)
	e, err := f.outbox.EndpointGet(ctx, f.seed.Endpoint)
	require.NoError(t, err)
	require.False(t, e.Enabled)
	require.Equal(t, "customer asked", e.DisabledReason)
	code, _ = f.post(t, "/outbox/endpoints/"+ep+"/enable", nil, "same-origin")
	require.Equal(t, http.StatusSeeOther, code)
	code, loc = f.post(t, "/outbox/endpoints/"+ep+"/rotate-secret", nil, "same-origin")
	require.Equal(t, http.StatusSeeOther, code)
	after, err := f.outbox.EndpointSecret(ctx, f.seed.Endpoint)
	require.NoError(t, err)
	require.NotEqual(t, before, after)
	_, body = f.get(t, loc)
	require.Contains(t, body, "Secret rotated")
	require.NotContains(t, body, after)
	code, _ = f.post(t, "/outbox/endpoints/"+ep+"/explode", nil, "same-origin")
	require.Equal(t, http.StatusBadRequest, code)

	d, err := f.outbox.DeliveryGet(ctx, f.seed.DeadDelivery)
	require.NoError(t, err)
	code, loc = f.post(t, "/outbox/endpoints/"+d.EndpointID.String()+"/replay-dead", nil, "same-origin")
	require.Equal(t, http.StatusSeeOther, code)
	require.Contains(t, loc, "n=2")
	d, err = f.outbox.DeliveryGet(ctx, f.seed.DeadDelivery)
	require.NoError(t, err)
	require.Equal(t, outbox.StatusPending, d.Status)

	// Each action is in the audit log, by the dashboard's operator, and the
	// audit page lists them.
	entries, err := audit.List(ctx, f.pool, nil)
	require.NoError(t, err)
	var actions []string
	for i := len(entries) - 1; i >= 0; i-- {
		actions = append(actions, entries[i].Action+" by "+entries[i].Actor.Kind+":"+entries[i].Actor.ID)
	}
	require.Equal(t, []string{
		"endpoint.create by app:", // the seed's two endpoints
		"endpoint.create by app:",
		"message.replay by operator:dashboard",
		"message.replay by app:", // ReplayMatching above, called without an actor
		"message.replay by operator:dashboard",
		"endpoint.disable by operator:dashboard",
		"endpoint.enable by operator:dashboard",
		"endpoint.rotate_secret by operator:dashboard",
		"endpoint.replay_dead by operator:dashboard",
	}, actions)
	require.Equal(t, "customer asked", entries[3].Reason) // newest first: the disable
	_, body = f.get(t, "/audit")
	require.Equal(t, 6, strings.Count(body, "operator: dashboard"), body)
}

func TestReadOnlyRefusesActions(t *testing.T) {
	t.Parallel()
	f := setup(t, &dashboard.Config{ReadOnly: true})
	_, body := f.get(t, "/inbox/"+f.seed.DeadMessage.String())
	require.NotContains(t, body, "<form method=\"post\"")
	code, _ := f.post(t, "/inbox/"+f.seed.DeadMessage.String()+"/replay", nil, "same-origin")
	require.Equal(t, http.StatusForbidden, code)
	m, err := f.inbox.Get(context.Background(), f.seed.DeadMessage)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, m.Status)
	_, body = f.get(t, "/outbox?status=dead")
	require.NotContains(t, body, "matching this filter")
	code, _ = f.post(t, "/outbox/redrive", url.Values{"status": {"dead"}}, "same-origin")
	require.Equal(t, http.StatusForbidden, code)
}

func TestMountedUnderAPrefix(t *testing.T) {
	t.Parallel()
	f := setup(t, &dashboard.Config{Prefix: "/ops/wharf"})
	code, body := f.get(t, "/ops/wharf/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `href="/ops/wharf/inbox?source=billing&amp;status=dead"`)
	require.Contains(t, body, `href="/ops/wharf/static/style.css"`)
	code, _ = f.get(t, "/ops/wharf/static/style.css")
	require.Equal(t, http.StatusOK, code)
	code, loc := f.post(t, "/ops/wharf/inbox/"+f.seed.DeadMessage.String()+"/replay", nil, "same-origin")
	require.Equal(t, http.StatusSeeOther, code)
	require.True(t, strings.HasPrefix(loc, "/ops/wharf/inbox/"), loc)
}

// Each page costs a fixed number of queries, however many rows it shows:
// no query per row.
func TestQueriesPerPage(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	for path, most := range map[string]int64{
		"/":                                     8,
		"/inbox":                                2,
		"/inbox?q=evt_ship_03":                  3,
		"/inbox/" + f.seed.DeadMessage.String(): 1,
		"/outbox":                               3,
		"/outbox/deliveries/" + f.seed.DeadDelivery.String(): 4,
		"/outbox/endpoints": 3,
		"/partitions":       12,
	} {
		before := f.queries.n.Load()
		code, _ := f.get(t, path)
		require.Equal(t, http.StatusOK, code, path)
		n := f.queries.n.Load() - before
		t.Logf("%s: %d queries", path, n)
		require.LessOrEqual(t, n, most, path)
	}
}

func TestConfigProblemsAreAllReported(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	_, err := dashboard.New(pool, &dashboard.Config{Prefix: "//evil.example", ChartWindow: time.Minute, PageSize: -1})
	require.ErrorIs(t, err, dashboard.ErrInvalidConfig)
	for _, want := range []string{"Prefix", "ChartWindow", "PageSize"} {
		require.Contains(t, err.Error(), want)
	}
	_, err = dashboard.New(nil, nil)
	require.True(t, errors.Is(err, dashboard.ErrInvalidConfig))
}

// The overview and the endpoints page show the same numbers and charts
// whether their hours (received messages, delivery attempts) come from the
// rollup or are counted live, a deleted endpoint's attempts included.
func TestOverviewSameWithRollup(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	// The failing endpoint is deleted: its attempts stay, labelled
	// "(deleted)" on the overview, absent from the endpoints page.
	dead, err := f.outbox.DeliveryGet(ctx, f.seed.DeadDelivery)
	require.NoError(t, err)
	require.NoError(t, f.outbox.EndpointDelete(ctx, dead.EndpointID))
	sections := func() []string {
		code, body := f.get(t, "/")
		require.Equal(t, http.StatusOK, code)
		found := regexp.MustCompile(`(?s)<section>.*?</section>`).FindAllString(body, -1)
		require.Len(t, found, 2, "inbox and outbox")
		return found
	}
	endpointsPage := func() [][]string {
		code, body := f.get(t, "/outbox/endpoints")
		require.Equal(t, http.StatusOK, code)
		found := regexp.MustCompile(`(?s)<tr id="ep-([0-9a-f-]+)">.*?<td class="num">([^<]*)<br><small>(\d+) attempts</small></td>`).FindAllStringSubmatch(body, -1)
		require.Len(t, found, 1, "the remaining endpoint")
		return found
	}
	before, beforeEndpoints := sections(), endpointsPage()
	require.Contains(t, before[0], "Messages per hour from billing")
	require.Contains(t, before[1], "Delivery attempts by outcome per endpoint")
	require.Contains(t, before[1], dead.EndpointID.String()+" (deleted)")
	require.Equal(t, []string{f.seed.Endpoint.String(), "100.0%", "5"}, beforeEndpoints[0][1:])

	// A clock past the end of today: every seeded hour has ended.
	tomorrow := time.Now().UTC().Truncate(24 * time.Hour).Add(24*time.Hour + 10*time.Minute)
	m, err := jobs.NewMaintainer(f.pool, &jobs.Config{Now: func() time.Time { return tomorrow }})
	require.NoError(t, err)
	_, err = m.Rollup(ctx)
	require.NoError(t, err)
	var rolled, rolledAttempts, attempts int64
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT (SELECT COALESCE(sum(received), 0) FROM wharf_inbox_hourly),
		(SELECT COALESCE(sum(attempts), 0) FROM wharf_outbox_attempts_hourly), (SELECT count(*) FROM wharf_outbox_attempts)`).
		Scan(&rolled, &rolledAttempts, &attempts))
	require.EqualValues(t, 17, rolled, "every seeded message is in the rollup")
	require.Equal(t, attempts, rolledAttempts, "every seeded attempt is in the rollup")

	require.Equal(t, before, sections())
	require.Equal(t, beforeEndpoints, endpointsPage())
}

// The deliveries list shows each delivery's event type and endpoint URL
// (not only its id), and a delivery held by its endpoint's open circuit
// says so and when the circuit lets it try, not a time already past.
func TestDeliveriesShowTypeEndpointAndCircuit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setup(t, nil)
	dead, err := f.outbox.DeliveryGet(ctx, f.seed.DeadDelivery)
	require.NoError(t, err)
	failing := dead.EndpointID
	_, err = f.pool.Exec(ctx, "UPDATE wharf_outbox_endpoints SET circuit_state = 'open', circuit_open_until = now() + interval '1 hour' WHERE id = $1", failing)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		_, err := f.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "order.refunded", Data: map[string]int{"order": 7}})
		return err
	}))
	ep, err := f.outbox.EndpointGet(ctx, failing)
	require.NoError(t, err)

	code, body := f.get(t, "/outbox?status=pending")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 2, rows(body), "the new event's deliveries, one per endpoint")
	require.Contains(t, body, "<th>Type</th>")
	held := regexp.MustCompile(`(?s)<tr>.*?</tr>`).FindAllString(body[strings.Index(body, "<tbody>"):], -1)
	var heldRow, freeRow string
	for _, row := range held {
		if strings.Contains(row, failing.String()) {
			heldRow = row
		} else {
			freeRow = row
		}
	}
	require.Contains(t, heldRow, "<td>order.refunded</td>")
	require.Contains(t, heldRow, ">http://127.0.0.1:", "the endpoint by its URL")
	require.Contains(t, heldRow, "held by open circuit")
	require.Contains(t, heldRow, `title="`+ep.CircuitOpenUntil.UTC().Format("2006-01-02 15:04:05Z")+`">in `, "due when the circuit lets it try")
	require.Contains(t, freeRow, "<td>order.refunded</td>")
	require.NotContains(t, freeRow, "held by open circuit")
	require.NotContains(t, body, f.seed.EndpointPassword)

	id := regexp.MustCompile(`href="/outbox/deliveries/([0-9a-f-]+)"`).FindStringSubmatch(heldRow)
	require.NotNil(t, id)
	code, body = f.get(t, "/outbox/deliveries/"+id[1])
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<dd id="next-attempt">`+ep.CircuitOpenUntil.UTC().Format("2006-01-02 15:04:05Z")+" (held by open circuit)</dd>")
}

// TestRedriveFromTheOutboxPage: the outbox page, filtered to dead
// deliveries, counts and then replays those a range of status codes
// selects; a code range that matches none changes nothing, and a bad one
// is refused.
func TestRedriveFromTheOutboxPage(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	_, body := f.get(t, "/outbox?status=dead")
	require.Contains(t, body, "Replay every dead delivery matching this filter")
	_, body = f.get(t, "/outbox?status=pending")
	require.NotContains(t, body, "matching this filter", "only dead or succeeded ones")

	form := url.Values{"status": {"dead"}, "type": {"order.refunded"}, "since": {"1h"}, "codes": {"4xx"}, "dry_run": {"1"}}
	code, loc := f.post(t, "/outbox/redrive", form, "same-origin")
	require.Equal(t, http.StatusSeeOther, code)
	_, body = f.get(t, loc)
	require.Contains(t, body, "Dry run: 0 deliveries match", "the seed's endpoint answers 502")
	form.Set("codes", "5xx")
	code, loc = f.post(t, "/outbox/redrive", form, "same-origin")
	require.Equal(t, http.StatusSeeOther, code)
	_, body = f.get(t, loc)
	require.Contains(t, body, "Dry run: 2 deliveries match; nothing was changed.")
	dead, err := f.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{Status: outbox.StatusDead})
	require.NoError(t, err)
	require.Len(t, dead, 2)

	for _, bad := range []url.Values{{"status": {"dead"}, "codes": {"6xx"}}, {"status": {"pending"}}} {
		code, _ = f.post(t, "/outbox/redrive", bad, "same-origin")
		require.Equal(t, http.StatusBadRequest, code, bad)
	}
	form.Del("dry_run")
	code, loc = f.post(t, "/outbox/redrive", form, "same-origin")
	require.Equal(t, http.StatusSeeOther, code)
	_, body = f.get(t, loc)
	require.Contains(t, body, "Replayed 2 of 2 matching deliveries")
	dead, err = f.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{Status: outbox.StatusDead})
	require.NoError(t, err)
	require.Empty(t, dead)
	entries, err := audit.List(ctx, f.pool, nil)
	require.NoError(t, err)
	require.Equal(t, "delivery.redrive", entries[0].Action)
	require.Equal(t, "dashboard", entries[0].Actor.ID)
}

// TestLateArrivalShown: a message received again after its key was pruned
// says so on its page (the earlier message, linked, when it was
// processed, the policy) and in the list.
func TestLateArrivalShown(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	receive := func() *inbox.Result {
		var res *inbox.Result
		require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			var err error
			res, err = f.inbox.ReceiveTx(ctx, tx, inbox.Incoming{Source: "late-src", EventID: "evt_late", EventType: "t", Body: []byte(`{}`)})
			return err
		}))
		return res
	}
	first := receive()
	_, err := f.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'processed', processed_at = now() WHERE id = $1", first.MessageID)
	require.NoError(t, err)
	_, err = dbsqlc.New(f.pool).RetentionInboxKeysDelete(ctx, dbsqlc.RetentionInboxKeysDeleteParams{
		Cutoff: time.Now().Add(time.Hour), ErasedCutoff: time.Now().Add(-time.Hour), BatchSize: 1000,
	})
	require.NoError(t, err)
	late := receive()
	require.Equal(t, first.MessageID, late.RedeliveryOf)

	code, body := f.get(t, "/inbox/"+late.MessageID.String())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="late"`)
	require.Contains(t, body, `href="/inbox/`+first.MessageID.String()+`"`)
	require.Contains(t, body, "that one was processed 20")
	require.Contains(t, body, "Source policy: process.")
	code, body = f.get(t, "/inbox/"+first.MessageID.String())
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, `id="late"`)
	code, body = f.get(t, "/inbox?source=late-src")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 1, strings.Count(body, `<span class="status late"`), "the late arrival, not the first")
}
