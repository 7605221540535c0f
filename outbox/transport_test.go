package outbox_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// forwardProxy is an HTTP proxy on loopback that forwards nothing: it
// records each request it is asked to forward and answers it itself, as
// the destination would (an OAuth 2.0 token for /oauth/token, 204 for
// anything else). It lets a test send to host names that resolve nowhere.
type forwardProxy struct {
	server *httptest.Server

	mu       sync.Mutex
	requests []*http.Request
}

func newForwardProxy(t *testing.T) *forwardProxy {
	t.Helper()
	p := &forwardProxy{}
	p.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.requests = append(p.requests, r.Clone(context.Background()))
		p.mu.Unlock()
		if r.URL.Path == "/oauth/token" {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "token-1", "token_type": "Bearer", "expires_in": 3600})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(p.server.Close)
	return p
}

func (p *forwardProxy) URL() *url.URL {
	u, _ := url.Parse(p.server.URL)
	return u
}

func (p *forwardProxy) seen() []*http.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*http.Request(nil), p.requests...)
}

// fixedProxy is a Transport.Proxy sending every request to p, as
// http.ProxyFromEnvironment would with HTTP_PROXY set (which it ignores
// for loopback destinations, so a test cannot rely on it).
func fixedProxy(p *forwardProxy) func(*http.Request) (*url.URL, error) {
	return func(*http.Request) (*url.URL, error) { return p.URL(), nil }
}

func TestCallerTransport(t *testing.T) {
	t.Parallel()

	t.Run("KeepsTheSSRFGuardAndIgnoresItsProxy", func(t *testing.T) {
		t.Parallel()
		proxy := newForwardProxy(t)
		hook := &dialHook{}
		cfg := testConfig()
		cfg.AllowPrivateNetworks = false
		cfg.Dialer = &net.Dialer{Control: hook.control}
		template := http.DefaultTransport.(*http.Transport).Clone() // DialContext and Proxy set
		template.Proxy = fixedProxy(proxy)
		cfg.Transport = template
		b := setup(t, cfg)
		s := okSink(t)
		ep := registerAnyway(t, b, s.URL())
		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "a"})
		d := b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
		require.Contains(t, d.LastError, "refused to connect to 127.0.0.1 (loopback)")
		require.Zero(t, s.conns.Load(), "the loopback sink was never reached")
		require.Empty(t, proxy.seen(), "the template's proxy was not used")
		require.Empty(t, hook.addresses())
		require.NotNil(t, template.Proxy, "the caller's template is left as it was")
	})

	t.Run("MutualTLS", func(t *testing.T) {
		t.Parallel()
		proxy := newForwardProxy(t)
		var peers atomic.Value
		s := &sink{arrived: make(chan received, 10), respond: func(_ int, w http.ResponseWriter, r *http.Request) {
			peers.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
			w.WriteHeader(http.StatusNoContent)
		}}
		s.server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
		s.server.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS12}
		s.server.StartTLS()
		t.Cleanup(s.server.Close)

		roots := x509.NewCertPool()
		roots.AddCert(s.server.Certificate())
		cfg := testConfig()
		cfg.Transport = &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCertificate(t)}, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true,
			Proxy:             fixedProxy(proxy),
		}
		b := setup(t, cfg)
		ep := b.endpoint(t, s.URL(), nil)
		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "a"})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, "wharf-test-client", peers.Load(), "the client certificate was presented")
		require.Empty(t, proxy.seen())
		require.NoError(t, s.all()[0].verifyWith(ep.Secret))
	})

	t.Run("DialTLSIsRefused", func(t *testing.T) {
		t.Parallel()
		dial := func(context.Context, string, string) (net.Conn, error) { return nil, nil }
		_, err := outbox.New(setup(t, nil).pool, &outbox.Config{Transport: &http.Transport{DialTLSContext: dial}})
		require.ErrorIs(t, err, outbox.ErrInvalidConfig)
		require.ErrorContains(t, err, "bypass the SSRF guard")
	})
}

