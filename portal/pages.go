package portal

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/outbox"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pages renders the portal: server-side HTML over the API's operations,
// no script.
type pages struct {
	h    *Handler
	tmpl map[string]*template.Template
}

// doneMessages are what the page says after an action (?done=key): fixed
// texts, so a link cannot put words in the portal's mouth.
var doneMessages = map[string]string{
	"test":     "A test event is on its way.",
	"replayed": "The delivery is being sent again.",
	"disabled": "The endpoint is disabled: it gets no new events.",
	"enabled":  "The endpoint is enabled.",
	"deleted":  "The endpoint is deleted.",
	"updated":  "The endpoint is saved.",
}

func newPages(h *Handler) (*pages, error) {
	funcs := template.FuncMap{
		"link": func(p string) string { return h.cfg.Prefix + p },
		"when": func(t any) string {
			switch v := t.(type) {
			case time.Time:
				return v.UTC().Format("2006-01-02 15:04:05Z")
			case *time.Time:
				if v != nil {
					return v.UTC().Format("2006-01-02 15:04:05Z")
				}
			}
			return "—"
		},
		"pretty": func(raw json.RawMessage) string {
			var buf bytes.Buffer
			if len(raw) == 0 || json.Indent(&buf, raw, "", "  ") != nil {
				return ""
			}
			return buf.String()
		},
		"code": func(p *int) string {
			if p == nil {
				return "—"
			}
			return http.StatusText(*p) + " (" + itoa(*p) + ")"
		},
	}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	p := &pages{h: h, tmpl: map[string]*template.Template{}}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if name == "templates/layout.html" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, name)
		if err != nil {
			return nil, err
		}
		p.tmpl[name[len("templates/"):]] = t
	}
	return p, nil
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func (h *Handler) pageRoutes(mux *http.ServeMux) {
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	page := func(pattern string, write bool, fn func(http.ResponseWriter, *http.Request) error) {
		mux.Handle(pattern, h.page(write, fn))
	}
	page("GET /{$}", false, h.pages.endpoints)
	page("POST /endpoints", true, h.pages.create)
	page("GET /endpoints/{id}", false, h.pages.endpoint)
	page("POST /endpoints/{id}", true, h.pages.update)
	page("POST /endpoints/{id}/secret", true, h.pages.secret) // see errSecretReadOnly
	page("POST /endpoints/{id}/rotate", true, h.pages.rotate)
	page("POST /endpoints/{id}/test", true, h.pages.test)
	page("POST /endpoints/{id}/disable", true, h.pages.disable)
	page("POST /endpoints/{id}/enable", true, h.pages.enable)
	page("POST /endpoints/{id}/delete", true, h.pages.remove)
	page("GET /deliveries/{id}", false, h.pages.delivery)
	page("POST /deliveries/{id}/replay", true, h.pages.replay)
	page("GET /event-types", false, h.pages.eventTypes)
	page("GET /activity", false, h.pages.activity)
}

// page authenticates a page request (a ?token= link sets the cookie
// first), runs fn and renders its error.
func (h *Handler) page(write bool, fn func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", h.csp)
		if tok := r.URL.Query().Get("token"); tok != "" && r.Method == http.MethodGet {
			h.login(w, r, tok)
			return
		}
		a, err := h.authenticate(r, true)
		if err != nil {
			status := http.StatusUnauthorized
			msg := "Open the portal through the link you were given; this one has expired or is not valid."
			if !unauthenticated(err) {
				status, msg = http.StatusInternalServerError, "Something went wrong."
				h.cfg.Logger.ErrorContext(r.Context(), "wharf portal: authentication failed", "error", err)
			}
			h.pages.render(w, r, status, "error.html", &view{Title: "Sign in"}, msg)
			return
		}
		if write && a.readOnly {
			h.pages.render(w, r, http.StatusForbidden, "error.html", &view{Title: "Read-only"}, "This link only lets you look.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		r = r.WithContext(withAccess(r.Context(), a))
		if err := fn(w, r); err != nil {
			h.pages.fail(w, r, err)
		}
	})
}

