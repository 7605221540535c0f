package outbox_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// hostileHeaders is a server on loopback that answers every request with
// a 200 whose headers take size bytes: a status line, chunk repeated, and
// the end of the headers, written raw so that serving it allocates
// nothing.
type hostileHeaders struct {
	listener net.Listener
	chunk    []byte
	size     int
	wg       sync.WaitGroup
}

func newHostileHeaders(t *testing.T, chunk []byte, size int) *hostileHeaders {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := &hostileHeaders{listener: l, chunk: chunk, size: size}
	h.wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			h.wg.Go(func() { h.serve(conn) })
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		h.wg.Wait()
	})
	return h
}

func (h *hostileHeaders) serve(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	req, err := http.ReadRequest(bufio.NewReader(conn))
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, req.Body)
	// The client hangs up once it has read its limit: a write fails.
	if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\n"); err != nil {
		return
	}
	for sent := 0; sent < h.size; sent += len(h.chunk) {
		if _, err := conn.Write(h.chunk); err != nil {
			return
		}
	}
	_, _ = io.WriteString(conn, "\r\nContent-Length: 0\r\n\r\n")
}

func (h *hostileHeaders) URL() string { return "http://" + h.listener.Addr().String() }

// hostileChunk returns 64 KiB of response headers shaped as shape: part of
// one huge header, many tiny distinct ones (the most memory per byte once
// parsed), one tiny one repeated, or many of 100 bytes. Repeated, each
// chunk ends a header line; the first chunk of "one" starts it.
func hostileChunk(shape string) []byte {
	var b strings.Builder
	for i := 0; b.Len() < 64<<10; i++ {
		switch shape {
		case "one":
			b.WriteString("X-Big-" + strings.Repeat("a", 64<<10) + ": a\r\n")
		case "distinct":
			fmt.Fprintf(&b, "%x:\r\n", i)
		case "repeated":
			b.WriteString("a:\r\n")
		case "medium":
			fmt.Fprintf(&b, "X-%d: %s\r\n", i, strings.Repeat("v", 100))
		}
	}
	return []byte(b.String())
}

// heapAllocated returns the bytes allocated on the heap so far: what a
// stretch of work allocates bounds how much it can have grown the heap.
func heapAllocated() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

// TestHostileResponseHeadersAreBounded is not parallel: it measures the
// heap the whole process allocates while it runs.
func TestHostileResponseHeadersAreBounded(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	cfg.RetrySchedule = []time.Duration{0}
	bundle := setup(t, cfg)

	// Twenty endpoints answer ~9.5 MiB of headers each, under Go's own
	// 10 MiB default, so only the outbox's limit cuts them short.
	chunks := [][]byte{hostileChunk("one"), hostileChunk("distinct"), hostileChunk("repeated"), hostileChunk("medium")}
	var endpoints []*outbox.EndpointWithSecret
	for i := range 20 {
		hostile := newHostileHeaders(t, chunks[i%len(chunks)], 9<<20+512<<10)
		endpoints = append(endpoints, bundle.endpoint(t, hostile.URL(), nil))
	}
	startRiver(t, bundle.pool, bundle.outbox)

	before := heapAllocated()
	res := bundle.publish(t, &outbox.Event{Type: "x"})
	require.Equal(t, len(endpoints), res[0].Deliveries)
	var deliveries []*outbox.Delivery
	require.Eventually(t, func() bool {
		list, err := bundle.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EventID: res[0].EventID})
		require.NoError(t, err)
		deliveries = list
		for _, d := range list {
			if d.Status != outbox.StatusDead && d.Status != outbox.StatusSucceeded {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond)
	allocated := heapAllocated() - before
	t.Logf("twenty hostile attempts allocated %d KiB", allocated>>10)
	// Each attempt may allocate about 30 times the header limit (tiny
	// distinct headers parse into a map entry each), its body limit and
	// buffers; River and the database driver allocate a few MiB besides.
	// Go's own 10 MiB limit let these twenty allocate over 300 MiB.
	perAttempt := uint64(30*outbox.DefaultResponseHeaderLimit + 4*outbox.DefaultResponseBodyLimit + 64<<10)
	limit := uint64(len(endpoints))*perAttempt + 24<<20
	require.Less(t, allocated, limit, "bytes allocated")

	require.Len(t, deliveries, len(endpoints))
	for _, d := range deliveries {
		require.Equal(t, outbox.StatusDead, d.Status)
		require.Nil(t, d.LastStatusCode, "a response cut short is no answer")
		require.Contains(t, d.LastError, fmt.Sprintf("server response headers exceeded %d bytes", outbox.DefaultResponseHeaderLimit))
		attempts, err := bundle.outbox.AttemptList(ctx, d.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.False(t, attempts[0].Succeeded)
	}
}
