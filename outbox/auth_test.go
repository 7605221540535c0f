package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/internal/testclock"
	"github.com/wharfhq/wharf/outbox"
)

// Credentials the tests look for wherever they must not be.
const (
	bearerSecret = "bearer-s3cret-0001"
	basicSecret  = "basic-pa55word-0002"
	clientSecret = "client-s3cret-0003"
)

// tokenServer is an OAuth 2.0 token endpoint on loopback that issues
// "token-1", "token-2"… and counts its fetches.
type tokenServer struct {
	server    *httptest.Server
	fetches   atomic.Int64
	failNext  atomic.Int64 // fetches still to answer 401
	expiresIn int

	mu     sync.Mutex
	forms  []map[string][]string
	client []string // "id:secret" of each fetch
}

func newTokenServer(t *testing.T, expiresIn int) *tokenServer {
	t.Helper()
	ts := &tokenServer{expiresIn: expiresIn}
	ts.server = httptest.NewServer(http.HandlerFunc(ts.serve))
	t.Cleanup(ts.server.Close)
	return ts
}

func (ts *tokenServer) serve(w http.ResponseWriter, r *http.Request) {
	n := ts.fetches.Add(1)
	_ = r.ParseForm()
	id, secret, _ := r.BasicAuth()
	ts.mu.Lock()
	ts.forms = append(ts.forms, r.PostForm)
	ts.client = append(ts.client, id+":"+secret)
	ts.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if ts.failNext.Load() > 0 {
		ts.failNext.Add(-1)
		w.WriteHeader(http.StatusUnauthorized)
		// A careless server echoing the credential: it must not reach an
		// attempt's error.
		_, _ = fmt.Fprintf(w, `{"error":"invalid_client","error_description":"secret %s is wrong"}`, secret)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{
		"access_token": fmt.Sprintf("token-%d", n), "token_type": "bearer", "expires_in": ts.expiresIn,
	})
}

func (ts *tokenServer) URL() string { return ts.server.URL + "/oauth/token" }

func (ts *tokenServer) clients() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.client...)
}

