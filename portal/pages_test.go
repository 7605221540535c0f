package portal_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/portal"
)

func TestPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar}

	// A bad link is refused and sets nothing.
	resp, err := client.Get(f.server.URL + "/portal/?token=wpt_nope.nope")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	base, _ := url.Parse(f.server.URL + "/portal/")
	require.Empty(t, jar.Cookies(base))

	link, err := portal.NewLink(testKey, f.server.URL+"/portal/", portal.Token{Tenant: "acme", Expires: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	resp, err = client.Get(link)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "/portal/", resp.Request.URL.Path)
	require.Empty(t, resp.Request.URL.RawQuery, "redirected without the token")
	cookies := jar.Cookies(base)
	require.Len(t, cookies, 1)

	// The cookie works for pages, not for the API (no cross-site writes
	// through it).
	resp, err = client.Get(f.server.URL + "/portal/api/v1/endpoints")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	form := url.Values{"url": {"https://example.com/hooks"}, "description": {"from a page"}}
	resp, err = client.PostForm(f.server.URL+"/portal/endpoints", form)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// A form posted from another site is refused, and changes nothing.
	req, err := http.NewRequest("POST", f.server.URL+"/portal/endpoints", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	list := f.call(t, token(t, "acme", false), "GET", "/endpoints", nil).json(t)["data"].([]any)
	require.Len(t, list, 1)

	// A read-only link may look but not act.
	roJar, err := cookiejar.New(nil)
	require.NoError(t, err)
	ro := &http.Client{Jar: roJar}
	roLink, err := portal.NewLink(testKey, f.server.URL+"/portal/", portal.Token{Tenant: "acme", Expires: time.Now().Add(time.Minute), ReadOnly: true})
	require.NoError(t, err)
	resp, err = ro.Get(roLink)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = ro.PostForm(f.server.URL+"/portal/endpoints", form)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}

func TestPageSecurityHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	h, err := portal.New(&portal.Config{Outbox: f.outbox, Pool: f.pool, Keys: [][]byte{testKey},
		StylesheetURL: "https://cdn.example.com/brand.css", LogoURL: "/static/logo.png", TrustedOrigins: []string{"https://app.example.com"}})
	require.NoError(t, err)
	link, err := portal.NewLink(testKey, "http://portal.test/", portal.Token{Tenant: "acme", Expires: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	u, err := url.Parse(link)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", u.RequestURI(), nil))
	require.Equal(t, http.StatusSeeOther, rec.Code)
	cookie := rec.Result().Cookies()[0]
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteLaxMode, cookie.SameSite)

	req := httptest.NewRequest("GET", "/", nil)
	req.AddCookie(cookie)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	csp := rec.Header().Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "style-src 'self' https://cdn.example.com;")
	require.Contains(t, csp, "frame-ancestors 'self' https://app.example.com")
	require.NotContains(t, csp, "script-src")
	require.Contains(t, rec.Body.String(), `href="https://cdn.example.com/brand.css"`)

	for _, bad := range []string{"javascript:alert(1)", "https://x.example/a.css; script-src *", "ftp://x/y.css"} {
		_, err := portal.New(&portal.Config{Outbox: f.outbox, Pool: f.pool, Keys: [][]byte{testKey}, StylesheetURL: bad})
		require.ErrorIs(t, err, portal.ErrInvalidConfig, bad)
	}
}

// A link's redirect stays on the portal whatever path it names (found by
// review: "..%2F..%2F%5Cevil.com" redirected to "/\evil.com").
func TestLinkRedirectStaysOnThePortal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tok := token(t, "acme", false)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]string{
		"/portal/endpoints/..%2F..%2F..%2F%5Cevil.com": "/portal/",
		"/portal/deliveries/..%2F..%2F%5Cevil.com":     "/portal/",
		"/portal/event-types":                          "/portal/event-types",
		"/portal/":                                     "/portal/",
	} {
		resp, err := noFollow.Get(f.server.URL + path + "?token=" + url.QueryEscape(tok))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, path)
		require.Equal(t, want, resp.Header.Get("Location"), path)
	}
}
