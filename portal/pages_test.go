package portal_test

import (
	"net/http"
	"net/http/cookiejar"
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
