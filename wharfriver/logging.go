package wharfriver

import (
	"context"
	"log/slog"
	"slices"
	"strings"
)

// quietWharfJobErrors returns l without River's own info line for an error
// returned by one of Wharf's processing or delivery workers ("Job errored;
// retrying", "Job errored"): those log each failure themselves, once, with
// what River cannot know (the message or delivery, its source or endpoint,
// the handler's error or the endpoint's answer, when it is tried again),
// and River's line would repeat it without those. Every other record
// passes as it was: River's lines about the application's own jobs, and
// about Wharf's periodic jobs (rescue, upkeep, prune, rollup), which leave
// their failures to River to log.
func quietWharfJobErrors(l *slog.Logger) *slog.Logger {
	return slog.New(&quietHandler{inner: l.Handler()})
}

// quietHandler drops River's info lines about Wharf's failed jobs.
type quietHandler struct{ inner slog.Handler }

func (h *quietHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

func (h *quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn && riverJobErrored(r.Message) && wharfJob(r) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *quietHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &quietHandler{inner: h.inner.WithAttrs(attrs)}
}

func (h *quietHandler) WithGroup(name string) slog.Handler {
	return &quietHandler{inner: h.inner.WithGroup(name)}
}

// riverJobErrored reports whether msg is River's job executor's line for a
// job whose worker returned an error.
func riverJobErrored(msg string) bool {
	return strings.HasSuffix(msg, ": Job errored; retrying") || strings.HasSuffix(msg, ": Job errored")
}

// wharfJob reports whether r is about a job of Wharf's processing or
// delivery workers (wharfKinds).
func wharfJob(r slog.Record) bool {
	wharf := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "job_kind" {
			wharf = slices.Contains(wharfKinds, a.Value.String())
			return false
		}
		return true
	})
	return wharf
}
