// Package portal lets an application's own customers (its tenants) manage
// their webhook endpoints: a JSON API under {prefix}/api/v1, described by
// OpenAPI 3.1 at {prefix}/api/v1/openapi.json, and server-rendered pages
// over the same operations. Mount the Handler where the application
// serves its own pages:
//
//	h, err := portal.New(&portal.Config{Outbox: out, Pool: pool, Keys: [][]byte{key}, Prefix: "/portal"})
//	mux.Handle("/portal/", h)
//
// Every request acts for one tenant: the one a bearer token names (minted
// by the application with NewToken, or in a link with NewLink), or the one
// the application's own Authenticate returns. Another tenant's endpoints
// and deliveries answer 404, as ids that do not exist.
package portal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/internal/audit"
	"github.com/wharfhq/wharf/outbox"
)

// ErrInvalidConfig is returned by New for a Config it cannot use.
var ErrInvalidConfig = errors.New("portal: invalid config")

// ErrUnauthenticated is for Authenticate to return when a request carries
// no identity of the application's (the portal answers 401).
var ErrUnauthenticated = errors.New("portal: unauthenticated")

// Config configures a Handler.
type Config struct {
	// Outbox is the application's outbox. Required.
	Outbox *outbox.Outbox
	// Pool is the outbox's pool: changes run in its transactions.
	// Required.
	Pool *pgxpool.Pool
	// Keys verify bearer tokens and portal links: tokens signed with any
	// of them are accepted; mint new ones with the first (rotate by
	// putting a new key first and dropping the old one once its tokens
	// have expired). Each at least MinKeyBytes. Keys, Authenticate or both
	// are required.
	Keys [][]byte
	// Authenticate, when set, takes the tenant from the application's own
	// authentication (its session cookie, say) for requests without a
	// bearer token or portal cookie. It returns ErrUnauthenticated (401)
	// or another error (500) when it finds none. Such requests may change
	// things: writes must come from the portal's own origin (see
	// TrustedOrigins).
	Authenticate func(*http.Request) (tenant string, err error)
	// Prefix is the path the handler is mounted under, without a trailing
	// slash ("/portal" for mux.Handle("/portal/", h)). Defaults to "".
	Prefix string
	// Name is the application's name in the portal's title. Defaults to
	// "Webhooks".
	Name string
	// LogoURL is an image shown beside the name. Defaults to none.
	LogoURL string
	// StylesheetURL is a stylesheet loaded after the portal's own, to
	// restyle it. Defaults to none.
	StylesheetURL string
	// TrustedOrigins are origins ("https://app.example.com") whose pages
	// may send changes (POST, PATCH, DELETE) from a browser, beside the
	// portal's own. Defaults to none.
	TrustedOrigins []string
	// Logger logs failures the client sees as 500. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock tokens are checked against. Defaults to time.Now.
	Now func() time.Time
}

// Handler serves the API and the portal's pages.
type Handler struct {
	cfg     Config
	handler http.Handler
	pages   *pages
	// csp is the pages' Content-Security-Policy: no script, styles and
	// images from the portal and the configured URLs' origins, forms to
	// the portal, framed only by the portal's and the trusted origins.
	csp string
}

