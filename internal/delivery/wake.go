package delivery

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// wake is River's insert notification for the delivery jobs a publish
// statement writes itself (see InlineJobs): it wakes a worker at once,
// where the jobs would otherwise wait for the workers' next poll.
//
// A NOTIFY in a transaction serializes its commit with every other
// notifying commit (Postgres holds the notification queue's lock through
// the commit, its WAL flush included): publishing one event per
// transaction from 32 goroutines, a notification in every transaction
// that found none in the last millisecond cost a quarter of the rate. So
// a publish asks for it in its own transaction only when none was sent in
// the last wakeInterval; one within the interval is covered by a
// notification sent on its own (no WAL to flush) at the interval's end,
// by when its transaction has most likely committed (a later commit waits
// for the next notification or poll).
type wake struct {
	queries  *dbsqlc.Queries // on the pool
	topic    string
	payload  string
	interval time.Duration
	last     atomic.Int64 // when the last notification was asked for, in Unix nanoseconds
	trailing atomic.Bool  // a notification on its own is due
}

// wakeInterval is how often at most a publish's own transaction notifies.
const wakeInterval = 5 * time.Millisecond

// wakeTimeout bounds a notification sent on its own.
const wakeTimeout = time.Second

// riverInsertTopic is River's LISTEN/NOTIFY topic of job inserts: its
// channel is the schema's name, a dot and the topic.
const riverInsertTopic = "river_insert"

func newWake(queries *dbsqlc.Queries, queue string) *wake {
	payload, _ := json.Marshal(struct {
		Queue string `json:"queue"`
	}{queue})
	return &wake{queries: queries, topic: riverInsertTopic, payload: string(payload), interval: wakeInterval}
}

// inTx reports whether the publish about to run notifies in its own
// transaction; if not, a notification on its own is due at the end of
// the interval.
func (w *wake) inTx() bool {
	now := time.Now().UnixNano()
	last := w.last.Load()
	if now-last >= int64(w.interval) && w.last.CompareAndSwap(last, now) {
		return true
	}
	if w.trailing.CompareAndSwap(false, true) {
		time.AfterFunc(time.Duration(last+int64(w.interval)-now), w.send)
	}
	return false
}

// send sends the notification on its own. Should it fail, the workers'
// poll finds the jobs.
func (w *wake) send() {
	w.last.Store(time.Now().UnixNano())
	w.trailing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	_ = w.queries.RiverNotifyInsert(ctx, dbsqlc.RiverNotifyInsertParams{Topic: w.topic, Payload: w.payload})
}