// login trades a link's token for a cookie and sends the browser to the
// same page without it, so the token leaves the address bar and history.
func (h *Handler) login(w http.ResponseWriter, r *http.Request, tok string) {
	t, err := parseToken(h.cfg.Keys, tok, h.cfg.Now())
	if err != nil {
		h.pages.render(w, r, http.StatusUnauthorized, "error.html", &view{Title: "Sign in"},
			"This link has expired or is not valid: ask for a new one.")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: tok, Path: h.cfg.Prefix + "/", Expires: t.Expires,
		HttpOnly: true, Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
		SameSite: http.SameSiteLaxMode,
	})
	// Back to the same page, but only to a clean path of the portal's:
	// a decoded path such as "/endpoints/..%2F..%2F%5Cevil.com" would
	// otherwise send the browser off the site.
	target := h.cfg.Prefix + "/"
	if p := r.URL.Path; p == path.Clean(p) && !strings.ContainsAny(p, "\\%") && strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") {
		target = h.cfg.Prefix + p
		q := r.URL.Query()
		q.Del("token")
		if len(q) > 0 {
			target += "?" + q.Encode()
		}
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// view is what every page shows.
type view struct {
	Title    string
	Name     string
	LogoURL  string
	Style    string
	Tenant   string
	ReadOnly bool
	Done     string
	Error    string
	Path     string
	Data     any
}

func (p *pages) view(r *http.Request, title string, data any) *view {
	v := &view{Title: title, Data: data, Path: r.URL.Path, Done: doneMessages[r.URL.Query().Get("done")]}
	if a, ok := r.Context().Value(accessKey{}).(*access); ok {
		v.Tenant, v.ReadOnly = a.tenant, a.readOnly
	}
	return v
}

