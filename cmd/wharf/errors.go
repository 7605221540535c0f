package main

import (
	"regexp"
	"strings"
	"time"

	"github.com/wharfhq/wharf/internal/ops"
)

// usageError is a mistake in the command line (exit code 2).
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

// flagOfField names the flag that sets a library's configuration field, so
// that an error about the field speaks of the flag the operator typed.
var flagOfField = map[string]string{
	"DedupeWindow":        "-dedupe-window",
	"InboxRetention":      "-inbox-retention",
	"OutboxRetention":     "-outbox-retention",
	"AttemptRetention":    "-attempt-retention",
	"DeadLetterRetention": "-dead-letter-retention",
	"ErasedKeyRetention":  "-erased-key-retention",
	"ScrubAfter":          "-scrub-after",
	"AuditRetention":      "-audit-retention",
	"BatchSize":           "-batch-size",
	"MaxInFlight":         "-max-in-flight",
}

var (
	// packagePrefixes matches the package names that library errors start
	// with, once or repeated at each wrapping ("outbox: invalid endpoint:
	// outbox: …"): wharf's own prefix stands for them all.
	packagePrefixes = regexp.MustCompile(`(^|: )(?:(?:wharf|inbox|outbox|jobs|dashboard|signature|idempotency|portal): )+`)
	// fieldNames matches the library fields of flagOfField.
	fieldNames = regexp.MustCompile(`\b(?:Config\.)?(` + strings.Join(keys(flagOfField), "|") + `)\b`)
	// goDurations matches time.Duration's String() forms with zero units
	// ("72h0m0s", "1m30s"), which ops.Duration writes shorter.
	goDurations = regexp.MustCompile(`\b\d+h\d+m\d+(?:\.\d+)?s\b|\b\d+m\d+(?:\.\d+)?s\b`)
)

// describe writes err for the operator on one line: without the library's
// package prefixes (wharf prints its own, once), naming flags instead of
// library fields, and durations as the flags take them.
func describe(err error) string {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	msg = packagePrefixes.ReplaceAllString(msg, "$1")
	msg = fieldNames.ReplaceAllStringFunc(msg, func(m string) string {
		return flagOfField[strings.TrimPrefix(m, "Config.")]
	})
	return goDurations.ReplaceAllStringFunc(msg, func(m string) string {
		d, err := time.ParseDuration(m)
		if err != nil {
			return m
		}
		return ops.Duration(d)
	})
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
