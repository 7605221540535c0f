package signature_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1" // Twilio signs with HMAC-SHA1.
	"crypto/tls"
	"encoding/base64"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// acceptAll is a verifier that accepts every request and keeps the last one.
type acceptAll struct {
	calls int
	last  *signature.Request
}

func (a *acceptAll) Verify(_ context.Context, r *signature.Request) error {
	a.calls++
	a.last = r
	return nil
}

// requireBodyRestored asserts that r.Body reads want from its start.
func requireBodyRestored(t *testing.T, r *http.Request, want []byte) {
	t.Helper()
	got, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, r.Body.Close())
}

// signedStandardRequest returns a POST of body signed as Wharf's outbox
// signs it, with secret, now.
func signedStandardRequest(t *testing.T, secret string, body []byte) *http.Request {
	t.Helper()
	h, err := signature.SignStandardWebhooks([]string{secret}, "evt_1", time.Now(), body)
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodPost, "/hooks/wharf", bytes.NewReader(body))
	maps.Copy(r.Header, h)
	return r
}

func TestVerifyHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	body := []byte(`{"type":"invoice.paid","data":{"id":"in_1"}}`)
	v := signature.NewStandardWebhooks(signature.Secrets{swSecret}, nil)

	r := signedStandardRequest(t, swSecret, body)
	got, err := signature.VerifyHTTP(ctx, v, r, 0)
	require.NoError(t, err)
	require.Equal(t, body, got)
	requireBodyRestored(t, r, body)

	// Signed for another body: the verifier's error, no body, and r.Body
	// still reads what was sent.
	r = signedStandardRequest(t, swSecret, body)
	forged := []byte(`{"type":"invoice.paid","data":{"id":"in_2"}}`)
	r.Body = io.NopCloser(bytes.NewReader(forged))
	got, err = signature.VerifyHTTP(ctx, v, r, 0)
	require.Nil(t, got)
	requireRejected(t, err, signature.ErrNoMatch, swSecret)
	requireBodyRestored(t, r, forged)

	r = signedStandardRequest(t, swSecret, body)
	r.Header.Del(signature.HeaderWebhookSignature)
	_, err = signature.VerifyHTTP(ctx, v, r, 0)
	requireRejected(t, err, signature.ErrMissingHeader, swSecret)
}

// errReader fails after giving its bytes, as a body cut short by a client
// that went away.
type errReader struct {
	data []byte
	err  error
}

func (e *errReader) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestVerifyHTTPBodyLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A body whose bytes an error must never repeat.
	body := []byte(strings.Repeat("card=4242424242424242&", 10))
	n := int64(len(body))

	t.Run("ContentLengthOverLimitIsNotRead", func(t *testing.T) {
		t.Parallel()
		src := &countingReader{r: bytes.NewReader(body)}
		r := httptest.NewRequest(http.MethodPost, "/hooks", io.NopCloser(src))
		r.ContentLength = n
		v := &acceptAll{}
		_, err := signature.VerifyHTTP(ctx, v, r, n-1)
		require.ErrorIs(t, err, signature.ErrBodyTooLarge)
		require.EqualError(t, err, "signature: body too large: longer than 219 bytes")
		require.Zero(t, src.n, "read a body its Content-Length refused")
		require.Zero(t, v.calls)
		requireBodyRestored(t, r, body)
	})
	t.Run("ChunkedOverLimit", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodPost, "/hooks", io.NopCloser(bytes.NewReader(body)))
		r.ContentLength = -1
		v := &acceptAll{}
		got, err := signature.VerifyHTTP(ctx, v, r, n-1)
		require.ErrorIs(t, err, signature.ErrBodyTooLarge)
		require.Nil(t, got)
		require.NotContains(t, err.Error(), "card=")
		require.Zero(t, v.calls)
		// Put back whole: what was read, then the rest.
		requireBodyRestored(t, r, body)
	})
	t.Run("AtLimit", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodPost, "/hooks", io.NopCloser(bytes.NewReader(body)))
		r.ContentLength = -1
		v := &acceptAll{}
		got, err := signature.VerifyHTTP(ctx, v, r, n)
		require.NoError(t, err)
		require.Equal(t, body, got)
		require.Equal(t, body, v.last.Body)
		requireBodyRestored(t, r, body)
	})
	t.Run("NoLimitOverflow", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(body))
		got, err := signature.VerifyHTTP(ctx, &acceptAll{}, r, math.MaxInt64)
		require.NoError(t, err)
		require.Equal(t, body, got)
	})
	t.Run("DefaultLimit", func(t *testing.T) {
		t.Parallel()
		big := bytes.Repeat([]byte{'a'}, signature.DefaultMaxBodyBytes+1)
		r := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(big[1:]))
		got, err := signature.VerifyHTTP(ctx, &acceptAll{}, r, 0)
		require.NoError(t, err)
		require.Len(t, got, signature.DefaultMaxBodyBytes)
		r = httptest.NewRequest(http.MethodPost, "/hooks", io.NopCloser(bytes.NewReader(big)))
		_, err = signature.VerifyHTTP(ctx, &acceptAll{}, r, 0)
		require.ErrorIs(t, err, signature.ErrBodyTooLarge)
		require.ErrorContains(t, err, "longer than 1048576 bytes")
	})
	t.Run("OuterMaxBytesReader", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodPost, "/hooks", nil)
		r.Body = http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(body)), 10)
		_, err := signature.VerifyHTTP(ctx, &acceptAll{}, r, n)
		require.ErrorIs(t, err, signature.ErrBodyTooLarge)
		require.ErrorContains(t, err, "longer than 10 bytes")
	})
	t.Run("Unreadable", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodPost, "/hooks", nil)
		r.Body = io.NopCloser(&errReader{data: body[:20], err: io.ErrUnexpectedEOF})
		v := &acceptAll{}
		_, err := signature.VerifyHTTP(ctx, v, r, n)
		require.ErrorIs(t, err, signature.ErrUnreadableBody)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		require.NotErrorIs(t, err, signature.ErrBodyTooLarge)
		require.NotContains(t, err.Error(), "card=")
		require.Zero(t, v.calls)
	})
	t.Run("NilBody", func(t *testing.T) {
		t.Parallel()
		r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/"}, Header: http.Header{}}
		v := &acceptAll{}
		got, err := signature.VerifyHTTP(ctx, v, r, 0)
		require.NoError(t, err)
		require.Empty(t, got)
		require.Equal(t, 1, v.calls)
	})
}