func TestWrapTransport(t *testing.T) {
	t.Parallel()
	// wrapper returns a WrapTransport that counts requests and marks them.
	wrapper := func(calls *atomic.Int64) func(http.RoundTripper) http.RoundTripper {
		return func(next http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				calls.Add(1)
				r.Header.Set("X-Wrapped", "yes")
				return next.RoundTrip(r)
			})
		}
	}

	t.Run("WrapsDeliveries", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		cfg := testConfig()
		cfg.WrapTransport = wrapper(&calls)
		b := setup(t, cfg)
		s := okSink(t)
		ep := b.endpoint(t, s.URL(), nil)
		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "a"})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, "yes", s.all()[0].Header.Get("X-Wrapped"))
		require.Equal(t, int64(1), calls.Load())
	})

	t.Run("GuardStillRefuses", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		cfg := testConfig()
		cfg.AllowPrivateNetworks = false
		cfg.WrapTransport = wrapper(&calls)
		b := setup(t, cfg)
		s := okSink(t)
		ep := registerAnyway(t, b, s.URL())
		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "a"})
		d := b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
		require.Contains(t, d.LastError, "refused to connect")
		require.Equal(t, int64(1), calls.Load(), "the wrapper saw the request")
		require.Zero(t, s.conns.Load(), "the guard under it refused the connection")
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Config.Proxy sends deliveries and token requests through the proxy, and
// connects nowhere else; a literal address the guard refuses is still
// refused.
func TestConfigProxy(t *testing.T) {
	t.Parallel()
	proxy := newForwardProxy(t)
	hook := &dialHook{}
	cfg := testConfig()
	cfg.AllowPrivateNetworks = false // the proxy, on loopback, is reached all the same
	cfg.Dialer = &net.Dialer{Control: hook.control}
	cfg.Proxy = proxy.URL()
	b := setup(t, cfg)
	ep := b.endpoint(t, "http://hooks.example.test/in", &outbox.EndpointParams{
		Headers: http.Header{"X-Team": {"payments"}},
		Auth: &outbox.EndpointAuth{OAuth2: &outbox.OAuth2ClientCredentials{
			TokenURL: "http://auth.example.test/oauth/token", ClientID: "c", ClientSecret: clientSecret,
		}},
	})
	s := okSink(t)
	literal := registerAnyway(t, b, s.URL())
	startRiver(t, b.pool, b.outbox)

	res := b.publish(t, &outbox.Event{Type: "a"})
	b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
	d := b.awaitDelivery(t, literal.ID, res[0].EventID, outbox.StatusDead)
	require.Contains(t, d.LastError, "refused to connect to 127.0.0.1 (loopback)")
	require.Zero(t, s.conns.Load())

	seen := proxy.seen()
	require.Len(t, seen, 2, "the token request and the delivery")
	require.Equal(t, "http://auth.example.test/oauth/token", seen[0].URL.String())
	require.Equal(t, "http://hooks.example.test/in", seen[1].URL.String())
	require.Equal(t, "Bearer token-1", seen[1].Header.Get("Authorization"))
	require.Equal(t, "payments", seen[1].Header.Get("X-Team"))
	require.NotEmpty(t, hook.addresses())
	for _, addr := range hook.addresses() {
		require.Equal(t, proxy.server.Listener.Addr().String(), addr, "only the proxy was dialed")
	}

	for name, bad := range map[string]*url.URL{
		"scheme": {Scheme: "ftp", Host: "proxy.example:21"},
		"host":   {Scheme: "http"},
	} {
		_, err := outbox.New(b.pool, &outbox.Config{Proxy: bad})
		require.ErrorIs(t, err, outbox.ErrInvalidConfig, name)
	}
}

// HTTP_PROXY and friends are never used, even by a template whose Proxy
// is http.ProxyFromEnvironment. (It skips loopback destinations anyway;
// TestCallerTransport checks a template proxy that does not.)
func TestEnvironmentProxyIsIgnored(t *testing.T) {
	proxy := newForwardProxy(t)
	for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"} {
		t.Setenv(name, proxy.server.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	for name, transport := range map[string]*http.Transport{
		"default":  nil,
		"template": {Proxy: http.ProxyFromEnvironment},
	} {
		cfg := testConfig()
		cfg.Transport = transport
		b := setup(t, cfg)
		s := okSink(t)
		ep := b.endpoint(t, s.URL(), nil)
		client := startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "a"})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Len(t, s.all(), 1, name)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, client.Stop(ctx))
		cancel()
	}
	require.Empty(t, proxy.seen())
}

// clientCertificate returns a self-signed client certificate.
func clientCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "wharf-test-client"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
