package ops

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Day is the unit a duration of days is written in ("7d").
const Day = 24 * time.Hour

// daysFrom is the shortest duration written in days: shorter ones read
// better in hours ("24h", "48h"), as the dedupe window and chart windows
// are spoken of.
const daysFrom = 3 * Day

// Bytes writes a size in bytes with binary units: "512 B", "1.5 KiB",
// "20.0 MiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; (m >= unit || m <= -unit) && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGTPE"[exp]) + "iB"
}

// Duration writes a duration for people: under a minute to the
// millisecond ("250ms", "1.5s"), longer ones to the second without zero
// units ("1h30m", "2m5s"), in days from three days up ("30d", "3d12h").
// ParseDuration reads every form it writes.
func Duration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + Duration(-d)
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	d = d.Round(time.Second)
	var b strings.Builder
	if d >= daysFrom {
		b.WriteString(strconv.FormatInt(int64(d/Day), 10) + "d")
		d %= Day
	}
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.unit; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10) + u.name)
			d %= u.unit
		}
	}
	return b.String()
}

// errDuration is wrapped by ParseDuration's errors.
var errDuration = errors.New("use Go's units (90s, 90m, 72h, 1h30m) or days (7d, 1d12h)")

// ParseDuration reads a duration as an operator writes it: Go's form
// (time.ParseDuration: "90m", "72h", "1h30m") or whole days, alone or
// followed by Go's form ("90d", "1d12h"). Negative durations are refused:
// every duration an operator gives is a span back or a retention.
func ParseDuration(s string) (time.Duration, error) {
	var days int64
	rest, hasDays := s, false
	if i := strings.IndexByte(s, 'd'); i > 0 && isDigits(s[:i]) {
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil || n > int64(math.MaxInt64/Day) {
			return 0, fmt.Errorf("%q is too long a duration", s)
		}
		days, rest, hasDays = n, s[i+1:], true
	}
	var d time.Duration
	if rest != "" || !hasDays {
		if strings.HasPrefix(rest, "-") && hasDays || strings.HasPrefix(rest, "+") {
			return 0, fmt.Errorf("%q is not a duration: %w", s, errDuration)
		}
		var err error
		if d, err = time.ParseDuration(rest); err != nil {
			return 0, fmt.Errorf("%q is not a duration: %w", s, errDuration)
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative: give a duration of 0 or more", s)
	}
	if d > time.Duration(math.MaxInt64)-time.Duration(days)*Day {
		return 0, fmt.Errorf("%q is too long a duration", s)
	}
	return time.Duration(days)*Day + d, nil
}

// ParseStatusCodes reads a range of HTTP status codes as an operator
// writes it: one code ("503"), a range ("500-599") or a class ("5xx"); ""
// is 0, 0 (any).
func ParseStatusCodes(s string) (lo, hi int, err error) {
	bad := fmt.Errorf("%q is not a status code (503), a range (500-599) or a class (5xx)", s)
	t := strings.ToLower(strings.TrimSpace(s))
	switch {
	case t == "":
		return 0, 0, nil
	case len(t) == 3 && strings.HasSuffix(t, "xx") && t[0] >= '1' && t[0] <= '5':
		lo = int(t[0]-'0') * 100
		return lo, lo + 99, nil
	}
	first, last, isRange := strings.Cut(t, "-")
	if !isDigits(first) || isRange && !isDigits(last) {
		return 0, 0, bad
	}
	lo, _ = strconv.Atoi(first)
	hi = lo
	if isRange {
		hi, _ = strconv.Atoi(last)
	}
	if lo < 100 || hi > 599 || lo > hi {
		return 0, 0, bad
	}
	return lo, hi, nil
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// Ratio is part/whole, 0 when whole is 0.
func Ratio(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// DuplicateRatio is the share of a source's deliveries that were
// duplicates: duplicates / (accepted + duplicates), where accepted counts
// the deliveries stored as new messages. It is the one definition the
// CLI (wharf stats), the dashboard's overview and the WharfDuplicateRatioHigh
// alert rule (deploy/prometheus/alerts.yml) use.
func DuplicateRatio(duplicates, accepted int64) float64 {
	return Ratio(duplicates, accepted+duplicates)
}

// Percent writes a ratio as a percentage with one decimal: "12.5%".
func Percent(ratio float64) string {
	return strconv.FormatFloat(100*ratio, 'f', 1, 64) + "%"
}
