// Package shared holds the small pieces that inbox, outbox, idempotency and
// jobs would otherwise each write their own way: the microsecond UTC clock,
// text made safe for a Postgres text column, and configuration problems
// collected under one sentinel.
package shared

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// InsertNotifyInterval is the FetchCooldown of Wharf's insert-only River
// clients (the inbox's and the outbox's): how often at most their inserts
// tell the workers (LISTEN/NOTIFY) that a queue has jobs. River sends one
// notification per queue per interval; a job inserted within the interval
// after one waits for the next notification or the workers' poll, so with
// River's 100 ms a published event waited 0–100 ms, or a poll, before a
// worker saw it. A notifying commit takes Postgres's notification lock, so
// commits that notify follow one another: at one a millisecond, 32
// goroutines publishing one event per transaction ran about 15% slower
// than at one per 100 ms (docs/performance.md), and a burst of commits
// closer than 5 ms apart no longer waits for the poll. A single event's
// publish writes its jobs and notifies itself, on a schedule of its own
// (internal/delivery's wake).
const InsertNotifyInterval = time.Millisecond

// Micro returns t in UTC at Postgres's microsecond precision, so a timestamp
// survives a round trip through the database (or River's job args)
// unchanged.
func Micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Text makes s storable in a text column and at most max bytes long (max <=
// 0: no limit): invalid UTF-8 and NUL (which a text column refuses) become
// U+FFFD, and a longer string is cut at a rune boundary and ends with "…".
// An error that cannot be stored would leave its row unrecorded, and a
// handler's error may quote a binary body.
func Text(s string, max int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if max <= 0 || len(s) <= max {
		return s
	}
	cut := max - len("…")
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// SnoozeCount returns how often River has snoozed a job: the "snoozes"
// integer of its metadata (0 when absent or unreadable).
func SnoozeCount(metadata []byte) int {
	var meta struct {
		Snoozes int `json:"snoozes"`
	}
	if len(metadata) == 0 || json.Unmarshal(metadata, &meta) != nil {
		return 0
	}
	return max(meta.Snoozes, 0)
}

// Problems collects what is wrong with a configuration, each problem
// wrapping the package's ErrInvalidConfig-style sentinel, so that a caller
// sees every problem at once and errors.Is(err, sentinel) holds.
type Problems struct {
	sentinel error
	errs     []error
}

// NewProblems returns an empty collection whose problems wrap sentinel.
func NewProblems(sentinel error) *Problems { return &Problems{sentinel: sentinel} }

// Addf records a problem.
func (p *Problems) Addf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%w: %s", p.sentinel, fmt.Sprintf(format, args...)))
}

// Add records err, unless it is nil, wrapping the sentinel when it does not
// already.
func (p *Problems) Add(err error) {
	switch {
	case err == nil:
	case errors.Is(err, p.sentinel):
		p.errs = append(p.errs, err)
	default:
		p.errs = append(p.errs, fmt.Errorf("%w: %w", p.sentinel, err))
	}
}

// Err returns every problem joined, or nil when there is none.
func (p *Problems) Err() error { return errors.Join(p.errs...) }

// NotFound returns notFound when err is pgx.ErrNoRows (a row that does not
// exist), else err: the packages' ErrNotFound translation.
func NotFound(err, notFound error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound
	}
	return err
}

// TypeMatches reports whether eventType matches pattern, in the form of
// the outbox's endpoint filters and the inbox's source type lists: an
// exact type, "prefix.*" (every type starting "prefix."), or "*" (all).
func TypeMatches(pattern, eventType string) bool {
	if pattern == "*" {
		return true
	}
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok && strings.HasSuffix(prefix, ".") {
		return strings.HasPrefix(eventType, prefix)
	}
	return pattern == eventType
}

// ValidTypePattern reports whether pattern is a type pattern (see
// TypeMatches): "*", or a type of 1 to 256 bytes of UTF-8 without space,
// control character or "*", optionally followed by ".*".
func ValidTypePattern(pattern string) bool {
	if pattern == "*" {
		return true
	}
	t, _ := strings.CutSuffix(pattern, ".*")
	if len(t) < 1 || len(t) > 256 || !utf8.ValidString(t) {
		return false
	}
	for _, r := range t {
		if r == '*' || r == utf8.RuneError || unicode.IsSpace(r) || unicode.IsControl(r) {
			return false
		}
	}
	return true
}
