package outbox_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
)

// Environment of the crash helper process.
const (
	crashHelperEnv   = "WHARF_OUTBOX_CRASH_HELPER"
	crashHelperDBEnv = "WHARF_OUTBOX_CRASH_HELPER_DB"
)

// TestCrashHelperProcess is not a test: TestCrashBetweenSendAndRecord runs
// the test binary again with crashHelperEnv set, and this function then
// works deliveries until the parent kills it.
func TestCrashHelperProcess(t *testing.T) {
	if os.Getenv(crashHelperEnv) != "1" {
		t.Skip("helper process for TestCrashBetweenSendAndRecord")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(crashHelperDBEnv))
	require.NoError(t, err)
	ob, err := outbox.New(pool, testConfig())
	require.NoError(t, err)
	workers := river.NewWorkers()
	require.NoError(t, ob.AddWorkers(workers))
	cfg := riverConfig(ob, workers, 5)
	// The parent's client must become leader (and run the stuck-job
	// rescuer) once this process is gone.
	cfg.LeaderElectionDisabled = true
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	select {} // until killed
}

func TestCrashBetweenSendAndRecord(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a subprocess")
	}
	ctx := context.Background()
	url := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ob, err := outbox.New(pool, testConfig())
	require.NoError(t, err)
	bundle := &testBundle{pool: pool, outbox: ob}

	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	receiver := newSink(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			// The first attempt reached the receiver; its answer never
			// gets back before the worker dies.
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ep := bundle.endpoint(t, receiver.URL(), nil)
	res := bundle.publish(t, &outbox.Event{Type: "payment.captured", Data: map[string]int{"amount": 5}})

	var output bytes.Buffer
	helper := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$", "-test.count=1")
	helper.Env = append(os.Environ(), crashHelperEnv+"=1", crashHelperDBEnv+"="+url)
	helper.Stdout, helper.Stderr = &output, &output
	require.NoError(t, helper.Start())
	exited := make(chan struct{})
	go func() { _ = helper.Wait(); close(exited) }()
	t.Cleanup(func() { _ = helper.Process.Kill(); <-exited })

	select {
	case <-receiver.arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("the helper never sent the delivery; its output:\n%s", output.String())
	}
	require.NoError(t, helper.Process.Kill()) // SIGKILL: no deferred cleanup, no recording
	<-exited

	d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusPending)
	require.Zero(t, d.Attempts, "the killed attempt was never recorded")

	// River rescues a job only once it has been running longer than both its
	// timeout (a delivery's: MaxEndpointTimeout plus 50 s) and
	// RescueStuckJobsAfter; the rescuer runs when the client becomes leader,
	// then every 30 s. The crash is made to have happened that long ago.
	cfg := riverConfig(ob, river.NewWorkers(), 5)
	cfg.JobTimeout, cfg.RescueStuckJobsAfter = time.Second, time.Second
	require.NoError(t, ob.AddWorkers(cfg.Workers))
	tag, err := pool.Exec(ctx, `UPDATE river_job SET attempted_at = now() - interval '2 minutes' WHERE state = 'running'`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(stopCtx))
	})

	d = bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
	require.Equal(t, 1, d.Attempts)
	got := receiver.all()
	require.Len(t, got, 2, "delivered again after the crash")
	require.Equal(t, res[0].EventID, got[0].Header.Get("webhook-id"))
	require.Equal(t, res[0].EventID, got[1].Header.Get("webhook-id"), "same webhook-id: the receiver dedupes")
	require.Equal(t, got[0].Body, got[1].Body)
}
