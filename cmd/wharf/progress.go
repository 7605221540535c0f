package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// libraryLogger is the logger the commands give the library's components:
// warnings reach the operator; the library's per-message lines do not
// interleave with the command's own output, and its errors come back as
// the command's error, printed once.
func (e *env) libraryLogger() *slog.Logger {
	return slog.New(warningsOnly{slog.NewTextHandler(e.errOut, &slog.HandlerOptions{Level: slog.LevelWarn})})
}

// warningsOnly passes a handler the records below slog.LevelError.
type warningsOnly struct{ slog.Handler }

func (w warningsOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l < slog.LevelError && w.Handler.Enabled(ctx, l)
}

func (w warningsOnly) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warningsOnly{w.Handler.WithAttrs(attrs)}
}

func (w warningsOnly) WithGroup(name string) slog.Handler {
	return warningsOnly{w.Handler.WithGroup(name)}
}

// progress reports a bulk operation's counts as they grow: on a terminal,
// one line rewritten in place; elsewhere (a log, a pipe) nothing, the
// command's summary line being the one line there.
type progress struct {
	w      io.Writer // nil: not a terminal
	format string
	shown  bool
}

func (e *env) progress(format string) *progress {
	p := &progress{format: format}
	if terminal(e.errOut) {
		p.w = e.errOut
	}
	return p
}

// update shows the counts so far.
func (p *progress) update(counts ...any) {
	if p.w == nil {
		return
	}
	fmt.Fprintf(p.w, "\r\033[K"+p.format, counts...)
	p.shown = true
}

// done ends the progress line, leaving the last counts on screen.
func (p *progress) done() {
	if p.shown {
		fmt.Fprintln(p.w)
	}
}

// terminal reports whether w is a terminal.
func terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
