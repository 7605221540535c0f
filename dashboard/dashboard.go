package dashboard

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/audit"
	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/ops"
	"github.com/wharfhq/wharf/internal/shared"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/outbox"
)

// DefaultChartWindow is how far back the overview's charts look.
const DefaultChartWindow = 24 * time.Hour

// DefaultPageSize is how many rows a list page shows.
const DefaultPageSize = 50

// ErrInvalidConfig is wrapped by New's errors for a Config it cannot use.
var ErrInvalidConfig = errors.New("dashboard: invalid config")

// Config configures the dashboard. The zero value works: every component
// is built from the pool with its defaults.
type Config struct {
	// Inbox lists, replays and skips messages. Pass the application's own
	// to replay onto its queue. Defaults to inbox.New(pool, &inbox.Config{})
	// (a replayed message whose River job is gone gets a new one on
	// inbox.DefaultQueue).
	Inbox *inbox.Inbox
	// Outbox lists deliveries and operates endpoints. Pass the
	// application's own when it sets outbox.Config.SecretKeys, so that
	// secrets rotated here are encrypted as its are. Defaults to
	// outbox.New(pool, &outbox.Config{}).
	Outbox *outbox.Outbox
	// Maintainer reports partitions and retention. Pass the application's
	// own to report its retention settings. Defaults to
	// jobs.NewMaintainer(pool, &jobs.Config{}) (the default retention).
	Maintainer *jobs.Maintainer
	// Prefix is the path the handler is mounted under, without a trailing
	// slash ("/wharf" for mux.Handle("/wharf/", h)); links and redirects
	// carry it. Defaults to "" (the root).
	Prefix string
	// RiverUIPrefix is where riverui is mounted beside the dashboard (as
	// `wharf serve` mounts it at /riverui): a message's page links to its
	// River job there. Defaults to "": no links.
	RiverUIPrefix string
	// ReadOnly removes every action (replay, skip, enable, disable,
	// rotate) and refuses their POSTs with 403. Defaults to false.
	ReadOnly bool
	// Operator names the person behind an action, for the audit log: the
	// application's own user, from the request its authentication let
	// through. Defaults to "dashboard".
	Operator func(*http.Request) string
	// ChartWindow is how far back the overview's hourly charts look, at
	// most 7 days. Defaults to DefaultChartWindow.
	ChartWindow time.Duration
	// PageSize is how many rows a list page shows, at most 1000. Defaults
	// to DefaultPageSize.
	PageSize int
	// Logger receives failed page loads and every action taken. Defaults
	// to slog.Default().
	Logger *slog.Logger
}

// Handler is the dashboard. It is safe for concurrent use.
type Handler struct {
	pool    *pgxpool.Pool
	queries *dbsqlc.Queries
	inbox   *inbox.Inbox
	outbox  *outbox.Outbox
	maint   *jobs.Maintainer
	cfg     Config
	tmpl    map[string]*template.Template
	handler http.Handler
	now     func() time.Time
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns the dashboard reading pool.
func New(pool *pgxpool.Pool, cfg *Config) (*Handler, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidConfig)
	}
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	problems := shared.NewProblems(ErrInvalidConfig)
	switch {
	case c.ChartWindow == 0:
		c.ChartWindow = DefaultChartWindow
	case c.ChartWindow < time.Hour || c.ChartWindow > 7*24*time.Hour:
		problems.Addf("ChartWindow %s is outside 1h to 168h", c.ChartWindow)
	}
	switch {
	case c.PageSize == 0:
		c.PageSize = DefaultPageSize
	case c.PageSize < 1 || c.PageSize > 1000:
		problems.Addf("PageSize %d is outside 1 to 1000", c.PageSize)
	}
	if c.Prefix != "" && (!strings.HasPrefix(c.Prefix, "/") || strings.HasSuffix(c.Prefix, "/") ||
		strings.HasPrefix(c.Prefix, "//") || strings.ContainsAny(c.Prefix, "\\?#")) {
		problems.Addf("Prefix %q must be a path: start with one /, not end with one, no \\, ? or #", c.Prefix)
	}
	if err := problems.Err(); err != nil {
		return nil, err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	h := &Handler{pool: pool, queries: dbsqlc.New(pool), cfg: c, now: time.Now,
		inbox: c.Inbox, outbox: c.Outbox, maint: c.Maintainer}
	var err error
	if h.inbox == nil {
		if h.inbox, err = inbox.New(pool, &inbox.Config{Logger: c.Logger}); err != nil {
			return nil, err
		}
	}
	if h.outbox == nil {
		if h.outbox, err = outbox.New(pool, &outbox.Config{Logger: c.Logger}); err != nil {
			return nil, err
		}
	}
	if h.maint == nil {
		if h.maint, err = jobs.NewMaintainer(pool, &jobs.Config{Logger: c.Logger}); err != nil {
			return nil, err
		}
	}
	if h.tmpl, err = parseTemplates(c.Prefix); err != nil {
		return nil, err
	}
	h.handler = h.routes()
	return h, nil
}

