package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// dialHook is a Dialer Control function that runs only for addresses the
// SSRF guard accepted. It records them and refuses every address outside
// loopback, so a test never sends a packet off this machine, whatever the
// guard does.
type dialHook struct {
	mu   sync.Mutex
	seen []string
}

var errHookRefused = errors.New("test dial hook: not connecting off this machine")

func (h *dialHook) control(_, address string, _ syscall.RawConn) error {
	h.mu.Lock()
	h.seen = append(h.seen, address)
	h.mu.Unlock()
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		return errHookRefused
	}
	return nil
}

func (h *dialHook) addresses() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

// ssrfTargets returns endpoint URLs to refuse or allow, and the sinks
// listening behind the loopback ones.
func ssrfTargets(t *testing.T) (map[string]string, []*sink) {
	t.Helper()
	v4 := okSink(t)
	port := v4.server.Listener.Addr().(*net.TCPAddr).Port
	targets := map[string]string{
		"loopback v4":     v4.URL(),
		"hostname":        fmt.Sprintf("http://localhost:%d/hook", port),
		"private":         "http://10.0.0.1:8080/hook",
		"metadata":        "http://169.254.169.254/latest/meta-data/",
		"mapped metadata": "http://[::ffff:169.254.169.254]/latest/meta-data/",
	}
	sinks := []*sink{v4}
	if ln, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		v6 := &sink{respond: status(http.StatusNoContent), arrived: make(chan received, 10)}
		v6.server = httptest.NewUnstartedServer(http.HandlerFunc(v6.serve))
		v6.server.Listener = ln
		v6.server.Config.ConnState = func(net.Conn, http.ConnState) { v6.conns.Add(1) }
		v6.server.Start()
		t.Cleanup(v6.server.Close)
		targets["loopback v6"] = v6.URL()
		sinks = append(sinks, v6)
	} else {
		t.Logf("no IPv6 loopback here (%v): [::1] is checked by the guard's unit test only", err)
	}
	return targets, sinks
}

func TestSSRF(t *testing.T) {
	t.Parallel()

	t.Run("RefusedWithoutConnecting", func(t *testing.T) {
		t.Parallel()
		hook := &dialHook{}
		cfg := testConfig()
		cfg.AllowPrivateNetworks = false
		bundle, endpoints, sinks, res := ssrfSetup(t, cfg, hook)
		for name, ep := range endpoints {
			d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
			require.Contains(t, d.LastError, "refused to connect", name)
			require.Nil(t, d.LastStatusCode, name)
		}
		require.Contains(t, deliveryError(t, bundle, endpoints["metadata"]), "cloud metadata")
		require.Contains(t, deliveryError(t, bundle, endpoints["mapped metadata"]), "cloud metadata")
		require.Contains(t, deliveryError(t, bundle, endpoints["private"]), "(private)")
		require.Contains(t, deliveryError(t, bundle, endpoints["hostname"]), "(loopback)")
		require.Empty(t, hook.addresses(), "no address got past the guard")
		for _, s := range sinks {
			require.Zero(t, s.conns.Load(), "no connection reached %s", s.URL())
		}
	})

	t.Run("AllowListed", func(t *testing.T) {
		t.Parallel()
		hook := &dialHook{}
		cfg := testConfig()
		cfg.AllowPrivateNetworks = false
		cfg.AllowedNetworks = []netip.Prefix{
			netip.MustParsePrefix("127.0.0.0/8"),
			netip.MustParsePrefix("::1/128"),
			netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("169.254.169.254/32"),
		}
		bundle, endpoints, sinks, res := ssrfSetup(t, cfg, hook)
		for name, ep := range endpoints {
			want := outbox.StatusSucceeded
			if !strings.Contains(name, "loopback") && name != "hostname" {
				want = outbox.StatusDead // the test hook stops them: nothing leaves this machine
			}
			bundle.awaitDelivery(t, ep.ID, res[0].EventID, want)
		}
		require.Contains(t, deliveryError(t, bundle, endpoints["private"]), errHookRefused.Error())
		require.Contains(t, hook.addresses(), "10.0.0.1:8080", "the allow-list let 10.0.0.1 past the guard")
		require.Contains(t, hook.addresses(), "169.254.169.254:80")
		for _, s := range sinks {
			require.NotEmpty(t, s.all(), "%s received", s.URL())
		}
	})

	t.Run("AllowPrivateNetworksKeepsMetadataBlocked", func(t *testing.T) {
		t.Parallel()
		hook := &dialHook{}
		cfg := testConfig()
		cfg.AllowPrivateNetworks = true
		cfg.Dialer = &net.Dialer{Control: hook.control}
		bundle := setup(t, cfg)
		receiver := okSink(t)
		loopback := bundle.endpoint(t, receiver.URL(), nil)
		metadata := []*outbox.EndpointWithSecret{
			registerAnyway(t, bundle, "http://169.254.169.254/latest/meta-data/"),
			registerAnyway(t, bundle, "http://169.254.169.1/"),                       // anywhere in 169.254.169.0/24
			registerAnyway(t, bundle, "http://168.63.129.16/machine?comp=goalstate"), // Azure WireServer
		}
		startRiver(t, bundle.pool, bundle.outbox)

		res := bundle.publish(t, &outbox.Event{Type: "x"})
		bundle.awaitDelivery(t, loopback.ID, res[0].EventID, outbox.StatusSucceeded)
		for _, ep := range metadata {
			d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
			require.Contains(t, d.LastError, "cloud metadata", ep.URL)
		}
		require.Equal(t, []string{receiver.server.Listener.Addr().String()}, hook.addresses(),
			"only the loopback sink got past the guard")
	})
}

