package signature_test

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

const genericSecret = "generic-provider-secret"

func TestNewHMACConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  signature.HMACConfig
		want string
	}{
		{"NoHeader", signature.HMACConfig{}, "SignatureHeader is required"},
		{"UnknownAlgorithm", signature.HMACConfig{SignatureHeader: "X-Sig", Algorithm: "md5"}, `unknown hash algorithm "md5"`},
		{"UnknownEncoding", signature.HMACConfig{SignatureHeader: "X-Sig", Encoding: "base32"}, `unknown encoding "base32"`},
		{"NoBody", signature.HMACConfig{SignatureHeader: "X-Sig", Template: "{url}"}, "must sign {body}"},
		{"UnknownPlaceholder", signature.HMACConfig{SignatureHeader: "X-Sig", Template: "{payload}"}, "unknown placeholder {payload}"},
		{"EmptyHeaderPlaceholder", signature.HMACConfig{SignatureHeader: "X-Sig", Template: "{header:}{body}"}, "unknown placeholder {header:}"},
		{"Unclosed", signature.HMACConfig{SignatureHeader: "X-Sig", Template: "{body}.{timestamp"}, "unclosed placeholder at byte 7"},
		{"TimestampWithoutHeader", signature.HMACConfig{SignatureHeader: "X-Sig", Template: "{timestamp}.{body}"}, "TimestampHeader is empty"},
		{"HeaderWithoutTimestamp", signature.HMACConfig{SignatureHeader: "X-Sig", TimestampHeader: "X-Ts"}, "does not sign {timestamp}"},
		{"AltSignatureHeaderRepeatsMain", signature.HMACConfig{SignatureHeader: "X-Sig", AltSignatureHeaders: []string{"x-sig"}}, "AltSignatureHeaders must be distinct"},
		{"AltSignatureHeaderEmpty", signature.HMACConfig{SignatureHeader: "X-Sig", AltSignatureHeaders: []string{""}}, "AltSignatureHeaders must be distinct"},
		{"AltSignatureHeadersRepeat", signature.HMACConfig{SignatureHeader: "X-Sig", AltSignatureHeaders: []string{"Sig", "SIG"}}, "AltSignatureHeaders must be distinct"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := signature.NewHMAC(signature.Secrets{genericSecret}, tt.cfg, nil)
			require.Nil(t, v)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestHMACDefaults(t *testing.T) {
	t.Parallel()
	body := `{"id":"x"}`
	v, err := signature.NewHMAC(signature.Secrets{genericSecret}, signature.HMACConfig{SignatureHeader: "X-Signature"}, nil)
	require.NoError(t, err)
	h := http.Header{}
	h.Set("X-Signature", hex.EncodeToString(macOf(sha256.New, genericSecret, body)))
	require.NoError(t, v.Verify(context.Background(), &signature.Request{Header: h, Body: []byte(body)}))
	require.Equal(t, signature.EventLocation{}, v.EventLocation())
}

func TestHMACTimestampedSHA512Base64(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := signature.HMACConfig{
		SignatureHeader: "X-Acme-Signature",
		Prefix:          "v2=",
		Algorithm:       signature.SHA512,
		Encoding:        signature.Base64,
		TimestampHeader: "X-Acme-Timestamp",
		Template:        "{timestamp}.{body}",
		Events:          signature.EventLocation{IDHeader: "X-Acme-Delivery", TypeField: "kind"},
	}
	const ts = int64(1700000000)
	body := `{"kind":"thing.done"}`
	request := func(ts, sig, body string) *signature.Request {
		h := http.Header{}
		h.Set("X-Acme-Timestamp", ts)
		h.Set("X-Acme-Signature", sig)
		return &signature.Request{Header: h, Body: []byte(body)}
	}
	good := "v2=" + base64.StdEncoding.EncodeToString(macOf(sha512.New, genericSecret, "1700000000."+body))

	v, err := signature.NewHMAC(signature.Secrets{genericSecret}, cfg, at(ts))
	require.NoError(t, err)
	require.NoError(t, v.Verify(ctx, request("1700000000", good, body)))
	want := cfg.Events
	want.SignedHeaders = []string{"X-Acme-Timestamp"}
	require.Equal(t, want, v.EventLocation())

	stale, err := signature.NewHMAC(signature.Secrets{genericSecret}, cfg, at(ts+301))
	require.NoError(t, err)
	requireRejected(t, stale.Verify(ctx, request("1700000000", good, body)), signature.ErrStaleTimestamp, genericSecret)
	future, err := signature.NewHMAC(signature.Secrets{genericSecret}, cfg, at(ts-301))
	require.NoError(t, err)
	requireRejected(t, future.Verify(ctx, request("1700000000", good, body)), signature.ErrStaleTimestamp, genericSecret)
	requireRejected(t, v.Verify(ctx, request("1700000001", good, body)), signature.ErrNoMatch, genericSecret)
	requireRejected(t, v.Verify(ctx, request("1700000000", good, body+" ")), signature.ErrNoMatch, genericSecret)
	requireRejected(t, v.Verify(ctx, request("", good, body)), signature.ErrMissingHeader, genericSecret)
	requireRejected(t, v.Verify(ctx, request("noon", good, body)), signature.ErrMalformedHeader, genericSecret)
	requireRejected(t, v.Verify(ctx, request("1700000000", good[3:], body)), signature.ErrMalformedHeader, genericSecret)
}

func TestHMACSHA1WithPrefix(t *testing.T) {
	t.Parallel()
	// GitHub's legacy X-Hub-Signature, configured by hand.
	v, err := signature.NewHMAC(signature.Secrets{githubSecret}, signature.HMACConfig{
		SignatureHeader: "X-Hub-Signature", Prefix: "sha1=", Algorithm: signature.SHA1,
	}, nil)
	require.NoError(t, err)
	h := http.Header{}
	h.Set("X-Hub-Signature", "sha1="+hex.EncodeToString(macOf(sha1.New, githubSecret, githubBody)))
	require.NoError(t, v.Verify(context.Background(), &signature.Request{Header: h, Body: []byte(githubBody)}))
}

func TestHMACURLMethodAndHeaderTemplate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Square signs the notification URL followed by the body.
	square, err := signature.NewHMAC(signature.Secrets{genericSecret}, signature.HMACConfig{
		SignatureHeader: "X-Square-Hmacsha256-Signature",
		Encoding:        signature.Base64,
		Template:        "{url}{body}",
		Events:          signature.EventLocation{IDField: "event_id", TypeField: "type"},
	}, &signature.Options{PublicBaseURL: "https://shop.example.com"})
	require.NoError(t, err)
	body := `{"event_id":"6a8f5f28","type":"payment.created"}`
	h := http.Header{}
	h.Set("X-Square-Hmacsha256-Signature", base64.StdEncoding.EncodeToString(macOf(sha256.New, genericSecret, "https://shop.example.com/hooks/square"+body)))
	req := &signature.Request{Method: http.MethodPost, URL: "/hooks/square", Header: h, Body: []byte(body)}
	require.NoError(t, square.Verify(ctx, req))
	requireRejected(t, square.Verify(ctx, &signature.Request{URL: "/hooks/other", Header: h, Body: []byte(body)}), signature.ErrNoMatch, genericSecret)

	// Method and another header in the signed content.
	v, err := signature.NewHMAC(signature.Secrets{genericSecret}, signature.HMACConfig{
		SignatureHeader: "X-Sig",
		Template:        "{method} {url}\n{header:X-Request-Id}\n{body}",
	}, nil)
	require.NoError(t, err)
	h = http.Header{}
	h.Set("X-Request-Id", "req-7")
	h.Set("X-Sig", hex.EncodeToString(macOf(sha256.New, genericSecret, "POST https://api.example.com/in?x=1\nreq-7\n"+body)))
	req = &signature.Request{Method: http.MethodPost, URL: "https://api.example.com/in?x=1", Header: h, Body: []byte(body)}
	require.NoError(t, v.Verify(ctx, req))
	req.Method = http.MethodPut
	requireRejected(t, v.Verify(ctx, req), signature.ErrNoMatch, genericSecret)
	req.Method = http.MethodPost
	req.Header.Del("X-Request-Id")
	requireRejected(t, v.Verify(ctx, req), signature.ErrMissingHeader, genericSecret)
}

func FuzzHMACTemplate(f *testing.F) {
	f.Add("{timestamp}.{body}", "X-Ts")
	f.Add("{body", "")
	f.Add("}{body}{", "")
	f.Add("{header:X-A}{url}{method}{body}", "")
	f.Add("{{body}}", "")
	f.Fuzz(func(t *testing.T, template, tsHeader string) {
		v, err := signature.NewHMAC(signature.Secrets{genericSecret}, signature.HMACConfig{
			SignatureHeader: "X-Sig", TimestampHeader: tsHeader, Template: template,
		}, nil)
		if err != nil {
			return
		}
		// Whatever compiled verifies requests without panicking.
		h := http.Header{}
		h.Set("X-Sig", "00")
		h.Set(tsHeader, strconv.FormatInt(time.Now().Unix(), 10))
		err = v.Verify(context.Background(), &signature.Request{URL: "https://example.com/", Header: h, Body: []byte("x")})
		requireRequestError(t, err)
	})
}

// TestHMACAltSignatureHeaders: a provider renaming its signature header is
// verified under either name, the template's content unchanged, and the
// verifier does not share the caller's slices.
func TestHMACAltSignatureHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	body := `{"id":"x"}`
	sig := "v2=" + hex.EncodeToString(macOf(sha256.New, genericSecret, body))
	alts := []string{"Acme-Signature"}
	more := []string{"Acme-Event-Id"}
	v, err := signature.NewHMAC(signature.Secrets{genericSecret}, signature.HMACConfig{
		SignatureHeader:     "X-Acme-Signature",
		AltSignatureHeaders: alts,
		Prefix:              "v2=",
		Events:              signature.EventLocation{IDHeader: "X-Acme-Event-Id", MoreIDHeaders: more},
	}, nil)
	require.NoError(t, err)
	alts[0], more[0] = "X-Forged", "X-Forged"

	for _, name := range []string{"X-Acme-Signature", "Acme-Signature"} {
		require.NoError(t, v.Verify(ctx, newRequest(body, name, sig)), name)
		requireRejected(t, v.Verify(ctx, newRequest(body+" ", name, sig)), signature.ErrNoMatch, genericSecret)
	}
	requireRejected(t, v.Verify(ctx, newRequest(body, "X-Forged", sig)), signature.ErrMissingHeader, genericSecret)
	err = v.Verify(ctx, newRequest(body, "Acme-Signature", "sha256="+sig[len("v2="):]))
	requireRejected(t, err, signature.ErrMalformedHeader, genericSecret)
	require.ErrorContains(t, err, `Acme-Signature: does not start with "v2="`)
	require.Equal(t, []string{"X-Acme-Event-Id", "Acme-Event-Id"}, v.EventLocation().IDHeaders())
}

// TestEventLocationHeaderOrder: IDHeaders and TypeHeaders list each name
// once, in the order tried, and never alias the location's own slices.
func TestEventLocationHeaderOrder(t *testing.T) {
	t.Parallel()
	loc := signature.EventLocation{
		IDHeader:        "X-Event-Id",
		AltIDHeader:     "",
		MoreIDHeaders:   []string{"event-id", "X-Delivery", "", "x-delivery"},
		MoreTypeHeaders: []string{"Topic", "topic"},
	}
	ids := loc.IDHeaders()
	require.Equal(t, []string{"X-Event-Id", "event-id", "X-Delivery"}, ids)
	ids[1] = "changed"
	require.Equal(t, "event-id", loc.MoreIDHeaders[0])
	require.Equal(t, []string{"Topic"}, loc.TypeHeaders())
	require.Empty(t, signature.EventLocation{}.IDHeaders())
	require.Empty(t, signature.EventLocation{}.TypeHeaders())
}
