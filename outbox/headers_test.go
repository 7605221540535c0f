package outbox_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

func TestEndpointHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SentWithEveryAttemptAndReturnedByReads", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		s := newSink(t, failFirst(1))
		ep := b.endpoint(t, s.URL(), &outbox.EndpointParams{Headers: http.Header{
			"x-team":        {"payments"},
			"X-Api-Version": {"2026-11-01"},
			"X-Multi":       {"a", "b"},
			"x-multi":       {"c"},
		}})
		want := http.Header{"X-Team": {"payments"}, "X-Api-Version": {"2026-11-01"}, "X-Multi": {"a", "b", "c"}}
		require.Equal(t, want, ep.Headers, "names canonical, case variants merged in sorted order")
		got, err := b.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.Equal(t, want, got.Headers)

		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "a", Data: 1})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		requests := s.all()
		require.Len(t, requests, 2, "one failure, then a success")
		for _, r := range requests {
			require.Equal(t, "payments", r.Header.Get("X-Team"))
			require.Equal(t, "2026-11-01", r.Header.Get("X-Api-Version"))
			require.Equal(t, []string{"a", "b", "c"}, r.Header.Values("X-Multi"))
			require.Equal(t, "application/json", r.Header.Get("Content-Type"))
			require.Equal(t, outbox.UserAgent, r.Header.Get("User-Agent"))
			require.NoError(t, r.verifyWith(ep.Secret), "the signature headers are Wharf's own")
		}

		// Replaced, then removed.
		updated, err := b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{Headers: http.Header{"X-Team": {"billing"}}})
		require.NoError(t, err)
		require.Equal(t, http.Header{"X-Team": {"billing"}}, updated.Headers)
		res = b.publish(t, &outbox.Event{Type: "a", Data: 2})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		last := s.all()[len(s.all())-1]
		require.Equal(t, "billing", last.Header.Get("X-Team"))
		require.Empty(t, last.Header.Values("X-Api-Version"))

		untouched, err := b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{Description: ptr("d")})
		require.NoError(t, err)
		require.Equal(t, http.Header{"X-Team": {"billing"}}, untouched.Headers, "nil Headers leaves them")
		cleared, err := b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{Headers: http.Header{}})
		require.NoError(t, err)
		require.Empty(t, cleared.Headers)
		res = b.publish(t, &outbox.Event{Type: "a", Data: 3})
		b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		require.Empty(t, s.all()[len(s.all())-1].Header.Values("X-Team"))
	})

	t.Run("BadHeadersAreRefusedAndChangeNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		existing := b.endpoint(t, "https://example.com/existing", &outbox.EndpointParams{Headers: http.Header{"X-Keep": {"1"}}})
		many := http.Header{}
		for i := range 33 {
			many.Add("X-N", strings.Repeat("v", i%3+1))
		}
		cases := map[string]struct {
			header http.Header
			want   string
		}{
			"webhook-id":         {http.Header{"webhook-id": {"x"}}, "Webhook-Id cannot be set"},
			"webhook-timestamp":  {http.Header{"Webhook-Timestamp": {"1"}}, "Standard Webhooks"},
			"webhook-signature":  {http.Header{"webhook-signature": {"v1,x"}}, "Webhook-Signature"},
			"content-type":       {http.Header{"content-type": {"text/plain"}}, "Content-Type"},
			"content-length":     {http.Header{"Content-Length": {"3"}}, "Content-Length"},
			"host":               {http.Header{"Host": {"evil.example"}}, "Host"},
			"user-agent":         {http.Header{"User-Agent": {"me"}}, "User-Agent"},
			"connection":         {http.Header{"Connection": {"close"}}, "hop-by-hop"},
			"transfer-encoding":  {http.Header{"Transfer-Encoding": {"chunked"}}, "hop-by-hop"},
			"upgrade":            {http.Header{"Upgrade": {"h2c"}}, "hop-by-hop"},
			"te":                 {http.Header{"TE": {"trailers"}}, "hop-by-hop"},
			"keep-alive":         {http.Header{"Keep-Alive": {"timeout=5"}}, "hop-by-hop"},
			"proxy-authz":        {http.Header{"Proxy-Authorization": {"Basic eA=="}}, "hop-by-hop"},
			"authorization":      {http.Header{"Authorization": {"Bearer hunter2"}}, "use EndpointParams.Auth"},
			"traceparent":        {http.Header{"traceparent": {"00-x"}}, "trace context"},
			"name with space":    {http.Header{"X Bad": {"1"}}, "not an HTTP token"},
			"pseudo header":      {http.Header{":authority": {"x"}}, "not an HTTP token"},
			"empty name":         {http.Header{"": {"1"}}, "names must be"},
			"CRLF in value":      {http.Header{"X-Inject": {"a\r\nX-Evil: 1"}}, "control character"},
			"NUL in value":       {http.Header{"X-Nul": {"a\x00"}}, "control character"},
			"invalid UTF-8":      {http.Header{"X-Bad": {"caf\xe9"}}, "not UTF-8"},
			"no value":           {http.Header{"X-Empty": {}}, "has no value"},
			"too many values":    {many, "more than 32 header values"},
			"too large in total": {http.Header{"X-Big": {strings.Repeat("a", 9000)}}, "8192 bytes"},
		}
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		for name, c := range cases {
			_, err := b.outbox.EndpointCreateTx(ctx, tx, &outbox.EndpointParams{URL: "https://example.com/new", Headers: c.header})
			require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, name)
			require.ErrorContains(t, err, c.want, name)
			require.NotContains(t, err.Error(), "hunter2", "values are never quoted")
			_, err = b.outbox.EndpointUpdateTx(ctx, tx, existing.ID, &outbox.EndpointUpdateParams{Headers: c.header})
			require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, name)
			_, err = b.outbox.EndpointEnsureTx(ctx, tx, &outbox.EndpointParams{URL: existing.URL, Headers: c.header})
			require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, name)
		}
		var n int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_endpoints").Scan(&n), "the transaction is still usable")
		require.Equal(t, 1, n, "nothing was created")
		got, err := b.outbox.EndpointGetTx(ctx, tx, existing.ID)
		require.NoError(t, err)
		require.Equal(t, http.Header{"X-Keep": {"1"}}, got.Headers, "nothing was changed")
	})

	t.Run("EnsureUpdatesThem", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testConfig())
		params := &outbox.EndpointParams{URL: "https://example.com/h", Headers: http.Header{"X-A": {"1"}}}
		first, err := b.outbox.EndpointEnsure(ctx, params)
		require.NoError(t, err)
		require.True(t, first.Created)
		same, err := b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: params.URL, Headers: http.Header{"x-a": {"1"}}})
		require.NoError(t, err)
		require.False(t, same.Updated, "the same headers, spelt in another case")
		changed, err := b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: params.URL, Headers: http.Header{"X-A": {"2"}}})
		require.NoError(t, err)
		require.True(t, changed.Updated)
		require.Equal(t, http.Header{"X-A": {"2"}}, changed.Headers)
		removed, err := b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: params.URL})
		require.NoError(t, err)
		require.True(t, removed.Updated)
		require.Empty(t, removed.Headers)
	})
}
