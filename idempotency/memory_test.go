package idempotency_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/idempotency"
)

// TestResponseOverBufferLimit: a response body larger than
// MaxBufferedResponseBody. Non-transactional: the outcome is recorded as
// the handler crosses the limit, then the response streams to the client
// whole, while the handler still runs; a retry gets the status and headers
// without the body, marked. Transactional: nothing may be sent before the
// commit, so the handler's writes fail, roll back, and the client gets 500.
func TestResponseOverBufferLimit(t *testing.T) {
	t.Parallel()
	const limit, size, chunk = 64 << 10, 1 << 20, 4 << 10
	want := sha256.Sum256(bytes.Repeat([]byte("x"), size))
	modes(t, func(t *testing.T, transactional bool) {
		crossed, release := newGate(), newGate()
		var writeErr atomic.Value
		var statusAtCrossing atomic.Value
		b := setup(t, testOptions{
			config: idempotency.Config{Transactional: transactional, MaxBufferedResponseBody: limit, MaxStoredResponseBody: 1 << 10},
			gates:  []*gate{crossed, release},
			handler: func(b *testBundle) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					in, _, ok := b.debitOrFail(w, r)
					if !ok {
						return
					}
					w.Header().Set("Content-Type", "text/plain")
					w.Header().Set("Location", "/payouts/po_1")
					status := http.StatusCreated
					if r.URL.Path == "/refunds" {
						status = http.StatusServiceUnavailable
					}
					w.WriteHeader(status)
					p := bytes.Repeat([]byte("x"), chunk)
					for written := 0; written < size; written += chunk {
						if _, err := w.Write(p); err != nil {
							writeErr.CompareAndSwap(nil, err)
						}
						if written == limit && b.calls.Load() == 1 && in.Amount == 10 {
							// Just past the limit, on the first run: the
							// client must have the response's start now.
							statusAtCrossing.Store(b.keyStatus(t, "key-1"))
							crossed.open()
							release.wait()
						}
					}
				}
			},
		})
		read := func(req request) (*http.Response, [32]byte, int64) {
			t.Helper()
			hr, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.server.URL+req.path, strings.NewReader(req.body))
			require.NoError(t, err)
			hr.Header.Set("X-Account", req.account)
			hr.Header.Set(idempotency.HeaderKey, req.keys[0])
			type answer struct {
				resp *http.Response
				err  error
			}
			answered := make(chan answer, 1)
			go func() {
				resp, err := b.client.Do(hr)
				answered <- answer{resp, err}
			}()
			var a answer
			select {
			case a = <-answered:
			case <-time.After(10 * time.Second):
				// Without streaming, the response waits for the handler,
				// which waits for release.
				t.Fatal("no response while the handler was past the limit")
			}
			release.open()
			require.NoError(t, a.err)
			resp := a.resp
			defer resp.Body.Close()
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			require.NoError(t, err)
			return resp, [32]byte(h.Sum(nil)), n
		}
		if transactional {
			release.open() // the transactional response waits for the handler
		}

		first := payoutOf("key-1")
		first.path = "/payouts"
		resp, got, n := read(first)
		if transactional {
			require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
			require.ErrorIs(t, writeErr.Load().(error), idempotency.ErrResponseTooLarge)
			require.EqualValues(t, 100, b.balance(t, "acct_1"), "the handler's writes rolled back")
			require.Zero(t, b.keyCount(t), "the key is released")
			res := b.do(t, payoutOf("key-1"))
			require.Equal(t, http.StatusInternalServerError, res.status)
			require.Contains(t, res.errorMessage(t), "MaxBufferedResponseBody")
			require.EqualValues(t, 2, b.calls.Load(), "a retry runs the handler again")
			require.EqualValues(t, 100, b.balance(t, "acct_1"))
			require.Contains(t, b.logs.String(), "larger than MaxBufferedResponseBody; rolled back")
			return
		}

		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Equal(t, "/payouts/po_1", resp.Header.Get("Location"))
		require.EqualValues(t, size, n)
		require.Equal(t, want, got, "the client gets the whole body")
		require.Nil(t, writeErr.Load())
		require.Equal(t, "completed", statusAtCrossing.Load(), "recorded before the client saw the response")

		again := b.do(t, payoutOf("key-1"))
		require.Equal(t, http.StatusCreated, again.status)
		require.True(t, again.replayed())
		require.Equal(t, "true", again.header.Get(idempotency.HeaderBodyOmitted))
		require.Equal(t, "/payouts/po_1", again.header.Get("Location"))
		require.Empty(t, again.body)
		require.EqualValues(t, 1, b.calls.Load())
		require.EqualValues(t, 90, b.balance(t, "acct_1"), "one payout")

		// A 5xx past the limit streams too, and releases the key.
		failed := payoutOf("key-2")
		failed.path = "/refunds"
		resp, got, n = read(failed)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.EqualValues(t, size, n)
		require.Equal(t, want, got)
		require.Empty(t, b.keyStatus(t, "key-2"), "the key is free for a retry")
	})
}

// TestResponseMemoryIsBounded: a handler writing 16 MiB, and ignoring write
// errors, must not make the middleware hold 16 MiB (it held all of it, and
// allocated 5 times as much growing its buffer). Not parallel, so that the
// allocations it measures while one request is served are that request's.
func TestResponseMemoryIsBounded(t *testing.T) {
	const size = 16 << 20
	for _, transactional := range []bool{false, true} {
		b := setup(t, testOptions{
			config: idempotency.Config{Transactional: transactional},
			handler: func(b *testBundle) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					chunk := bytes.Repeat([]byte("x"), 32<<10)
					w.Header().Set("Content-Type", "text/plain")
					w.WriteHeader(http.StatusCreated)
					for written := 0; written < size; written += len(chunk) {
						_, _ = w.Write(chunk)
					}
				}
			},
		})
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.server.URL+"/payouts",
			strings.NewReader(payoutBody("acct_1", 10)))
		require.NoError(t, err)
		req.Header.Set("X-Account", "acct_1")
		req.Header.Set(idempotency.HeaderKey, "key-1")

		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		resp, err := b.client.Do(req)
		require.NoError(t, err)
		received, err := io.Copy(io.Discard, resp.Body) // not kept: the client's memory is not the middleware's
		require.NoError(t, errors.Join(err, resp.Body.Close()))
		runtime.ReadMemStats(&after)

		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("transactional=%v: status %d, %d bytes received, %d KiB allocated", transactional, resp.StatusCode, received, allocated>>10)
		// The buffer grows to DefaultMaxBufferedResponseBody, allocating
		// at most twice that on the way.
		require.Less(t, allocated, uint64(4*idempotency.DefaultMaxBufferedResponseBody),
			"transactional=%v: serving a 16 MiB response allocated %d KiB", transactional, allocated>>10)
		if transactional {
			require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		} else {
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.EqualValues(t, size, received)
		}
	}
}