// ServeHTTP serves the dashboard's pages.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.handler.ServeHTTP(w, r)
}

func (h *Handler) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", h.overview)
	mux.HandleFunc("GET /inbox", h.inboxList)
	mux.HandleFunc("GET /inbox/{id}", h.inboxMessage)
	mux.HandleFunc("GET /outbox", h.deliveryList)
	mux.HandleFunc("GET /outbox/deliveries/{id}", h.deliveryShow)
	mux.HandleFunc("GET /outbox/endpoints", h.endpointList)
	mux.HandleFunc("GET /partitions", h.partitions)
	mux.HandleFunc("GET /audit", h.auditLog)
	mux.HandleFunc("POST /inbox/replay", h.action(h.inboxReplayMatching))
	mux.HandleFunc("POST /inbox/{id}/replay", h.action(h.inboxReplay))
	mux.HandleFunc("POST /inbox/{id}/skip", h.action(h.inboxSkip))
	mux.HandleFunc("POST /outbox/deliveries/{id}/replay", h.action(h.deliveryReplay))
	mux.HandleFunc("POST /outbox/redrive", h.action(h.deliveryRedrive))
	mux.HandleFunc("POST /outbox/endpoints/{id}/{op}", h.action(h.endpointAction))
	var handler http.Handler = mux
	if h.cfg.Prefix != "" {
		handler = http.StripPrefix(h.cfg.Prefix, mux)
	}
	// Form posts from another site are refused: the browser's Sec-Fetch-Site
	// or Origin header says where they come from.
	return http.NewCrossOriginProtection().Handler(securityHeaders(handler))
}

// securityHeaders keeps the pages out of frames and scripts off them.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// action wraps a state-changing handler: refused when read-only, logged,
// and answered with a redirect (303) to where it returns.
func (h *Handler) action(do func(r *http.Request) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.ReadOnly {
			h.fail(w, r, http.StatusForbidden, "This dashboard is read-only.", nil)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, "The form could not be read.", nil)
			return
		}
		operator := "dashboard"
		if h.cfg.Operator != nil {
			operator = h.cfg.Operator(r)
		}
		r = r.WithContext(audit.WithActor(r.Context(), audit.Actor{Kind: audit.KindOperator, ID: operator}))
		to, err := do(r)
		var bad badRequest
		switch {
		case errors.As(err, &bad):
			h.fail(w, r, http.StatusBadRequest, bad.msg, nil)
			return
		case errors.Is(err, inbox.ErrNotFound) || errors.Is(err, outbox.ErrNotFound):
			h.fail(w, r, http.StatusNotFound, "Not found: it may have been dropped by retention.", nil)
			return
		case err != nil:
			h.fail(w, r, http.StatusInternalServerError, "The action failed; the server log says why.", err)
			return
		}
		h.cfg.Logger.InfoContext(r.Context(), "dashboard: action", "path", r.URL.Path, "remote_addr", r.RemoteAddr)
		http.Redirect(w, r, h.cfg.Prefix+to, http.StatusSeeOther)
	}
}