// capturingConfig is testConfig logging everything, down to debug, into
// the returned buffer.
func capturingConfig() (*outbox.Config, *telemetrytest.Logs) {
	cfg := testConfig()
	logs := &telemetrytest.Logs{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return cfg, logs
}

// requireNoSecrets fails when any credential appears in what an operator
// can see of b: endpoint reads, deliveries, attempts, and logs.
func requireNoSecrets(t *testing.T, b *testBundle, logs *telemetrytest.Logs) {
	t.Helper()
	ctx := context.Background()
	var seen strings.Builder
	endpoints, err := b.outbox.EndpointList(ctx, nil)
	require.NoError(t, err)
	for _, ep := range endpoints {
		js, err := json.Marshal(ep)
		require.NoError(t, err)
		fmt.Fprintf(&seen, "%+v %#v %s\n", ep, ep.Auth, js)
	}
	deliveries, err := b.outbox.DeliveryList(ctx, nil)
	require.NoError(t, err)
	for _, d := range deliveries {
		fmt.Fprintf(&seen, "%s\n", d.LastError)
		attempts, err := b.outbox.AttemptList(ctx, d.ID)
		require.NoError(t, err)
		for _, a := range attempts {
			fmt.Fprintf(&seen, "%s\n", a.Error)
		}
	}
	if logs != nil {
		seen.WriteString(logs.String())
	}
	for _, secret := range []string{bearerSecret, basicSecret, clientSecret, "token-1", "token-2"} {
		require.NotContains(t, seen.String(), secret)
	}
}

func TestEndpointAuth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("BearerAndBasicArriveAndAreNeverShown", func(t *testing.T) {
		t.Parallel()
		cfg, logs := capturingConfig()
		b := setup(t, cfg)
		bearerSink, basicSink := newSink(t, failFirst(1)), okSink(t)
		bearer := b.endpoint(t, bearerSink.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{BearerToken: bearerSecret}})
		basic := b.endpoint(t, basicSink.URL(), &outbox.EndpointParams{
			Auth: &outbox.EndpointAuth{Basic: &outbox.BasicAuth{Username: "wharf", Password: basicSecret}},
		})
		require.Equal(t, &outbox.EndpointAuthInfo{Kind: outbox.AuthBearer}, bearer.Auth)
		require.Equal(t, &outbox.EndpointAuthInfo{Kind: outbox.AuthBasic, Username: "wharf"}, basic.Auth)
		got, err := b.outbox.EndpointGet(ctx, basic.ID)
		require.NoError(t, err)
		require.Equal(t, basic.Endpoint, got)

		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "a", Data: 1})
		b.awaitDelivery(t, bearer.ID, res[0].EventID, outbox.StatusSucceeded)
		b.awaitDelivery(t, basic.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Len(t, bearerSink.all(), 2, "a failure, then a success")
		for _, r := range bearerSink.all() {
			require.Equal(t, "Bearer "+bearerSecret, r.Header.Get("Authorization"), "on every attempt")
		}
		r := &http.Request{Header: basicSink.all()[0].Header}
		user, pass, ok := r.BasicAuth()
		require.True(t, ok)
		require.Equal(t, "wharf", user)
		require.Equal(t, basicSecret, pass)
		requireNoSecrets(t, b, logs)
	})

	t.Run("UpdateReplacesAndRemoves", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		s := okSink(t)
		ep := b.endpoint(t, s.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{BearerToken: bearerSecret}})
		startRiver(t, b.pool, b.outbox)
		deliver := func() http.Header {
			t.Helper()
			res := b.publish(t, &outbox.Event{Type: "a"})
			b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
			all := s.all()
			return all[len(all)-1].Header
		}
		require.Equal(t, "Bearer "+bearerSecret, deliver().Get("Authorization"))

		updated, err := b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{
			Auth: &outbox.EndpointAuth{Basic: &outbox.BasicAuth{Username: "u", Password: basicSecret}},
		})
		require.NoError(t, err)
		require.Equal(t, outbox.AuthBasic, updated.Auth.Kind)
		require.True(t, strings.HasPrefix(deliver().Get("Authorization"), "Basic "))

		kept, err := b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{Description: ptr("d")})
		require.NoError(t, err)
		require.Equal(t, outbox.AuthBasic, kept.Auth.Kind, "nil Auth leaves it")

		removed, err := b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{Auth: &outbox.EndpointAuth{}})
		require.NoError(t, err)
		require.Nil(t, removed.Auth)
		require.Empty(t, deliver().Get("Authorization"))
	})

	t.Run("OAuth2TokenIsCachedAndRefreshedBeforeExpiry", func(t *testing.T) {
		t.Parallel()
		cfg, logs := capturingConfig()
		clock := testclock.New(time.Now())
		cfg.Now = clock.Now
		b := setup(t, cfg)
		ts := newTokenServer(t, 3600)
		s := okSink(t)
		ep := b.endpoint(t, s.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{OAuth2: &outbox.OAuth2ClientCredentials{
			TokenURL: ts.URL(), ClientID: "wharf-client", ClientSecret: clientSecret, Scopes: []string{"webhooks:write", "x", "x"},
		}}})
		require.Equal(t, &outbox.EndpointAuthInfo{
			Kind: outbox.AuthOAuth2ClientCredentials, TokenURL: ts.URL(), ClientID: "wharf-client", Scopes: []string{"webhooks:write", "x"},
		}, ep.Auth)
		startRiver(t, b.pool, b.outbox)

		// Concurrent deliveries wait for one fetch.
		var events []*outbox.Event
		for i := range 8 {
			events = append(events, &outbox.Event{Type: "a", Data: i})
		}
		for _, res := range b.publish(t, events...) {
			b.awaitDelivery(t, ep.ID, res.EventID, outbox.StatusSucceeded)
		}
		res := b.publish(t, &outbox.Event{Type: "a", Data: "later"})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, int64(1), ts.fetches.Load(), "one token for nine deliveries")
		for _, r := range s.all() {
			require.Equal(t, "Bearer token-1", r.Header.Get("Authorization"))
		}
		ts.mu.Lock()
		form := ts.forms[0]
		ts.mu.Unlock()
		require.Equal(t, "client_credentials", form["grant_type"][0])
		require.Equal(t, "webhooks:write x", form["scope"][0])
		require.Equal(t, []string{"wharf-client:" + clientSecret}, ts.clients(), "client credentials in basic auth")

		// 50 minutes on, the token (an hour's) is still used; a minute
		// before its expiry it is replaced.
		clock.Advance(50 * time.Minute)
		res = b.publish(t, &outbox.Event{Type: "a", Data: "50m"})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, int64(1), ts.fetches.Load())
		clock.Advance(9*time.Minute + 30*time.Second)
		res = b.publish(t, &outbox.Event{Type: "a", Data: "59m30s"})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, int64(2), ts.fetches.Load(), "refreshed within a minute of expiry")
		all := s.all()
		require.Equal(t, "Bearer token-2", all[len(all)-1].Header.Get("Authorization"))
		requireNoSecrets(t, b, logs)
	})

	t.Run("OAuth2FetchFailureIsARetriedAttempt", func(t *testing.T) {
		t.Parallel()
		cfg, logs := capturingConfig()
		b := setup(t, cfg)
		ts := newTokenServer(t, 3600)
		ts.failNext.Store(2)
		s := okSink(t)
		ep := b.endpoint(t, s.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{OAuth2: &outbox.OAuth2ClientCredentials{
			TokenURL: ts.URL() + "?tenant=t", ClientID: "wharf-client", ClientSecret: clientSecret,
		}}})
		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "a"})
		d := b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, 3, d.Attempts)
		require.Equal(t, int64(3), ts.fetches.Load(), "no token was cached from a failed fetch")
		require.Len(t, s.all(), 1, "nothing was sent without a token")
		attempts, err := b.outbox.AttemptList(ctx, d.ID)
		require.NoError(t, err)
		for _, a := range attempts[:2] {
			require.Equal(t, "outbox: OAuth2 token fetch failed: the token endpoint answered 401 with error invalid_client", a.Error)
			require.Nil(t, a.StatusCode)
		}
		require.True(t, attempts[2].Succeeded)
		require.NotContains(t, logs.String(), "tenant=t", "the token URL is not logged")
		require.Contains(t, logs.String(), "OAuth2 token fetch failed", "the failure is logged")
		requireNoSecrets(t, b, logs)
	})

	t.Run("OAuth2TokenServerDownFailsTheAttempt", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.RetrySchedule = []time.Duration{0, 10 * time.Millisecond}
		b := setup(t, cfg)
		ts := newTokenServer(t, 3600)
		ts.server.Close()
		ep := b.endpoint(t, okSink(t).URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{OAuth2: &outbox.OAuth2ClientCredentials{
			TokenURL: ts.URL(), ClientID: "c", ClientSecret: clientSecret,
		}}})
		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "a"})
		d := b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
		require.Equal(t, 2, d.Attempts, "retried like any failure")
		require.Contains(t, d.LastError, "outbox: OAuth2 token fetch failed: dial tcp")
		require.Contains(t, d.LastError, "connection refused")
		requireNoSecrets(t, b, nil)
	})

	t.Run("EndpointRefusingTheTokenGetsAFreshOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		ts := newTokenServer(t, 3600)
		s := newSink(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		ep := b.endpoint(t, s.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{OAuth2: &outbox.OAuth2ClientCredentials{
			TokenURL: ts.URL(), ClientID: "c", ClientSecret: clientSecret,
		}}})
		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "a"})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		all := s.all()
		require.Len(t, all, 2)
		require.Equal(t, "Bearer token-1", all[0].Header.Get("Authorization"))
		require.Equal(t, "Bearer token-2", all[1].Header.Get("Authorization"))
	})

	t.Run("ChangedCredentialsFetchANewToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		ts := newTokenServer(t, 3600)
		s := okSink(t)
		creds := &outbox.OAuth2ClientCredentials{TokenURL: ts.URL(), ClientID: "c", ClientSecret: clientSecret, CredentialsInBody: true}
		ep := b.endpoint(t, s.URL(), &outbox.EndpointParams{Auth: &outbox.EndpointAuth{OAuth2: creds}})
		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "a"})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		ts.mu.Lock()
		require.Equal(t, clientSecret, ts.forms[0]["client_secret"][0], "CredentialsInBody sends them as form parameters")
		ts.mu.Unlock()

		rotated := *creds
		rotated.ClientSecret = "rotated-secret"
		_, err := b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{Auth: &outbox.EndpointAuth{OAuth2: &rotated}})
		require.NoError(t, err)
		res = b.publish(t, &outbox.Event{Type: "a"})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Equal(t, int64(2), ts.fetches.Load())
		ts.mu.Lock()
		require.Equal(t, "rotated-secret", ts.forms[1]["client_secret"][0])
		ts.mu.Unlock()
	})

	t.Run("BadAuthIsRefusedAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.AllowPrivateNetworks = false
		b := setup(t, cfg)
		existing := b.endpoint(t, "https://example.com/existing", &outbox.EndpointParams{Auth: &outbox.EndpointAuth{BearerToken: bearerSecret}})
		good := func() *outbox.OAuth2ClientCredentials {
			return &outbox.OAuth2ClientCredentials{TokenURL: "https://auth.example.com/token", ClientID: "c", ClientSecret: clientSecret}
		}
		with := func(change func(c *outbox.OAuth2ClientCredentials)) *outbox.EndpointAuth {
			c := good()
			change(c)
			return &outbox.EndpointAuth{OAuth2: c}
		}
		cases := map[string]struct {
			auth *outbox.EndpointAuth
			want string
		}{
			"two kinds":           {&outbox.EndpointAuth{BearerToken: bearerSecret, Basic: &outbox.BasicAuth{Username: "u"}}, "set one of"},
			"bearer with space":   {&outbox.EndpointAuth{BearerToken: bearerSecret + " x"}, "visible ASCII"},
			"bearer with CRLF":    {&outbox.EndpointAuth{BearerToken: bearerSecret + "\r\nX-Evil: 1"}, "visible ASCII"},
			"bearer too long":     {&outbox.EndpointAuth{BearerToken: strings.Repeat("a", 4097)}, "longer than 4096"},
			"basic no username":   {&outbox.EndpointAuth{Basic: &outbox.BasicAuth{Password: basicSecret}}, "basic username must be"},
			"basic colon":         {&outbox.EndpointAuth{Basic: &outbox.BasicAuth{Username: "a:b", Password: basicSecret}}, "colon"},
			"basic NUL password":  {&outbox.EndpointAuth{Basic: &outbox.BasicAuth{Username: "u", Password: basicSecret + "\x00"}}, "basic password holds a control character"},
			"oauth2 no token URL": {with(func(c *outbox.OAuth2ClientCredentials) { c.TokenURL = "" }), "OAuth2 token URL must be"},
			"oauth2 ftp":          {with(func(c *outbox.OAuth2ClientCredentials) { c.TokenURL = "ftp://auth.example.com/" }), "OAuth2 token URL scheme"},
			"oauth2 loopback":     {with(func(c *outbox.OAuth2ClientCredentials) { c.TokenURL = "http://127.0.0.1:9/token" }), "OAuth2 token URL: outbox: refused to connect to 127.0.0.1 (loopback)"},
			"oauth2 metadata":     {with(func(c *outbox.OAuth2ClientCredentials) { c.TokenURL = "http://169.254.169.254/token" }), "cloud metadata"},
			"oauth2 no client":    {with(func(c *outbox.OAuth2ClientCredentials) { c.ClientID = "" }), "OAuth2 client id must be"},
			"oauth2 no secret":    {with(func(c *outbox.OAuth2ClientCredentials) { c.ClientSecret = "" }), "OAuth2 client secret must be"},
			"oauth2 bad secret":   {with(func(c *outbox.OAuth2ClientCredentials) { c.ClientSecret = clientSecret + "\n" }), "OAuth2 client secret holds"},
			"oauth2 scope space":  {with(func(c *outbox.OAuth2ClientCredentials) { c.Scopes = []string{"a b"} }), "OAuth2 scope 0"},
			"oauth2 empty scope":  {with(func(c *outbox.OAuth2ClientCredentials) { c.Scopes = []string{"a", ""} }), "OAuth2 scope 1"},
			"oauth2 many scopes":  {with(func(c *outbox.OAuth2ClientCredentials) { c.Scopes = make([]string, 51) }), "more than 50"},
		}
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		for name, c := range cases {
			_, err := b.outbox.EndpointCreateTx(ctx, tx, &outbox.EndpointParams{URL: "https://example.com/new", Auth: c.auth})
			require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, name)
			require.ErrorContains(t, err, c.want, name)
			for _, secret := range []string{bearerSecret, basicSecret, clientSecret} {
				require.NotContains(t, err.Error(), secret, name)
			}
			_, err = b.outbox.EndpointUpdateTx(ctx, tx, existing.ID, &outbox.EndpointUpdateParams{Auth: c.auth})
			require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, name)
			_, err = b.outbox.EndpointEnsureTx(ctx, tx, &outbox.EndpointParams{URL: existing.URL, Auth: c.auth})
			require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, name)
		}
		_, err = b.outbox.EndpointCreateTx(ctx, tx, &outbox.EndpointParams{URL: "https://example.com/new", Auth: cases["oauth2 loopback"].auth})
		require.ErrorIs(t, err, outbox.ErrBlockedAddress)
		var n int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_endpoints").Scan(&n), "the transaction is still usable")
		require.Equal(t, 1, n, "nothing was created")
		got, err := b.outbox.EndpointGetTx(ctx, tx, existing.ID)
		require.NoError(t, err)
		require.Equal(t, existing.Endpoint, got, "nothing was changed")
	})

	t.Run("EnsureUpdatesChangedCredentials", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		params := func(token string) *outbox.EndpointParams {
			p := &outbox.EndpointParams{URL: "https://example.com/h"}
			if token != "" {
				p.Auth = &outbox.EndpointAuth{BearerToken: token}
			}
			return p
		}
		first, err := b.outbox.EndpointEnsure(ctx, params(bearerSecret))
		require.NoError(t, err)
		require.True(t, first.Created)
		same, err := b.outbox.EndpointEnsure(ctx, params(bearerSecret))
		require.NoError(t, err)
		require.False(t, same.Updated)
		rotated, err := b.outbox.EndpointEnsure(ctx, params("rotated-token"))
		require.NoError(t, err)
		require.True(t, rotated.Updated, "a new token is a change, although reads cannot show it")
		removed, err := b.outbox.EndpointEnsure(ctx, params(""))
		require.NoError(t, err)
		require.True(t, removed.Updated)
		require.Nil(t, removed.Auth)
	})

	t.Run("PrintingCredentialsShowsNoSecret", func(t *testing.T) {
		t.Parallel()
		auths := []any{
			outbox.EndpointAuth{BearerToken: bearerSecret},
			&outbox.EndpointAuth{Basic: &outbox.BasicAuth{Username: "u", Password: basicSecret}},
			outbox.BasicAuth{Username: "u", Password: basicSecret},
			outbox.OAuth2ClientCredentials{ClientSecret: clientSecret},
			&outbox.OAuth2ClientCredentials{ClientSecret: clientSecret},
		}
		var logged bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logged, nil))
		for _, a := range auths {
			printed := fmt.Sprintf("%v %+v %#v %s", a, a, a, a)
			log.Info("auth", "auth", a)
			for _, secret := range []string{bearerSecret, basicSecret, clientSecret} {
				require.NotContains(t, printed, secret)
			}
		}
		for _, secret := range []string{bearerSecret, basicSecret, clientSecret} {
			require.NotContains(t, logged.String(), secret)
		}
	})
}