func (p *pages) render(w http.ResponseWriter, r *http.Request, status int, name string, v *view, errMsg string) {
	v.Name, v.LogoURL, v.Style = p.h.cfg.Name, p.h.cfg.LogoURL, p.h.cfg.StylesheetURL
	if errMsg != "" {
		v.Error = errMsg
	}
	var buf bytes.Buffer
	if err := p.tmpl[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		p.h.cfg.Logger.ErrorContext(r.Context(), "wharf portal: render", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// fail renders an error as the API would answer it.
func (p *pages) fail(w http.ResponseWriter, r *http.Request, err error) {
	rec := &statusRecorder{header: http.Header{}}
	p.h.writeError(rec, r, err)
	var body struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(rec.body.Bytes(), &body)
	p.render(w, r, rec.status, "error.html", p.view(r, http.StatusText(rec.status), nil), body.Error)
}

type statusRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (s *statusRecorder) Header() http.Header         { return s.header }
func (s *statusRecorder) Write(b []byte) (int, error) { return s.body.Write(b) }
func (s *statusRecorder) WriteHeader(status int)      { s.status = status }

func (p *pages) redirect(w http.ResponseWriter, r *http.Request, path, done string) {
	http.Redirect(w, r, p.h.cfg.Prefix+path+"?done="+url.QueryEscape(done), http.StatusSeeOther)
}

type endpointsView struct {
	Endpoints []*outbox.Endpoint
	Form      endpointForm
}

type endpointForm struct {
	URL, Description, EventTypes, DataFilter string
}

func (p *pages) endpoints(w http.ResponseWriter, r *http.Request) error {
	return p.endpointsWith(w, r, http.StatusOK, endpointForm{}, "")
}

func (p *pages) endpointsWith(w http.ResponseWriter, r *http.Request, status int, form endpointForm, errMsg string) error {
	tenant := accessOf(r.Context()).tenant
	list, err := p.h.cfg.Outbox.EndpointList(r.Context(), &outbox.EndpointListParams{Tenant: &tenant, Limit: maxPageLimit})
	if err != nil {
		return err
	}
	p.render(w, r, status, "endpoints.html", p.view(r, "Endpoints", &endpointsView{Endpoints: list, Form: form}), errMsg)
	return nil
}

func (p *pages) create(w http.ResponseWriter, r *http.Request) error {
	form := endpointForm{URL: r.PostFormValue("url"), Description: r.PostFormValue("description"),
		EventTypes: r.PostFormValue("event_types"), DataFilter: r.PostFormValue("data_filter")}
	var created *outbox.EndpointWithSecret
	err := p.h.inTx(r.Context(), func(tx pgx.Tx) error {
		var err error
		created, err = p.h.cfg.Outbox.EndpointCreateTx(r.Context(), tx, &outbox.EndpointParams{
			URL: form.URL, Description: form.Description, EventTypes: splitTypes(form.EventTypes),
			DataFilter: json.RawMessage(form.DataFilter), Tenant: accessOf(r.Context()).tenant,
		})
		return err
	})
	if errors.Is(err, outbox.ErrInvalidEndpoint) {
		return p.endpointsWith(w, r, http.StatusUnprocessableEntity, form, err.Error())
	}
	if err != nil {
		return err
	}
	return p.endpointWith(w, r, http.StatusCreated, created.Endpoint, created.Secret, "The endpoint is created. Here is its signing secret.")
}

// splitTypes reads a filter typed as a list separated by commas or white
// space.
func splitTypes(s string) []string {
	var out []string
	for _, f := range bytes.FieldsFunc([]byte(s), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' }) {
		out = append(out, string(f))
	}
	return out
}

type endpointView struct {
	Endpoint   *outbox.Endpoint
	Secret     string
	Deliveries []*outbox.Delivery
	EventTypes []outbox.EventType
}

func (p *pages) endpoint(w http.ResponseWriter, r *http.Request) error {
	ep, err := p.h.endpoint(r.Context(), nil, r.PathValue("id"))
	if err != nil {
		return err
	}
	return p.endpointWith(w, r, http.StatusOK, ep, "", "")
}

func (p *pages) endpointWith(w http.ResponseWriter, r *http.Request, status int, ep *outbox.Endpoint, secret, done string) error {
	deliveries, err := p.h.cfg.Outbox.DeliveryList(r.Context(), &outbox.DeliveryListParams{EndpointID: &ep.ID, Limit: defaultPageLimit})
	if err != nil {
		return err
	}
	v := p.view(r, ep.URL, &endpointView{Endpoint: ep, Secret: secret, Deliveries: deliveries, EventTypes: p.h.cfg.Outbox.EventTypes()})
	if done != "" {
		v.Done = done
	}
	p.render(w, r, status, "endpoint.html", v, "")
	return nil
}

func (p *pages) update(w http.ResponseWriter, r *http.Request) error {
	var ep *outbox.Endpoint
	err := p.h.inTx(r.Context(), func(tx pgx.Tx) error {
		var err error
		if ep, err = p.h.endpoint(r.Context(), tx, r.PathValue("id")); err != nil {
			return err
		}
		url, description := r.PostFormValue("url"), r.PostFormValue("description")
		types := splitTypes(r.PostFormValue("event_types"))
		if types == nil {
			types = []string{}
		}
		// An empty field removes the content filter.
		filter := json.RawMessage(r.PostFormValue("data_filter"))
		ep, err = p.h.cfg.Outbox.EndpointUpdateTx(r.Context(), tx, ep.ID, &outbox.EndpointUpdateParams{
			URL: &url, Description: &description, EventTypes: types, DataFilter: filter,
		})
		return err
	})
	if err != nil {
		return err
	}
	p.redirect(w, r, "/endpoints/"+ep.ID.String(), "updated")
	return nil
}

func (p *pages) secret(w http.ResponseWriter, r *http.Request) error {
	ep, err := p.h.endpoint(r.Context(), nil, r.PathValue("id"))
	if err != nil {
		return err
	}
	secret, err := p.h.cfg.Outbox.EndpointSecret(r.Context(), ep.ID)
	if err != nil {
		return err
	}
	return p.endpointWith(w, r, http.StatusOK, ep, secret, "")
}

func (p *pages) rotate(w http.ResponseWriter, r *http.Request) error {
	var rotated *outbox.EndpointWithSecret
	err := p.h.inTx(r.Context(), func(tx pgx.Tx) error {
		ep, err := p.h.endpoint(r.Context(), tx, r.PathValue("id"))
		if err != nil {
			return err
		}
		rotated, err = p.h.cfg.Outbox.EndpointRotateSecretTx(r.Context(), tx, ep.ID, nil)
		return err
	})
	if err != nil {
		return err
	}
	return p.endpointWith(w, r, http.StatusOK, rotated.Endpoint, rotated.Secret,
		"The secret is rotated. The previous one keeps signing too for a while, so your receiver can switch.")
}

func (p *pages) test(w http.ResponseWriter, r *http.Request) error {
	if _, err := p.h.test(r.Context(), r.PathValue("id"), r.PostFormValue("event_type")); err != nil {
		return err
	}
	p.redirect(w, r, "/endpoints/"+r.PathValue("id"), "test")
	return nil
}

func (p *pages) disable(w http.ResponseWriter, r *http.Request) error {
	return p.setEnabled(w, r, false)
}

func (p *pages) enable(w http.ResponseWriter, r *http.Request) error {
	return p.setEnabled(w, r, true)
}

func (p *pages) setEnabled(w http.ResponseWriter, r *http.Request, enabled bool) error {
	err := p.h.inTx(r.Context(), func(tx pgx.Tx) error {
		ep, err := p.h.endpoint(r.Context(), tx, r.PathValue("id"))
		if err != nil {
			return err
		}
		if enabled {
			_, err = p.h.cfg.Outbox.EndpointEnableTx(r.Context(), tx, ep.ID)
		} else {
			_, err = p.h.cfg.Outbox.EndpointDisableTx(r.Context(), tx, ep.ID, "disabled by the tenant")
		}
		return err
	})
	if err != nil {
		return err
	}
	done := "disabled"
	if enabled {
		done = "enabled"
	}
	p.redirect(w, r, "/endpoints/"+r.PathValue("id"), done)
	return nil
}

func (p *pages) remove(w http.ResponseWriter, r *http.Request) error {
	err := p.h.inTx(r.Context(), func(tx pgx.Tx) error {
		ep, err := p.h.endpoint(r.Context(), tx, r.PathValue("id"))
		if err != nil {
			return err
		}
		return p.h.cfg.Outbox.EndpointDeleteTx(r.Context(), tx, ep.ID)
	})
	if err != nil {
		return err
	}
	p.redirect(w, r, "/", "deleted")
	return nil
}

type deliveryView struct {
	Delivery *outbox.Delivery
	Endpoint *outbox.Endpoint
	Attempts []*outbox.Attempt
}

func (p *pages) delivery(w http.ResponseWriter, r *http.Request) error {
	d, err := p.h.delivery(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	ep, err := p.h.cfg.Outbox.EndpointGet(r.Context(), d.EndpointID)
	if err != nil {
		return err
	}
	attempts, err := p.h.cfg.Outbox.AttemptList(r.Context(), d.ID)
	if err != nil {
		return err
	}
	p.render(w, r, http.StatusOK, "delivery.html", p.view(r, d.EventType+" "+d.EventID, &deliveryView{Delivery: d, Endpoint: ep, Attempts: attempts}), "")
	return nil
}

func (p *pages) replay(w http.ResponseWriter, r *http.Request) error {
	d, err := p.h.replay(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	p.redirect(w, r, "/deliveries/"+d.ID.String(), "replayed")
	return nil
}

func (p *pages) eventTypes(w http.ResponseWriter, r *http.Request) error {
	p.render(w, r, http.StatusOK, "event-types.html", p.view(r, "Event types", p.h.cfg.Outbox.EventTypes()), "")
	return nil
}