// New returns a Handler, or an error where errors.Is(err,
// ErrInvalidConfig) is true.
func New(cfg *Config) (*Handler, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: nil config", ErrInvalidConfig)
	}
	c := *cfg
	var problems []string
	if c.Outbox == nil {
		problems = append(problems, "Outbox is required")
	}
	if c.Pool == nil {
		problems = append(problems, "Pool is required")
	}
	if len(c.Keys) == 0 && c.Authenticate == nil {
		problems = append(problems, "Keys or Authenticate is required")
	}
	for i, k := range c.Keys {
		if len(k) < MinKeyBytes {
			problems = append(problems, fmt.Sprintf("Keys[%d] is %d bytes, at least %d are needed", i, len(k), MinKeyBytes))
		}
	}
	if c.Prefix != "" && (!strings.HasPrefix(c.Prefix, "/") || strings.HasSuffix(c.Prefix, "/") ||
		strings.HasPrefix(c.Prefix, "//") || strings.ContainsAny(c.Prefix, "\\?#")) {
		problems = append(problems, fmt.Sprintf("Prefix %q must be a path: start with one /, not end with one, no \\, ? or #", c.Prefix))
	}
	protection := http.NewCrossOriginProtection()
	for _, origin := range c.TrustedOrigins {
		if err := protection.AddTrustedOrigin(origin); err != nil {
			problems = append(problems, fmt.Sprintf("TrustedOrigins: %v", err))
		}
	}
	styles, images := "'self'", "'self' data:"
	for _, u := range []struct {
		field string
		value string
		dst   *string
	}{{"StylesheetURL", c.StylesheetURL, &styles}, {"LogoURL", c.LogoURL, &images}} {
		if u.value == "" {
			continue
		}
		origin, err := originOf(u.value)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", u.field, err))
			continue
		}
		if origin != "" {
			*u.dst += " " + origin
		}
	}
	frames := "'self'"
	for _, origin := range c.TrustedOrigins {
		frames += " " + origin
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	if c.Name == "" {
		c.Name = "Webhooks"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	h := &Handler{cfg: c, csp: "default-src 'none'; style-src " + styles + "; img-src " + images +
		"; form-action 'self'; base-uri 'none'; frame-ancestors " + frames}
	var err error
	if h.pages, err = newPages(h); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	h.apiRoutes(mux)
	h.pageRoutes(mux)
	// A refused cross-origin write answers as the API's errors do.
	protection.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "cross-origin request refused: send it from the portal's origin or a trusted one"})
	}))
	var handler http.Handler = protection.Handler(mux)
	if c.Prefix != "" {
		handler = http.StripPrefix(c.Prefix, handler)
	}
	h.handler = handler
	return h, nil
}

// ServeHTTP serves the API and the pages.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.handler.ServeHTTP(w, r)
}

// originOf returns the origin of an absolute http(s) URL, "" for a path
// on the portal's own host.
func originOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil || strings.ContainsAny(raw, " ;'\"\n\r"):
		return "", fmt.Errorf("%q is not a URL", raw)
	case u.Scheme == "" && u.Host == "" && strings.HasPrefix(u.Path, "/"):
		return "", nil
	case (u.Scheme == "https" || u.Scheme == "http") && u.Host != "":
		return u.Scheme + "://" + u.Host, nil
	}
	return "", fmt.Errorf("%q is neither an absolute http(s) URL nor a path", raw)
}

// access is who a request acts for.
type access struct {
	tenant   string
	readOnly bool
	// viaCookie: the portal's cookie authenticated it.
	viaCookie bool
}

type accessKey struct{}

// cookieName holds a portal session: the token of the link it came from.
const cookieName = "wharf_portal"

var (
	// errNoCredentials is a request without any.
	errNoCredentials = errors.New("no credentials")
)

// authenticate finds who r acts for: a bearer token, then (for pages) the
// portal's cookie, then the application's Authenticate.
func (h *Handler) authenticate(r *http.Request, allowCookie bool) (*access, error) {
	// A bearer token decides; another scheme (the app's Basic auth, say)
	// is not the portal's, and the cookie or Authenticate may still.
	if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return h.parse(strings.TrimSpace(token), false)
	}
	if allowCookie {
		if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
			return h.parse(c.Value, true)
		}
	}
	if h.cfg.Authenticate != nil {
		tenant, err := h.cfg.Authenticate(r)
		if err != nil {
			return nil, err
		}
		if err := checkTenant(tenant); err != nil {
			return nil, fmt.Errorf("Authenticate: %w", err)
		}
		return &access{tenant: tenant}, nil
	}
	return nil, errNoCredentials
}

func (h *Handler) parse(token string, viaCookie bool) (*access, error) {
	t, err := parseToken(h.cfg.Keys, token, h.cfg.Now())
	if err != nil {
		return nil, err
	}
	return &access{tenant: t.Tenant, readOnly: t.ReadOnly, viaCookie: viaCookie}, nil
}

func accessOf(ctx context.Context) *access { return ctx.Value(accessKey{}).(*access) }

// withAccess is ctx acting for a: the tenant is also the actor the audit
// log names.
func withAccess(ctx context.Context, a *access) context.Context {
	ctx = audit.WithActor(ctx, audit.Actor{Kind: audit.KindTenant, ID: a.tenant})
	return context.WithValue(ctx, accessKey{}, a)
}

// unauthenticated is whether an authenticate error is the client's (401)
// rather than the application's Authenticate failing (500).
func unauthenticated(err error) bool {
	return errors.Is(err, ErrInvalidToken) || errors.Is(err, ErrUnauthenticated) ||
		errors.Is(err, errNoCredentials)
}
