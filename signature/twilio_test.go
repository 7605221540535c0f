package signature_test

import (
	"context"
	"crypto/sha1" // Twilio signs with HMAC-SHA1.
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/signature"
)

// Twilio's fixed vectors, from the official Go library's request validator
// tests (github.com/twilio/twilio-go, client/request_validator_test.go).
const (
	twilioToken     = "12345"
	twilioURL       = "https://mycompany.com/myapp.php?foo=1&bar=2"
	twilioSignature = "RSOYDt4T1cUTdK1PDd93/VVr8B8=" // twilioURL, no port, with twilioParams
	twilioJSONBody  = `{"property": "value", "boolean": true}`
	twilioBodyHash  = "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620"
)

var twilioParams = url.Values{
	"Digits":  {"1234"},
	"CallSid": {"CA1234567890ABCDE"},
	"To":      {"+18005551212"},
	"Caller":  {"+14158675309"},
	"From":    {"+14158675309"},
}

func twilioForm(rawURL, sig, form string) *signature.Request {
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	if sig != "" {
		h.Set(signature.HeaderTwilioSignature, sig)
	}
	h.Set(signature.HeaderTwilioIdempotencyToken, "0f5ad8a2-b7e6-4f4b-9b62-6c7f0e0f4e3a")
	return &signature.Request{Method: http.MethodPost, URL: rawURL, Header: h, Body: []byte(form)}
}

func twilioJSON(rawURL, sig, body string) *signature.Request {
	r := twilioForm(rawURL, sig, body)
	r.Header.Set("Content-Type", "application/json")
	return r
}

func TestTwilioLibraryVectors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	form := twilioParams.Encode()
	v := signature.NewTwilio(signature.Secrets{twilioToken}, nil)

	tests := []struct {
		name string
		req  *signature.Request
	}{
		{"Form", twilioForm(twilioURL, twilioSignature, form)},
		// Twilio includes the port inconsistently: each form of the URL is
		// tried with the port and without.
		{"HTTPSPortInURLSignedWithout", twilioForm(strings.Replace(twilioURL, ".com", ".com:1234", 1), twilioSignature, form)},
		{"HTTPSSignedWithDefaultPort", twilioForm(twilioURL, "kvajT1Ptam85bY51eRf/AJRuM3w=", form)},
		{"HTTPSignedWithoutPort", twilioForm(strings.Replace(twilioURL, "https", "http", 1), "0ZXoZLH/DfblKGATFgpif+LLRf4=", form)},
		{"HTTPSignedWithPort", twilioForm(strings.Replace(strings.Replace(twilioURL, ".com", ".com:1234", 1), "https", "http", 1), "Zmvh+3yNM1Phv2jhDCwEM3q5ebU=", form)},
		{"JSONBody", twilioJSON(twilioURL+"&bodySHA256="+twilioBodyHash, "a9nBmqA0ju/hNViExpshrM61xv4=", twilioJSONBody)},
		{"JSONBodyNoOtherParams", twilioJSON("https://mycompany.com/myapp.php?bodySHA256="+twilioBodyHash, "y77kIzt2vzLz71DgmJGsen2scGs=", twilioJSONBody)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, v.Verify(ctx, tt.req))
		})
	}

	sum := sha256.Sum256([]byte(twilioJSONBody))
	require.Equal(t, twilioBodyHash, hex.EncodeToString(sum[:]), "the vector's bodySHA256 is the body's hash")

	require.Equal(t, signature.EventLocation{IDHeader: signature.HeaderTwilioIdempotencyToken}, v.EventLocation())
}

func TestTwilioPublicBaseURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	form := twilioParams.Encode()

	// Behind a proxy the server sees another host, or only the path.
	for _, seen := range []string{"/myapp.php?foo=1&bar=2", "http://10.0.0.7:8080/myapp.php?foo=1&bar=2"} {
		v := signature.NewTwilio(signature.Secrets{twilioToken}, &signature.Options{PublicBaseURL: "https://mycompany.com/"})
		require.NoError(t, v.Verify(ctx, twilioForm(seen, twilioSignature, form)), seen)
	}
	// A proxy that strips a path prefix: the prefix goes in the base URL.
	v := signature.NewTwilio(signature.Secrets{twilioToken}, &signature.Options{PublicBaseURL: "https://mycompany.com"})
	require.NoError(t, v.Verify(ctx, twilioForm("/myapp.php?foo=1&bar=2", twilioSignature, form)))
	prefixed := signature.NewTwilio(signature.Secrets{twilioToken}, &signature.Options{PublicBaseURL: "https://mycompany.com/api"})
	requireRejected(t, prefixed.Verify(ctx, twilioForm("/myapp.php?foo=1&bar=2", twilioSignature, form)), signature.ErrNoMatch, twilioToken)

	// Without it a relative URL cannot be verified, and the error says why.
	err := signature.NewTwilio(signature.Secrets{twilioToken}, nil).Verify(ctx, twilioForm("/myapp.php?foo=1&bar=2", twilioSignature, form))
	requireRejected(t, err, signature.ErrNoMatch, twilioToken)
	require.ErrorContains(t, err, "PublicBaseURL")
}

