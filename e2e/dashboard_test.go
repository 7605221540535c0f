package e2e

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/dashboard"
	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/dashtest"
	"github.com/wharfhq/wharf/internal/testdb"
)

// chromium finds Debian's chromium, failing the test (never skipping it)
// when it is missing.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: the browser test needs it (Debian: apt-get install chromium; .ci/run installs it)")
	return ""
}

// browser starts a headless chromium for the test and returns a context
// driving one tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // CI runs as root, where chromium's sandbox cannot start
		chromedp.WindowSize(1280, 1100),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

// The operator's path through the dashboard in a real browser: open the
// overview, filter the inbox to dead messages, open one, press replay and
// see its status change (in the page and in the database).
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	seed := dashtest.Seed(t, pool)
	h, err := dashboard.New(pool, &dashboard.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	server := httptest.NewServer(h)
	t.Cleanup(server.Close)

	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(server.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`svg.chart`)),
	))
	overview, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
	require.NoError(t, err)
	require.Contains(t, overview, "billing")
	require.Contains(t, overview, "shipping")
	screenshot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	require.NoError(t, err)

	// The inbox page's filter form: status dead, submitted as a user would.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`nav a[href="/inbox"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.filters`)),
		chromedp.SetValue(chromedp.CSS(`select[name="status"]`), "dead"),
		chromedp.Click(chromedp.CSS(`form.filters button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.action`)), // "Replay every dead message…" shows for a dead filter
	))
	rows, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`table tbody`)))
	require.NoError(t, err)
	require.Equal(t, 3, strings.Count(rows, "invoice.broken"), rows)
	require.NotContains(t, rows, "invoice.paid")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`a[href="/inbox/`+seed.DeadMessage.String()+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#replay`)),
	))
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#status`)))
	require.NoError(t, err)
	require.Equal(t, "dead", status)
	page, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
	require.NoError(t, err)
	require.Contains(t, page, "[redacted]")
	require.NotContains(t, page, seed.SignatureValue)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#replay`)),
		chromedp.WaitVisible(chromedp.CSS(`p.done`)),
	))
	status, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#status`)))
	require.NoError(t, err)
	require.Equal(t, "received", status, "replayed: queued for processing again")
	ib, err := inbox.New(pool, nil)
	require.NoError(t, err)
	m, err := ib.Get(context.Background(), seed.DeadMessage)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusReceived, m.Status)

	// make screenshot keeps the overview for the README.
	if path := os.Getenv("WHARF_SCREENSHOT"); path != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, screenshot, 0o644))
		t.Logf("wrote %s", path)
	}
}
