package chaos

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
)

// TestChaosOutboxEndpoints publishes events to endpoints that misbehave
// the ways real receivers do: one hangs, one resets the connection, one
// sends its status line byte by byte, one redirects, one answers 200 and
// then trickles its body; a healthy one sits beside them. Each delivery
// must end as the contract says (2xx succeeds, everything else is retried
// and then dead, redirects are not followed) without a misbehaving
// endpoint holding up the healthy one's deliveries or any worker for
// longer than the endpoint's timeout.
func TestChaosOutboxEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	const timeout = time.Second
	ob, err := outbox.New(pool, &outbox.Config{
		RetrySchedule:        []time.Duration{0, 100 * time.Millisecond},
		RetryJitter:          -1,
		ThrottledRetryMin:    -1, // a timed-out attempt's retry waits a minute by default
		EndpointTimeout:      timeout,
		AllowPrivateNetworks: true,
		Logger:               slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)

	healthy := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	hang := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	redirect := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, healthy.server.URL+"/redirected", http.StatusTemporaryRedirect)
	})
	trickle := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for range 50 { // 10 s of body at one byte per 200 ms, far past the timeout
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(200 * time.Millisecond): // the trickle's pace
			}
		}
	})
	reset := rawServer(t, func(c net.Conn) {
		_, _ = bufio.NewReader(c).ReadString('\n') // the request line, then RST
		_ = c.(*net.TCPConn).SetLinger(0)
	})
	drip := rawServer(t, func(c net.Conn) {
		_, _ = bufio.NewReader(c).ReadString('\n')
		for _, b := range []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(200 * time.Millisecond) // the drip's pace: the whole answer takes 7 s
		}
	})

	endpoints := map[string]uuid.UUID{}
	for name, u := range map[string]string{
		"healthy": healthy.server.URL, "hang": hang.server.URL, "redirect": redirect.server.URL,
		"trickle": trickle.server.URL, "reset": reset, "drip": drip,
	} {
		ep, err := ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: u, Description: name})
		require.NoError(t, err)
		endpoints[name] = ep.ID
	}

	workers := river.NewWorkers()
	require.NoError(t, ob.AddWorkers(workers))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{ob.Queue(): {MaxWorkers: 20}},
		Workers:              workers,
		FetchCooldown:        5 * time.Millisecond,
		FetchPollInterval:    20 * time.Millisecond,
		JobTimeout:           10 * time.Second,
		RescueStuckJobsAfter: 15 * time.Second,
		Logger:               slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(stopCtx))
	})

	const events = 5
	var eventIDs []string
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range events {
			res, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "chaos.test", Data: map[string]int{"n": i}})
			if err != nil {
				return err
			}
			eventIDs = append(eventIDs, res.EventID)
		}
		return nil
	}))

	want := map[string]outbox.DeliveryStatus{
		"healthy": outbox.StatusSucceeded, "trickle": outbox.StatusSucceeded,
		"hang": outbox.StatusDead, "reset": outbox.StatusDead, "drip": outbox.StatusDead, "redirect": outbox.StatusDead,
	}
	deadline := time.Now().Add(2 * time.Minute)
	for name, status := range want {
		id := endpoints[name]
		for {
			list, err := ob.DeliveryList(ctx, &outbox.DeliveryListParams{EndpointID: &id, Status: status})
			require.NoError(t, err)
			if len(list) == events {
				break
			}
			if time.Now().After(deadline) {
				all, _ := ob.DeliveryList(ctx, &outbox.DeliveryListParams{EndpointID: &id})
				for _, d := range all {
					t.Logf("%s: %s after %d attempts: %s", name, d.Status, d.Attempts, d.LastError)
				}
				t.Fatalf("%s: %d of %d deliveries %s after 2 minutes", name, len(list), events, status)
			}
			time.Sleep(50 * time.Millisecond) // polling the deliveries
		}
	}

	for name := range want {
		id := endpoints[name]
		list, err := ob.DeliveryList(ctx, &outbox.DeliveryListParams{EndpointID: &id})
		require.NoError(t, err)
		for _, d := range list {
			attempts, err := ob.AttemptList(ctx, d.ID)
			require.NoError(t, err)
			switch name {
			case "healthy", "trickle":
				require.Len(t, attempts, 1, "%s: one attempt succeeds", name)
				require.True(t, attempts[0].Succeeded)
			default:
				require.Len(t, attempts, 2, "%s: every attempt of the schedule is made", name)
				for _, a := range attempts {
					require.False(t, a.Succeeded)
					require.NotEmpty(t, a.Error, "%s: a failed attempt says why", name)
					if name == "redirect" {
						require.Equal(t, http.StatusTemporaryRedirect, *a.StatusCode)
					} else {
						require.Nil(t, a.StatusCode, "%s: no response", name)
					}
				}
			}
			for _, a := range attempts {
				// The endpoint's timeout bounds every attempt (a generous
				// margin for a loaded machine).
				require.Less(t, a.Duration, timeout+10*time.Second, "%s: an attempt outlived the endpoint's timeout", name)
			}
		}
	}
	require.ElementsMatch(t, eventIDs, healthy.ids("/"), "the healthy endpoint gets each event once")
	require.Empty(t, healthy.ids("/redirected"), "redirects are not followed")
	require.Len(t, trickle.ids("/"), events)
	require.Len(t, hang.ids("/"), 2*events)
}

// recorder is an HTTP endpoint that records the webhook-id of each request
// by path before answering with respond.
type recorder struct {
	server *httptest.Server
	mu     sync.Mutex
	seen   map[string][]string
}

func newRecorder(t testing.TB, respond http.HandlerFunc) *recorder {
	rec := &recorder{seen: map[string][]string{}}
	rec.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rec.mu.Lock()
		rec.seen[r.URL.Path] = append(rec.seen[r.URL.Path], r.Header.Get("webhook-id"))
		rec.mu.Unlock()
		respond(w, r)
	}))
	t.Cleanup(rec.server.Close)
	return rec
}

func (rec *recorder) ids(path string) []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.seen[path]...)
}

// rawServer serves each TCP connection with handle, then closes it, and
// returns the server's URL. Connections still open when the test ends are
// closed, which ends their handlers' writes.
func rawServer(t testing.TB, handle func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				handle(c)
				_ = c.Close()
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/"
}