func TestTwilioRejects(t *testing.T) {
	t.Parallel()
	const other = "54321"
	form := twilioParams.Encode()
	tampered := url.Values{}
	for k, v := range twilioParams {
		tampered[k] = v
	}
	tampered.Set("Digits", "9999")
	extra := url.Values{"Extra": {"1"}}
	for k, v := range twilioParams {
		extra[k] = v
	}
	jsonURL := twilioURL + "&bodySHA256=" + twilioBodyHash

	tests := []struct {
		name    string
		secrets signature.Secrets
		req     *signature.Request
		want    error
	}{
		{"TamperedParam", signature.Secrets{twilioToken}, twilioForm(twilioURL, twilioSignature, tampered.Encode()), signature.ErrNoMatch},
		{"AddedParam", signature.Secrets{twilioToken}, twilioForm(twilioURL, twilioSignature, extra.Encode()), signature.ErrNoMatch},
		{"TamperedURL", signature.Secrets{twilioToken}, twilioForm(strings.Replace(twilioURL, "foo=1", "foo=2", 1), twilioSignature, form), signature.ErrNoMatch},
		{"OtherHost", signature.Secrets{twilioToken}, twilioForm(strings.Replace(twilioURL, "mycompany", "evil", 1), twilioSignature, form), signature.ErrNoMatch},
		{"WrongToken", signature.Secrets{other}, twilioForm(twilioURL, twilioSignature, form), signature.ErrNoMatch},
		{"FormNotSigned", signature.Secrets{twilioToken}, twilioJSON(twilioURL, twilioSignature, form), signature.ErrNoMatch},
		{"TamperedJSONBody", signature.Secrets{twilioToken}, twilioJSON(jsonURL, "a9nBmqA0ju/hNViExpshrM61xv4=", `{"property": "other", "boolean": true}`), signature.ErrNoMatch},
		{"MissingHeader", signature.Secrets{twilioToken}, twilioForm(twilioURL, "", form), signature.ErrMissingHeader},
		{"NotBase64", signature.Secrets{twilioToken}, twilioForm(twilioURL, "RSOY!!", form), signature.ErrMalformedHeader},
		{"FormUnparseable", signature.Secrets{twilioToken}, twilioForm(twilioURL, twilioSignature, "Digits=%zz"), signature.ErrMalformedHeader},
		{"NoSecrets", nil, twilioForm(twilioURL, twilioSignature, form), signature.ErrNoSecrets},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := signature.NewTwilio(tt.secrets, nil).Verify(context.Background(), tt.req)
			requireRejected(t, err, tt.want, twilioToken, other)
		})
	}
}

func TestTwilioRotation(t *testing.T) {
	t.Parallel()
	// Twilio accounts have a primary and a secondary auth token.
	v := signature.NewTwilio(signature.Secrets{"secondary-token", twilioToken}, nil)
	require.NoError(t, v.Verify(context.Background(), twilioForm(twilioURL, twilioSignature, twilioParams.Encode())))
}

func FuzzTwilioVerify(f *testing.F) {
	form := twilioParams.Encode()
	f.Add(twilioURL, twilioSignature, form, "application/x-www-form-urlencoded")
	f.Add(twilioURL+"&bodySHA256="+twilioBodyHash, "a9nBmqA0ju/hNViExpshrM61xv4=", twilioJSONBody, "application/json")
	f.Add("https://[::1]:443/x?bodySHA256=", "", "a=%", "application/x-www-form-urlencoded; charset=utf-8")
	f.Add("http://u:p@host:/", "====", "a=1&a=1&b", "text/plain")
	f.Add("/relative?x=http://a", "AAAA", "", "")
	v := signature.NewTwilio(signature.Secrets{twilioToken}, nil)
	f.Fuzz(func(t *testing.T, rawURL, sig, body, contentType string) {
		req := twilioForm(rawURL, sig, body)
		req.Header.Set("Content-Type", contentType)
		// Only the library's signed URLs (host mycompany.com) can verify.
		genuine := strings.Contains(rawURL, "mycompany.com")
		requireOnlyGenuine(t, v.Verify(context.Background(), req), genuine, rawURL, sig, body, contentType)
	})
}

// TestTwilioURLOnlySignatureCoversNoBody checks that a signature over the URL
// alone (a request whose body is neither a form nor covered by bodySHA256)
// verifies only with an empty body: otherwise an attacker who captured one
// such request could send the same URL and signature with any JSON body.
func TestTwilioURLOnlySignatureCoversNoBody(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const statusURL = "https://mycompany.com/status?CallSid=CA1234567890ABCDE"
	urlOnly := base64.StdEncoding.EncodeToString(macOf(sha1.New, twilioToken, statusURL))
	v := signature.NewTwilio(signature.Secrets{twilioToken}, nil)

	// Genuine: no body (Twilio's GET callbacks, or an empty POST).
	require.NoError(t, v.Verify(ctx, twilioJSON(statusURL, urlOnly, "")))
	empty := twilioForm(statusURL, urlOnly, "")
	empty.Header.Del("Content-Type")
	require.NoError(t, v.Verify(ctx, empty))

	// Forged: the captured URL and signature with a body of the attacker's.
	for _, contentType := range []string{"application/json", "text/plain", ""} {
		forged := twilioJSON(statusURL, urlOnly, `{"CallStatus":"completed","amount":1000000}`)
		forged.Header.Set("Content-Type", contentType)
		err := v.Verify(ctx, forged)
		requireRejected(t, err, signature.ErrNoMatch, twilioToken)
		require.ErrorContains(t, err, "no signature covers it", contentType)
	}
}
