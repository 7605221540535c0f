package delivery

import (
	"context"
	"encoding/json"
	"math"
	"sync/atomic"
	"time"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// wake is River's insert notification for the delivery jobs a publish
// statement writes itself (see InlineJobs): it wakes a worker at once,
// where the jobs would otherwise wait for the workers' next poll.
//
// A NOTIFY in a transaction serializes its commit with every other
// notifying commit of the server (Postgres takes a server-wide lock before
// the commit and holds it to the end, WAL flush included): publishing one
// event per transaction from 32 goroutines, a notification in every
// transaction that found none in the last millisecond cost a quarter of
// the rate. So a publish asks for it in its own transaction only when
// none did in the last wakeInterval. The others are covered by
// notifications sent on their own (no WAL flush to wait for): one
// wakeInterval after the last publish that did not notify (while publishes
// keep coming, the in-transaction ones every wakeInterval serve), and one
// wakeLate after that, for transactions that commit a while after their
// publish. A job committed later still waits for the next notification or
// the workers' poll.
type wake struct {
	queries  *dbsqlc.Queries // on the pool
	topic    string
	payload  string
	interval time.Duration
	late     time.Duration
	start    time.Time // times are durations since, on the monotonic clock

	last      atomic.Int64 // when a publish last notified in its transaction
	due       atomic.Int64 // when the notification on its own is due
	armed     atomic.Bool  // its timer is set
	lateArmed atomic.Bool  // the late one's timer is set
}

const (
	// wakeInterval is how often at most a publish's own transaction
	// notifies, and how long after the last publish that did not the
	// notification on its own goes.
	wakeInterval = 5 * time.Millisecond
	// wakeLate is how long after that a second one goes.
	wakeLate = 50 * time.Millisecond
	// wakeTimeout bounds a notification sent on its own.
	wakeTimeout = time.Second
)

// riverInsertTopic is River's LISTEN/NOTIFY topic of job inserts: its
// channel is the schema's name, a dot and the topic.
const riverInsertTopic = "river_insert"

func newWake(queries *dbsqlc.Queries, queue string) *wake {
	payload, _ := json.Marshal(struct {
		Queue string `json:"queue"`
	}{queue})
	w := &wake{queries: queries, topic: riverInsertTopic, payload: string(payload),
		interval: wakeInterval, late: wakeLate, start: time.Now()}
	w.last.Store(math.MinInt64 / 2) // the first publish notifies
	return w
}

func (w *wake) now() int64 { return int64(time.Since(w.start)) }

// inTx reports whether the publish about to run notifies in its own
// transaction; if not, it is covered by notifications on their own.
func (w *wake) inTx() bool {
	now := w.now()
	for last := w.last.Load(); now-last >= int64(w.interval); last = w.last.Load() {
		if w.last.CompareAndSwap(last, now) {
			return true
		}
	}
	w.due.Store(now + int64(w.interval))
	if w.armed.CompareAndSwap(false, true) {
		time.AfterFunc(w.interval, w.fire)
	}
	return false
}

// fire sends the notification on its own once it is due, and readies
// the late one.
func (w *wake) fire() {
	if wait := w.due.Load() - w.now(); wait > 0 {
		time.AfterFunc(time.Duration(wait), w.fire) // a publish since pushed it back
		return
	}
	w.armed.Store(false)
	w.send()
	if w.due.Load() > w.now() && w.armed.CompareAndSwap(false, true) {
		// A publish came between the check and the disarm.
		time.AfterFunc(w.interval, w.fire)
	}
	if w.lateArmed.CompareAndSwap(false, true) {
		time.AfterFunc(w.late, func() {
			w.lateArmed.Store(false)
			w.send()
		})
	}
}

// send sends the notification on its own. Should it fail, the workers'
// poll finds the jobs.
func (w *wake) send() {
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	_ = w.queries.RiverNotifyInsert(ctx, dbsqlc.RiverNotifyInsertParams{Topic: w.topic, Payload: w.payload})
}
