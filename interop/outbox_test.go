package interop_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/wharfriver"
)

// The outbox's deliveries verify with the Standard Webhooks reference
// library: every attempt of a retried delivery (each signed with its own
// timestamp), both signatures of a rotation's overlap, and after the
// overlap the current secret's alone. The outbox package's own tests make
// the same checks with Wharf's verifier.
func TestOutboxDeliveriesVerifyWithReferenceLibrary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ob, err := outbox.New(pool, &outbox.Config{
		RetrySchedule:        []time.Duration{0, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond},
		RetryJitter:          -1,
		AllowPrivateNetworks: true, // the sink listens on loopback
		Logger:               quiet,
	})
	require.NoError(t, err)
	riverCfg := &river.Config{FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond, Logger: quiet}
	require.NoError(t, wharfriver.Configure(riverCfg, &wharfriver.Components{Pool: pool, Outbox: ob, NoJobs: true}))
	client, err := river.NewClient(riverpgxv5.New(pool), riverCfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(stopCtx))
	})

	receiver := newSink(t, 2) // the first two requests fail
	ep, err := ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: receiver.server.URL})
	require.NoError(t, err)
	publish := func() string {
		t.Helper()
		var eventID string
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "invoice.paid", Data: map[string]any{"amount": 42, "note": "<b>&</b>"}})
			if err != nil {
				return err
			}
			eventID = res.EventID
			return nil
		}))
		return eventID
	}
	verifies := func(secret string, r received) error {
		t.Helper()
		verifier, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		return verifier.Verify(r.Body, r.Header)
	}

	t.Log("a retried delivery: every attempt verifies, with no other secret")
	attempts := receiver.await(t, publish(), 3)
	otherSecret, err := outbox.NewSecret()
	require.NoError(t, err)
	for _, r := range attempts {
		require.NoError(t, verifies(ep.Secret, r), "each attempt is signed with its own timestamp")
		require.Error(t, verifies(otherSecret, r))
	}

	t.Log("during a rotation's overlap: two signatures, either secret verifies")
	rotated, err := ob.EndpointRotateSecret(ctx, ep.ID, nil)
	require.NoError(t, err)
	require.NotEqual(t, ep.Secret, rotated.Secret)
	got := receiver.await(t, publish(), 1)[0]
	require.Len(t, strings.Fields(got.Header.Get("webhook-signature")), 2)
	for _, secret := range []string{ep.Secret, rotated.Secret} {
		require.NoError(t, verifies(secret, got))
	}

	t.Log("after a rotation without overlap: the current secret alone")
	final, err := ob.EndpointRotateSecret(ctx, ep.ID, &outbox.RotateSecretParams{Overlap: -1})
	require.NoError(t, err)
	got = receiver.await(t, publish(), 1)[0]
	require.Len(t, strings.Fields(got.Header.Get("webhook-signature")), 1)
	require.NoError(t, verifies(final.Secret, got))
	require.Error(t, verifies(rotated.Secret, got))
}

// received is one request a sink got.
type received struct {
	Header http.Header
	Body   []byte
}

// sink is a webhook receiver on loopback that records requests and answers
// the first failures of them 500, the rest 204.
type sink struct {
	server   *httptest.Server
	failures int

	mu       sync.Mutex
	requests []received
}

func newSink(t *testing.T, failures int) *sink {
	s := &sink{failures: failures}
	s.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, received{Header: r.Header.Clone(), Body: body})
		n := len(s.requests)
		s.mu.Unlock()
		if n <= s.failures {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.server.Close)
	return s
}

// await waits for n requests carrying webhookID and returns them.
func (s *sink) await(t *testing.T, webhookID string, n int) []received {
	t.Helper()
	var got []received
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		var matched []received
		for _, r := range s.requests {
			if r.Header.Get("webhook-id") == webhookID {
				matched = append(matched, r)
			}
		}
		got = matched
		return len(matched) == n
	}, 15*time.Second, 10*time.Millisecond, "%d requests for %s never arrived", n, webhookID)
	return got
}