// ssrfSetup starts an outbox dialing through hook, with an endpoint per
// ssrfTargets URL, and publishes one event to them.
func ssrfSetup(t *testing.T, cfg *outbox.Config, hook *dialHook) (*testBundle, map[string]*outbox.EndpointWithSecret, []*sink, []*outbox.PublishResult) {
	t.Helper()
	cfg.Dialer = &net.Dialer{Control: hook.control}
	bundle := setup(t, cfg)
	targets, sinks := ssrfTargets(t)
	endpoints := map[string]*outbox.EndpointWithSecret{}
	for name, url := range targets {
		endpoints[name] = registerAnyway(t, bundle, url)
	}
	startRiver(t, bundle.pool, bundle.outbox)
	return bundle, endpoints, sinks, bundle.publish(t, &outbox.Event{Type: "x"})
}

func deliveryError(t *testing.T, b *testBundle, ep *outbox.EndpointWithSecret) string {
	t.Helper()
	list, err := b.outbox.DeliveryList(context.Background(), &outbox.DeliveryListParams{EndpointID: &ep.ID})
	require.NoError(t, err)
	require.Len(t, list, 1)
	return list[0].LastError
}

// registerAnyway registers url through an Outbox whose guard allows every
// address, as if the endpoint were registered before the deployment's
// guard tightened: b's own guard refuses such a literal address at
// registration (TestSSRFRefusedAtRegistration), so only the dial-time
// guard can be tested this way.
func registerAnyway(t *testing.T, b *testBundle, url string) *outbox.EndpointWithSecret {
	t.Helper()
	open, err := outbox.New(b.pool, &outbox.Config{
		AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")},
		Logger:          quietLogger(),
	})
	require.NoError(t, err)
	ep, err := open.EndpointCreate(context.Background(), &outbox.EndpointParams{URL: url})
	require.NoError(t, err)
	return ep
}

// An endpoint whose literal address the guard refuses is refused at
// registration, with the switch that allows it; a hostname is judged when
// a delivery dials it; a refusal at dial time is dead after one attempt.
func TestSSRFRefusedAtRegistration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig()
	cfg.AllowPrivateNetworks = false
	b := setup(t, cfg)
	for url, want := range map[string]string{
		"http://127.0.0.1:8080/hook":                  "set Config.AllowPrivateNetworks",
		"http://localhost:8080/hook":                  "set Config.AllowPrivateNetworks",
		"http://api.localhost/hook":                   "(loopback)",
		"http://[::1]/hook":                           "(loopback)",
		"http://10.1.2.3/hook":                        "(private)",
		"http://169.254.169.254/latest/meta-data/":    "only listing it in Config.AllowedNetworks",
		"http://[::ffff:169.254.169.254]/meta-data/":  "cloud metadata",
		"https://192.168.0.1:8443/hooks?token=secret": "(private)",
	} {
		_, err := b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: url})
		require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, url)
		require.ErrorIs(t, err, outbox.ErrBlockedAddress, url)
		require.ErrorContains(t, err, want, url)
		require.NotContains(t, err.Error(), "token=secret", "the URL is not echoed")
		_, err = b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: url})
		require.ErrorIs(t, err, outbox.ErrBlockedAddress, url)
	}
	list, err := b.outbox.EndpointList(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, list, "nothing was registered")

	public := b.endpoint(t, "https://hooks.example.com/wharf", nil) // a hostname: judged at dial time
	_, err = b.outbox.EndpointUpdate(ctx, public.ID, &outbox.EndpointUpdateParams{URL: ptr("http://127.0.0.2/")})
	require.ErrorIs(t, err, outbox.ErrBlockedAddress)

	// Registered before the guard tightened: refused at dial time, dead
	// after one attempt instead of the whole retry schedule.
	old := registerAnyway(t, b, "http://127.0.0.1:9/hook")
	res := b.publish(t, &outbox.Event{Type: "x"})
	startRiver(t, b.pool, b.outbox)
	d := b.awaitDelivery(t, old.ID, res[0].EventID, outbox.StatusDead)
	require.Equal(t, 1, d.Attempts, "a refusal is not retried")
	require.Contains(t, d.LastError, "refused to connect")
}
