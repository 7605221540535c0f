package e2e

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/portal"
)

var portalKey = bytes.Repeat([]byte("p"), 32)

// portalServer is an outbox with River working its deliveries and the
// portal mounted at /portal/.
type portalServer struct {
	pool   *pgxpool.Pool
	outbox *outbox.Outbox
	server *httptest.Server
}

func newPortalServer(t *testing.T) *portalServer {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pool, err := pgxpool.New(context.Background(), testdb.NewURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ob, err := outbox.New(pool, &outbox.Config{AllowPrivateNetworks: true, Logger: quiet})
	require.NoError(t, err)
	h, err := portal.New(&portal.Config{Outbox: ob, Pool: pool, Keys: [][]byte{portalKey}, Prefix: "/portal", Name: "Acme Payments", Logger: quiet})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/portal/", h)
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)

	workers := river.NewWorkers()
	require.NoError(t, ob.AddWorkers(workers))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{ob.Queue(): {MaxWorkers: 5}},
		Workers: workers, FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
		Logger: quiet,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	return &portalServer{pool: pool, outbox: ob, server: server}
}

// A tenant's path through the portal in a real browser: open the magic
// link, see its own endpoints and never another tenant's, add one, read
// its secret, send a test event, see the delivery and send it again.
func TestPortalInABrowser(t *testing.T) {
	t.Parallel()
	ps := newPortalServer(t)
	ctx := context.Background()
	received := make(chan string, 10)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received <- r.Header.Get("webhook-id")
	}))
	t.Cleanup(receiver.Close)

	theirs, err := ps.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://globex.example/hooks", Tenant: "globex"})
	require.NoError(t, err)
	mine, err := ps.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://acme.example/old", Tenant: "acme", Description: "old receiver"})
	require.NoError(t, err)

	link, err := portal.NewLink(portalKey, ps.server.URL+"/portal/", portal.Token{Tenant: "acme", Expires: time.Now().Add(10 * time.Minute)})
	require.NoError(t, err)
	b := browser(t)
	require.NoError(t, chromedp.Do(b,
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.CSS(`#endpoints`)),
	))
	location, err := chromedp.Run(b, chromedp.Location())
	require.NoError(t, err)
	require.NotContains(t, location, "token=", "the link's token leaves the address bar")
	list, err := chromedp.Run(b, chromedp.Text(chromedp.CSS(`main`)))
	require.NoError(t, err)
	require.Contains(t, list, "acme.example/old")
	require.NotContains(t, list, "globex")

	// Another tenant's endpoint, asked for by id, is not found.
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(ps.server.URL+"/portal/endpoints/"+theirs.ID.String())))
	page, err := chromedp.Run(b, chromedp.Text(chromedp.CSS(`main`)))
	require.NoError(t, err)
	require.Contains(t, page, "not found")
	require.NotContains(t, page, "globex.example")

	// Add an endpoint through the form.
	require.NoError(t, chromedp.Do(b,
		chromedp.Navigate(ps.server.URL+"/portal/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="url"]`)),
		chromedp.SetValue(chromedp.CSS(`input[name="url"]`), receiver.URL+"/webhooks"),
		chromedp.SetValue(chromedp.CSS(`input[name="description"]`), "production"),
		chromedp.Click(chromedp.CSS(`form.stack button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#secret`)),
	))
	secret, err := chromedp.Run(b, chromedp.Text(chromedp.CSS(`#secret`)))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	tenant := "acme"
	eps, err := ps.outbox.EndpointList(ctx, &outbox.EndpointListParams{Tenant: &tenant})
	require.NoError(t, err)
	require.Len(t, eps, 2)
	var created *outbox.Endpoint
	for _, ep := range eps {
		if ep.ID != mine.ID {
			created = ep
		}
	}
	require.Equal(t, "acme", created.Tenant)
	stored, err := ps.outbox.EndpointSecret(ctx, created.ID)
	require.NoError(t, err)
	require.Equal(t, stored, secret)

	// A test event arrives, and shows in the endpoint's deliveries. (From
	// the endpoint's own page: the page the form answered already shows a
	// message, and reloading it would post the form again.)
	require.NoError(t, chromedp.Do(b,
		chromedp.Navigate(ps.server.URL+"/portal/endpoints/"+created.ID.String()),
		chromedp.WaitVisible(chromedp.CSS(`form[action$="/test"] button`)),
		chromedp.Click(chromedp.CSS(`form[action$="/test"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`p.done`)),
	))
	var webhookID string
	select {
	case webhookID = <-received:
	case <-time.After(30 * time.Second):
		t.Fatal("the test event did not arrive in 30s")
	}
	require.NoError(t, chromedp.Do(b,
		chromedp.Navigate(ps.server.URL+"/portal/endpoints/"+created.ID.String()),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-webhook-id="`+webhookID+`"]`)),
	))
	screenshot, err := chromedp.Run(b, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(b,
		chromedp.Click(chromedp.CSS(`tr[data-webhook-id="`+webhookID+`"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`#webhook-id`)),
	))
	require.NoError(t, chromedp.Do(b,
		chromedp.Click(chromedp.CSS(`form[action$="/replay"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`p.done`)),
	))
	select {
	case again := <-received:
		require.Equal(t, webhookID, again, "a replay keeps the webhook-id")
	case <-time.After(30 * time.Second):
		t.Fatal("the replay did not arrive in 30s")
	}

	// The other tenant's link shows its own endpoint and none of acme's.
	other, err := portal.NewLink(portalKey, ps.server.URL+"/portal/", portal.Token{Tenant: "globex", Expires: time.Now().Add(10 * time.Minute), ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(b,
		chromedp.Navigate(other),
		chromedp.WaitVisible(chromedp.CSS(`#endpoints`)),
	))
	list, err = chromedp.Run(b, chromedp.Text(chromedp.CSS(`main`)))
	require.NoError(t, err)
	require.Contains(t, list, "globex.example")
	require.NotContains(t, list, "acme.example")
	require.NotContains(t, list, receiver.URL)
	forms, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll("form").length`))
	require.NoError(t, err)
	require.EqualValues(t, 0, forms, "a read-only link shows no actions")

	if path := os.Getenv("WHARF_PORTAL_SCREENSHOT"); path != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, screenshot, 0o644))
		t.Logf("wrote %s", path)
	}
}