// The token URL is judged by the SSRF guard at every fetch, as endpoint
// URLs are: one registered before the guard tightened is refused without
// a connection, and the delivery is dead at once.
func TestOAuth2TokenURLIsGuarded(t *testing.T) {
	t.Parallel()
	hook := &dialHook{}
	cfg := testConfig()
	cfg.AllowPrivateNetworks = false
	cfg.Dialer = &net.Dialer{Control: hook.control}
	b := setup(t, cfg)
	ts := newTokenServer(t, 3600)

	open, err := outbox.New(b.pool, &outbox.Config{
		AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")},
		Logger:          quietLogger(),
	})
	require.NoError(t, err)
	ep, err := open.EndpointCreate(context.Background(), &outbox.EndpointParams{
		URL:  "https://hooks.example.com/in", // never dialed: the token fetch fails first
		Auth: &outbox.EndpointAuth{OAuth2: &outbox.OAuth2ClientCredentials{TokenURL: ts.URL(), ClientID: "c", ClientSecret: clientSecret}},
	})
	require.NoError(t, err)

	startRiver(t, b.pool, b.outbox)
	res := b.publish(t, &outbox.Event{Type: "a"})
	d := b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
	require.Equal(t, 1, d.Attempts, "a refusal is not retried")
	require.Contains(t, d.LastError, "OAuth2 token fetch failed")
	require.Contains(t, d.LastError, "refused to connect to 127.0.0.1 (loopback)")
	require.Zero(t, ts.fetches.Load())
	require.Empty(t, hook.addresses(), "nothing got past the guard")
}