// TestVerifyHTTPConfigErrors: a missing verifier or a negative limit is the
// receiving side's mistake, matched like a missing secret (503), and
// nothing is read.
func TestVerifyHTTPConfigErrors(t *testing.T) {
	t.Parallel()
	for name, call := range map[string]func(*http.Request) error{
		"NilVerifier": func(r *http.Request) error {
			_, err := signature.VerifyHTTP(context.Background(), nil, r, 0)
			return err
		},
		"NegativeLimit": func(r *http.Request) error {
			_, err := signature.VerifyHTTP(context.Background(), &acceptAll{}, r, -1)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src := &countingReader{r: strings.NewReader("{}")}
			r := httptest.NewRequest(http.MethodPost, "/hooks", io.NopCloser(src))
			err := call(r)
			require.ErrorIs(t, err, signature.ErrInvalidOptions)
			require.NotErrorIs(t, err, signature.ErrNoSecrets)
			require.True(t, signature.ReceiverFault(err))
			require.Zero(t, src.n)
		})
	}
}

func TestVerifyHTTPURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		request func() *http.Request
		want    string
	}{
		{"Plain", func() *http.Request { return httptest.NewRequest(http.MethodPost, "/hooks/a?x=1&y=%7e", nil) },
			"http://example.com/hooks/a?x=1&y=%7e"},
		{"TLS", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/hooks", nil)
			r.TLS = &tls.ConnectionState{}
			return r
		}, "https://example.com/hooks"},
		{"ForwardedHTTPS", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/hooks", nil)
			r.Header.Set("X-Forwarded-Proto", "HTTPS")
			return r
		}, "https://example.com/hooks"},
		{"ForwardedOther", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/hooks", nil)
			r.Header.Set("X-Forwarded-Proto", "wss")
			return r
		}, "http://example.com/hooks"},
		{"HostWithPort", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/hooks", nil)
			r.Host = "hooks.example.com:8443"
			return r
		}, "http://hooks.example.com:8443/hooks"},
		// The target as received, byte for byte, not re-encoded.
		{"EncodedPath", func() *http.Request { return httptest.NewRequest(http.MethodPost, "/a%2Fb/%41?q=a+b", nil) },
			"http://example.com/a%2Fb/%41?q=a+b"},
		{"AbsoluteTarget", func() *http.Request {
			return httptest.NewRequest(http.MethodPost, "https://other.example/hooks?x=1", nil)
		},
			"https://other.example/hooks?x=1"},
		{"NoHost", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/hooks?x=1", nil)
			r.Host = ""
			return r
		}, "/hooks?x=1"},
		{"BuiltInCode", func() *http.Request {
			return &http.Request{Method: http.MethodPost, Host: "example.com", URL: &url.URL{Path: "/a b", RawQuery: "x=1"}, Header: http.Header{}}
		}, "http://example.com/a%20b?x=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := &acceptAll{}
			_, err := signature.VerifyHTTP(context.Background(), v, tt.request(), 0)
			require.NoError(t, err)
			require.Equal(t, tt.want, v.last.URL)
			require.Equal(t, http.MethodPost, v.last.Method)
		})
	}

	// Behind http.StripPrefix the sender still signed the full path.
	v := &acceptAll{}
	handler := http.StripPrefix("/api", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := signature.VerifyHTTP(r.Context(), v, r, 0)
		require.NoError(t, err)
	}))
	handler.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/api/hooks?x=1", nil))
	require.Equal(t, "http://example.com/api/hooks?x=1", v.last.URL)
}

