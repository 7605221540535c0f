package loadtest

import (
	"strings"
	"testing"
	"time"
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