// badRequest is an action or filter the user got wrong; its message is
// shown.
type badRequest struct{ msg string }

func (b badRequest) Error() string { return b.msg }

// fail renders an error page. err, when not nil, is logged (it is not
// shown: it may name tables or values).
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string, err error) {
	if err != nil {
		h.cfg.Logger.ErrorContext(r.Context(), "dashboard: page failed", "path", r.URL.Path, "error", err)
	}
	h.render(w, r, status, "error", map[string]any{"Title": http.StatusText(status), "Message": msg})
}

// render executes page into a buffer first, so that a template error
// does not leave half a page behind a 200.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, page string, data map[string]any) {
	data["ReadOnly"] = h.cfg.ReadOnly
	data["RiverUI"] = h.cfg.RiverUIPrefix
	data["Path"] = r.URL.Path
	data["Now"] = h.now().UTC()
	var buf bytes.Buffer
	if err := h.tmpl[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		h.cfg.Logger.ErrorContext(r.Context(), "dashboard: render failed", "page", page, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func parseTemplates(prefix string) (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"link": func(p string) string { return prefix + p },
		"ago":  ago,
		"when": func(t any) string {
			switch v := t.(type) {
			case time.Time:
				return v.UTC().Format("2006-01-02 15:04:05Z")
			case *time.Time:
				if v == nil {
					return "—"
				}
				return v.UTC().Format("2006-01-02 15:04:05Z")
			}
			return ""
		},
		"pct": func(n, d int64) string {
			if d == 0 {
				return "—"
			}
			return ops.Percent(ops.Ratio(n, d))
		},
		"percent": ops.Percent,
		"dur":     ops.Duration,
		"query": func(kv ...string) string {
			v := url.Values{}
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i+1] != "" {
					v.Set(kv[i], kv[i+1])
				}
			}
			if len(v) == 0 {
				return ""
			}
			return "?" + v.Encode()
		},
		"list":  func(v ...string) []string { return v },
		"bytes": ops.Bytes,
		"derefInt": func(p *int) string {
			if p == nil {
				return "—"
			}
			return strconv.Itoa(*p)
		},
	}
	pages, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := make(map[string]*template.Template)
	for _, p := range pages {
		name := strings.TrimSuffix(strings.TrimPrefix(p, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", p)
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// ago says how long before now t was, to the second, for a person.
func ago(t any) string {
	var at time.Time
	switch v := t.(type) {
	case time.Time:
		at = v
	case *time.Time:
		if v == nil {
			return "—"
		}
		at = *v
	default:
		return ""
	}
	d := time.Since(at)
	switch {
	case d < 0:
		return "in " + ops.Duration((-d).Round(time.Second))
	case d < time.Minute:
		return ops.Duration(d.Round(time.Second)) + " ago"
	case d < 48*time.Hour:
		return ops.Duration(d.Round(time.Minute)) + " ago"
	default:
		return strconv.Itoa(int(d/ops.Day)) + "d ago"
	}
}

// maxSince is the longest since filter.
const maxSince = 3650 * ops.Day

// parseSince reads a since filter: a duration back from now, as the CLI
// reads one ("90m", "24h", "7d", "1d12h"), a date (2006-01-02, UTC) or an
// RFC 3339 time. Empty is the zero time (no bound).
func parseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := ops.ParseDuration(s); err == nil && d <= maxSince {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, badRequest{fmt.Sprintf("since %q is neither a duration (24h, 7d), a date (2006-01-02) nor an RFC 3339 time", shared.Text(s, 40))}
}
