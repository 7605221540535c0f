package ops_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/ops"
)

func TestDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                                      "0s",
		350 * time.Microsecond:                 "350µs",
		250*time.Millisecond + 400:             "250ms",
		1500 * time.Millisecond:                "1.5s",
		59 * time.Second:                       "59s",
		90 * time.Minute:                       "1h30m",
		125*time.Second + 400*time.Millisecond: "2m5s",
		24 * time.Hour:                         "24h",
		72 * time.Hour:                         "3d",
		30 * ops.Day:                           "30d",
		3*ops.Day + 12*time.Hour:               "3d12h",
		-90 * time.Minute:                      "-1h30m",
	} {
		require.Equal(t, want, ops.Duration(d), "%d", d)
	}
}

// Every duration written reads back (to the unit it was written in).
func TestParseDurationReadsWhatDurationWrites(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, time.Second, 90 * time.Minute, 72 * time.Hour, 30 * ops.Day, 90 * ops.Day, 3*ops.Day + 12*time.Hour + 5*time.Second, 1500 * time.Millisecond} {
		got, err := ops.ParseDuration(ops.Duration(d))
		require.NoError(t, err, ops.Duration(d))
		require.Equal(t, d, got, ops.Duration(d))
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"90d": 90 * ops.Day, "7d": 7 * ops.Day, "0d": 0, "1d12h": 36 * time.Hour, "72h": 72 * time.Hour,
		"90m": 90 * time.Minute, "1h30m": 90 * time.Minute, "0": 0, "250ms": 250 * time.Millisecond,
	} {
		got, err := ops.ParseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "d", "7 d", "-1h", "-1d", "1d-2h", "1d+2h", "1.5d", "yesterday", "99999999999999d", "106752d", "106751d23h59m", "1e9h", "7D"} {
		_, err := ops.ParseDuration(in)
		require.Error(t, err, in)
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"90d", "1d12h", "72h", "-1h", "9999999999999999999d", "1d1d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ops.ParseDuration(s)
		if err == nil && d < 0 {
			t.Fatalf("ParseDuration(%q) = %v: negative", s, d)
		}
	})
}

func TestBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 20 << 20: "20.0 MiB", 3 << 30: "3.0 GiB", 5 << 40: "5.0 TiB",
	} {
		require.Equal(t, want, ops.Bytes(n), "%d", n)
	}
}

func TestDuplicateRatio(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 0.2, ops.DuplicateRatio(3, 12), 1e-9, "3 duplicates of 15 deliveries")
	require.Zero(t, ops.DuplicateRatio(0, 0))
	require.Equal(t, "20.0%", ops.Percent(ops.DuplicateRatio(3, 12)))
}

func TestParseStatusCodes(t *testing.T) {
	for in, want := range map[string][2]int{"": {0, 0}, "503": {503, 503}, " 5XX ": {500, 599}, "1xx": {100, 199}, "400-499": {400, 499}, "599-599": {599, 599}} {
		lo, hi, err := ops.ParseStatusCodes(in)
		require.NoError(t, err, in)
		require.Equal(t, want, [2]int{lo, hi}, in)
	}
	for _, in := range []string{"6xx", "0xx", "x", "99", "600", "599-500", "500-", "-500", "+500", "500-+599", "5 00", "99999999999999999999", "500-599-600"} {
		_, _, err := ops.ParseStatusCodes(in)
		require.Error(t, err, in)
	}
}

// FuzzParseStatusCodes: the dashboard's form field reaches it; it never
// panics and what it accepts is a range within 100–599, or 0, 0.
func FuzzParseStatusCodes(f *testing.F) {
	for _, s := range []string{"", "5xx", "500-599", "503", "599-500", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lo, hi, err := ops.ParseStatusCodes(s)
		if err != nil || lo == 0 && hi == 0 {
			return
		}
		if lo < 100 || hi > 599 || lo > hi {
			t.Fatalf("%q: %d-%d", s, lo, hi)
		}
	})
}
