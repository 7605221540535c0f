package testdb

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Writes counts what a pool's connections write to Postgres. pgx writes
// each round trip's messages at once (a pipeline's too), so once a
// connection's statements are prepared and cached, the count of writes is
// the count of round trips.
type Writes struct{ n atomic.Int64 }

// Count returns the writes so far.
func (w *Writes) Count() int64 { return w.n.Load() }

// NewCountingWrites is NewWithMaxConns(tb, 1) whose connection counts its
// writes.
func NewCountingWrites(tb testing.TB) (*pgxpool.Pool, *Writes) {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(NewURL(tb))
	if err != nil {
		tb.Fatalf("testdb: parse URL: %v", err)
	}
	cfg.MaxConns = 1
	writes := &Writes{}
	dialer := &net.Dialer{}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: conn, writes: writes}, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("testdb: open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool, writes
}

type countingConn struct {
	net.Conn
	writes *Writes
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.n.Add(1)
	return c.Conn.Write(p)
}
