package idempotency_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/idempotency"
)

// The tests below are issue 15's scenario: two nodes of one application
// share a database, and node B's clock runs 90 s ahead of node A's. They
// once failed with node B's Config.Now set 90 s ahead: B took over a running
// key (201, a second payout), treated a live key as expired, and pruned it.
// The middleware now reads no node's clock, so a node's skew cannot be
// expressed (Config.Now is gone); time passes for a key only as the
// database's clock sees it (testBundle.age), and both nodes must answer by
// that clock alone.

// TestOtherNodeDoesNotTakeOverRunningKey: node A's handler has run 4 minutes
// of a 5-minute InProgressTimeout. A retry on node B gets 409 and the
// handler does not run again; once the timeout has passed by the database's
// clock, a retry on B takes the key over.
func TestOtherNodeDoesNotTakeOverRunningKey(t *testing.T) {
	t.Parallel()
	entered, release := newGate(), newGate()
	b := setup(t, testOptions{gates: []*gate{entered, release}, handler: holdingFirstRun(entered, release)})
	nodeB := b.startNode(t, idempotency.Config{})
	onB := func(req request) request { req.node = nodeB; return req }

	firstDone := b.sendAsync(payoutOf("key-1"))
	entered.wait()
	b.age(t, "key-1", 4*time.Minute)

	res := b.do(t, onB(payoutOf("key-1")))
	require.Equal(t, http.StatusConflict, res.status, "node B took over a key whose handler is still within its timeout: %s", res.body)
	require.EqualValues(t, 1, b.calls.Load())

	b.age(t, "key-1", time.Minute)
	res = b.do(t, onB(payoutOf("key-1")))
	require.Equal(t, http.StatusCreated, res.status, res.body)
	require.EqualValues(t, 2, b.calls.Load())

	release.open()
	first := <-firstDone
	require.Equal(t, http.StatusCreated, first.status, first.body)
	again := b.do(t, payoutOf("key-1"))
	require.True(t, again.replayed())
	require.Equal(t, res.body, again.body, "node B's takeover is the outcome kept")
}

// TestOtherNodeDoesNotExpireKeyEarly: a key that expires in a minute by the
// database's clock is live for node B and for a prune, and expired for
// both once the minute has passed.
func TestOtherNodeDoesNotExpireKeyEarly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testOptions{config: idempotency.Config{KeyRetention: time.Hour}})
	nodeB := b.startNode(t, idempotency.Config{KeyRetention: time.Hour})

	require.Equal(t, http.StatusCreated, b.do(t, payoutOf("key-1")).status)
	b.age(t, "key-1", time.Hour-time.Minute)

	changed := payoutOf("key-1")
	changed.body = payoutBody("acct_1", 25)
	changed.node = nodeB
	res := b.do(t, changed)
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "node B treated a live key as expired: %s", res.body)
	n, err := idempotency.DeleteExpired(ctx, b.pool, 10)
	require.NoError(t, err)
	require.Zero(t, n, "a prune deleted a live key")
	require.Equal(t, "completed", b.keyStatus(t, "key-1"))
	require.EqualValues(t, 1, b.calls.Load())

	b.age(t, "key-1", time.Minute)
	n, err = idempotency.DeleteExpired(ctx, b.pool, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	res = b.do(t, changed)
	require.Equal(t, http.StatusCreated, res.status, res.body)
	require.EqualValues(t, 2, b.calls.Load())
}