// twilioSign computes a Twilio form signature with the standard library:
// base64 HMAC-SHA1 of the URL then each parameter's name and value, sorted.
func twilioSign(token, rawURL string, form url.Values) string {
	mac := hmac.New(sha1.New, []byte(token))
	mac.Write([]byte(rawURL))
	for _, name := range slices.Sorted(maps.Keys(form)) {
		mac.Write([]byte(name + form.Get(name)))
	}
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// TestVerifyHTTPSignedURL: over a real connection, a scheme that signs the
// URL verifies against the one the client requested, or, with
// PublicBaseURL, against the public one whatever host the server saw.
func TestVerifyHTTPSignedURL(t *testing.T) {
	t.Parallel()
	form := url.Values{"From": {"+14158675309"}, "Body": {"hello"}}
	var verifier atomic.Pointer[signature.Twilio]
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := signature.VerifyHTTP(r.Context(), verifier.Load(), r, 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		// The handler reads the form from the restored body.
		if err := r.ParseForm(); err != nil || r.PostForm.Get("Body") != "hello" {
			http.Error(w, "form lost", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	post := func(sig string) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/sms?x=1", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(signature.HeaderTwilioSignature, sig)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}

	verifier.Store(signature.NewTwilio(signature.Secrets{twilioToken}, nil))
	require.Equal(t, http.StatusNoContent, post(twilioSign(twilioToken, srv.URL+"/sms?x=1", form)))
	require.Equal(t, http.StatusUnauthorized, post(twilioSign(twilioToken, srv.URL+"/sms?x=2", form)))
	require.Equal(t, http.StatusUnauthorized, post(twilioSign(twilioToken, strings.Replace(srv.URL, "https", "http", 1)+"/sms?x=1", form)))

	public := "https://hooks.example.com/sms?x=1"
	require.Equal(t, http.StatusUnauthorized, post(twilioSign(twilioToken, public, form)))
	verifier.Store(signature.NewTwilio(signature.Secrets{twilioToken}, &signature.Options{PublicBaseURL: "https://hooks.example.com"}))
	require.Equal(t, http.StatusNoContent, post(twilioSign(twilioToken, public, form)))
	require.Equal(t, http.StatusUnauthorized, post(twilioSign(twilioToken, srv.URL+"/sms?x=1", form)))
}

// FuzzVerifyHTTP: for any body, limit and request line, VerifyHTTP accepts
// exactly the bodies within the limit, hands the verifier what was sent,
// and always leaves r.Body reading the whole body again.
func FuzzVerifyHTTP(f *testing.F) {
	f.Add([]byte(`{"a":1}`), int64(7), false, "example.com", "/hooks?x=1", "https")
	f.Add([]byte(`{"a":1}`), int64(6), true, "", "*", "")
	f.Add([]byte{}, int64(0), true, "h:1", "http://x/y", "http")
	f.Add([]byte("abc"), int64(-3), false, "[::1]:80", "/%zz", "HTTPS")
	f.Fuzz(func(t *testing.T, body []byte, limit int64, chunked bool, host, target, proto string) {
		limit %= 64
		r := &http.Request{
			Method:        http.MethodPost,
			Host:          host,
			RequestURI:    target,
			Header:        http.Header{"X-Forwarded-Proto": {proto}},
			Body:          io.NopCloser(bytes.NewReader(body)),
			ContentLength: int64(len(body)),
		}
		if chunked {
			r.ContentLength = -1
		}
		if r.URL, _ = url.ParseRequestURI(target); r.URL == nil {
			r.URL = &url.URL{Path: "/"}
		}
		v := &acceptAll{}
		got, err := signature.VerifyHTTP(context.Background(), v, r, limit)
		requireBodyRestored(t, r, body)
		switch {
		case limit < 0:
			require.ErrorIs(t, err, signature.ErrInvalidOptions)
			return
		case limit > 0 && int64(len(body)) > limit:
			require.ErrorIs(t, err, signature.ErrBodyTooLarge)
			require.Zero(t, v.calls)
			return
		}
		require.NoError(t, err)
		require.Equal(t, string(body), string(got))
		require.Equal(t, string(body), string(v.last.Body))
		if !r.URL.IsAbs() && host != "" && strings.HasPrefix(target, "/") {
			require.True(t, strings.HasSuffix(v.last.URL, "://"+host+target), "URL %q for host %q target %q", v.last.URL, host, target)
		}
	})
}
