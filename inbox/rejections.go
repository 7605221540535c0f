package inbox

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// defaultRejectionLogInterval is Config.RejectionLogInterval's default.
const defaultRejectionLogInterval = 10 * time.Second

// rejectionLog logs rejected requests at info, at most one line per
// source and result per interval; the lines it holds back are counted and
// reported with the next one. Its keys are configured source names (or
// UnknownSourceLabel) and fixed results: it cannot grow at a sender's will.
type rejectionLog struct {
	logger   *slog.Logger
	interval time.Duration

	mu   sync.Mutex
	last map[[2]string]*rejectionState
}

type rejectionState struct {
	at         time.Time
	suppressed int
}

func newRejectionLog(logger *slog.Logger, interval time.Duration) *rejectionLog {
	return &rejectionLog{logger: logger, interval: interval, last: map[[2]string]*rejectionState{}}
}

// log records a rejected request: its source label, result and the
// client's address, never its body or headers.
func (l *rejectionLog) log(ctx context.Context, source, result, remote string, status int) {
	key := [2]string{source, result}
	now := time.Now()
	l.mu.Lock()
	st := l.last[key]
	if st == nil {
		st = &rejectionState{}
		l.last[key] = st
	}
	if l.interval > 0 && !st.at.IsZero() && now.Sub(st.at) < l.interval {
		st.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := st.suppressed
	st.at, st.suppressed = now, 0
	l.mu.Unlock()
	l.logger.InfoContext(ctx, "inbox: request rejected",
		"source", source, "result", result, "status", status, "remote_addr", remote, "suppressed_since_last", suppressed)
}
