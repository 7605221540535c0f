package loadtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
)

func TestPercentile(t *testing.T) {
	r := Result{Latencies: []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}}
	if got := r.Percentile(50); got != 6 {
		t.Fatalf("p50 = %v, want 6", got)
	}
	if got := r.Percentile(99); got != 10 {
		t.Fatalf("p99 = %v, want 10", got)
	}
}

func TestRunRateMeasuresFromScheduledStart(t *testing.T) {
	// The first call blocks 50 ms; at 1000/s the calls scheduled meanwhile
	// still start on time (open loop), so no latency is below its own
	// duration and the first is at least 50 ms.
	res, err := RunRate(1000, 20, func(i int) error {
		if i == 0 {
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Latencies[0] < 50*time.Millisecond {
		t.Fatalf("first latency %v, want ≥ 50ms", res.Latencies[0])
	}
	if res.Wall > time.Second {
		t.Fatalf("20 calls at 1000/s took %v: the loop waited for the slow call", res.Wall)
	}
}

func TestNiceCeil(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, 7: 8, 2265: 2500, 1000: 1000, 9100: 10000} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}

func TestChartSVG(t *testing.T) {
	svg := ChartSVG("t <&>", "x", "y", []float64{1, 4, 16}, []Series{{Name: "a", Values: []float64{1, 2, 3}}, {Name: "b", Values: []float64{3, 2, 1}}})
	if n := strings.Count(svg, "<polyline"); n != 2 {
		t.Fatalf("%d lines, want 2", n)
	}
	if !strings.Contains(svg, "t &lt;&amp;&gt;") {
		t.Fatal("title not escaped")
	}
}

type logged struct{ lines []string }

func (*logged) Helper() {}
func (l *logged) Logf(format string, args ...any) {
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// Checkpoint runs a CHECKPOINT on DATABASE_URL, which moves the control
// file's checkpoint location on before it returns (the checkpoints_req
// counter in pg_stat_bgwriter is reported later, and a CI run read it
// unchanged); when it cannot, it says why and goes on.
func TestCheckpoint(t *testing.T) {
	ctx := context.Background()
	t.Setenv("DATABASE_URL", testdb.URL())
	conn, err := pgx.Connect(ctx, testdb.URL())
	require.NoError(t, err, "start Postgres: pg_ctlcluster --skip-systemctl-redirect 15 main start")
	defer conn.Close(ctx)
	var before string
	require.NoError(t, conn.QueryRow(ctx, "SELECT checkpoint_lsn::text FROM pg_control_checkpoint()").Scan(&before))
	var l logged
	Checkpoint(&l)
	require.Empty(t, l.lines)
	var moved bool
	require.NoError(t, conn.QueryRow(ctx,
		"SELECT checkpoint_lsn > $1::pg_lsn FROM pg_control_checkpoint()", before).Scan(&moved))
	require.True(t, moved, "checkpoint location still %s", before)

	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	Checkpoint(&l)
	require.Len(t, l.lines, 1)
	require.Contains(t, l.lines[0], "CHECKPOINT before a run failed")
}
