package idempotency

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func FuzzParseKey(f *testing.F) {
	for _, seed := range []string{
		"", "abc", `"abc"`, `"`, `""`, `"a"b"`, `a\b`, "a b", " abc\t", "clé", "\x00", "\x7f",
		"8e03978e-40d5-43e8-bc93-6894a57f9324", strings.Repeat("k", MaxKeyLength+1),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		h := http.Header{}
		h.Set(HeaderKey, value)
		key, err := parseKey(h)
		if err != nil {
			require.Empty(t, key)
			return
		}
		require.NotEmpty(t, key)
		require.LessOrEqual(t, len(key), MaxKeyLength)
		for i := 0; i < len(key); i++ {
			c := key[i]
			require.True(t, c > 0x20 && c < 0x7f && c != '"' && c != '\\', "byte %#x in %q", c, key)
		}
		// A key is its own canonical form, and its quoted form names it too.
		for _, form := range []string{key, `"` + key + `"`} {
			h.Set(HeaderKey, form)
			again, err := parseKey(h)
			require.NoError(t, err)
			require.Equal(t, key, again)
		}
		h.Add(HeaderKey, key)
		_, err = parseKey(h)
		require.ErrorIs(t, err, errKeyMultiple)
	})
}

// FuzzPrepare feeds what a client controls (path, query, body, key) through
// the parsing a keyed request gets before it reaches the database.
func FuzzPrepare(f *testing.F) {
	f.Add("/payouts", "", `{"amount":10}`, "key-1")
	f.Add("/pay%00outs", "a=%ff", "\x00\xff", `"k"`)
	f.Add("/"+strings.Repeat("p", 600), "", "", "k")
	f.Add("", "", strings.Repeat("b", 70), "k")
	f.Fuzz(func(t *testing.T, path, query, body, key string) {
		conf, err := (&Config{MaxRequestBody: 64}).resolve()
		require.NoError(t, err)
		m := &Middleware{conf: conf, routeFromPath: true, principal: func(r *http.Request) string {
			_, _ = io.ReadAll(r.Body) // a careless principal function
			return "acct_1"
		}}
		newRequest := func() *http.Request {
			return &http.Request{
				Method: http.MethodPost,
				URL:    &url.URL{Path: path, RawQuery: query},
				Header: http.Header{HeaderKey: {key}},
				Body:   io.NopCloser(strings.NewReader(body)),
			}
		}
		r := newRequest()
		parsed, err := parseKey(r.Header)
		if err != nil {
			return
		}
		req, status, msg := m.prepare(r, parsed)
		if req == nil {
			// Client input gets a 4xx; 500 is for a misbehaving application.
			require.Contains(t, []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusRequestURITooLong}, status, msg)
			require.True(t, strings.HasPrefix(msg, "idempotency: "), msg)
			require.Equal(t, status == http.StatusRequestEntityTooLarge, len(body) > 64)
			return
		}
		require.NoError(t, checkScope(req.route))
		require.NoError(t, checkScope(req.principal))
		require.Len(t, req.fingerprint, 32)
		handlerBody, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		require.Equal(t, body, string(handlerBody), "the handler must get the body whole")

		again, _, _ := m.prepare(newRequest(), parsed)
		require.NotNil(t, again)
		require.True(t, bytes.Equal(req.fingerprint, again.fingerprint), "fingerprint must be deterministic")
		require.NotEqual(t, req.claimID, again.claimID)
	})
}
