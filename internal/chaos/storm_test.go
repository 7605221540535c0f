package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wharfhq/wharf/signature"
)

// chaosSecret is the Standard Webhooks secret the nodes are given
// (WHARF_EXAMPLE_SECRET) and the senders sign with.
const chaosSecret = "whsec_d2hhcmYtY2hhb3Mtc3VpdGUtc2lnbmluZy1zZWNyZXQ="

// event is one distinct payment event. Each goes to an account of its own,
// so its account's balance tells how many times it was applied.
type event struct {
	id      string
	account string
	amount  int64
	body    []byte
}

func newEvent(run string, i int) event {
	ev := event{id: fmt.Sprintf("evt_%s_%d", run, i), account: fmt.Sprintf("acct_%s_%d", run, i), amount: int64(100 + i%900)}
	ev.body = fmt.Appendf(nil, `{"type":"payment.succeeded","data":{"account":%q,"amount":%d}}`, ev.account, ev.amount)
	return ev
}

// sender delivers events the way a webhook provider does: each delivery
// is retried, with backoff and across nodes, until some node answers 200.
// It counts every answer.
type sender struct {
	nodes  []*node
	client *http.Client
	halted chan struct{} // closed by halt: deliveries give up
	once   sync.Once

	requests atomic.Int64

	mu         sync.Mutex
	statuses   map[int]int // HTTP status → answers
	transport  int         // requests without an HTTP answer (refused, reset, timeout)
	unexpected []string    // answers that are neither 200 nor 503, or a 200 for another event
	acked      map[string]bool
	ackedBy    []int // 200s per node
	window     *window
}

// window counts answers while a fault is in effect.
type window struct {
	statuses  map[int]int
	transport int
}

func newSender(nodes []*node) *sender {
	return &sender{
		nodes:    nodes,
		halted:   make(chan struct{}),
		client:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second},
		statuses: map[int]int{},
		acked:    map[string]bool{},
		ackedBy:  make([]int, len(nodes)),
	}
}

// gate holds the storm back before delivery number at until the fault
// placed there has begun, so that every fault lands mid-storm whatever the
// machine's speed, and the deliveries after it run during it.
type gate struct {
	at      int
	reached chan struct{} // closed when the storm is held at the gate
	release chan struct{} // closed by the fault once it has begun
}

func newGate(at int) *gate {
	return &gate{at: at, reached: make(chan struct{}), release: make(chan struct{})}
}

// storm delivers copies of each event, copies of one event concurrently
// and each first to a different node, from senders goroutines, and returns
// when every delivery is acknowledged or deadline has passed, or after
// halt.
func (s *sender) storm(events []event, copies, senders int, deadline time.Time, gates []*gate) {
	type delivery struct{ ev, copy int }
	work := make(chan delivery)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				s.deliver(events[d.ev], d.ev+d.copy, deadline)
			}
		}()
	}
	defer wg.Wait()
	defer close(work)
	n := 0
	for i := range events {
		for c := range copies {
			for _, g := range gates {
				if g.at == n {
					close(g.reached)
					select {
					case <-g.release:
					case <-s.halted:
						return
					}
				}
			}
			n++
			select {
			case work <- delivery{i, c}:
			case <-s.halted:
				return
			}
		}
	}
}

// deliver sends ev, starting at node first and moving on to the next node
// after each failure, until a 200 or the deadline.
func (s *sender) deliver(ev event, first int, deadline time.Time) bool {
	backoff := 20 * time.Millisecond
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		i := (first + attempt) % len(s.nodes)
		if s.send(ev, i) {
			return true
		}
		select {
		case <-s.halted:
			return false
		case <-time.After(backoff/2 + rand.N(backoff)): // a sender's retry backoff, with jitter
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
	return false
}

// send makes one signed request (a fresh timestamp each time, like a
// provider's retry) and reports whether it was acknowledged.
func (s *sender) send(ev event, i int) bool {
	header, err := signature.SignStandardWebhooks([]string{chaosSecret}, ev.id, time.Now(), ev.body)
	if err != nil {
		panic(err) // a constant, valid secret
	}
	req, err := http.NewRequest(http.MethodPost, s.nodes[i].url()+"/webhooks/payments", bytes.NewReader(ev.body))
	if err != nil {
		panic(err)
	}
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	s.requests.Add(1)
	resp, err := s.client.Do(req)
	if err != nil {
		s.record(ev, i, 0, nil)
		return false
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		s.record(ev, i, 0, nil)
		return false
	}
	return s.record(ev, i, resp.StatusCode, body)
}

// record counts one answer (status 0: none) and reports whether it
// acknowledges ev.
func (s *sender) record(ev event, i, status int, body []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if status == 0 {
		s.transport++
		if s.window != nil {
			s.window.transport++
		}
		return false
	}
	s.statuses[status]++
	if s.window != nil {
		s.window.statuses[status]++
	}
	switch status {
	case http.StatusOK:
		var answer struct {
			Status  string `json:"status"`
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(body, &answer); err != nil || answer.EventID != ev.id ||
			(answer.Status != "accepted" && answer.Status != "duplicate") {
			s.unexpected = append(s.unexpected, fmt.Sprintf("200 for %s from %s: %s", ev.id, s.nodes[i].name, body))
			return false
		}
		s.acked[ev.id] = true
		s.ackedBy[i]++
		return true
	case http.StatusServiceUnavailable:
	default:
		s.unexpected = append(s.unexpected, fmt.Sprintf("%d for %s from %s: %s", status, ev.id, s.nodes[i].name, body))
	}
	return false
}

// halt makes every delivery give up.
func (s *sender) halt() { s.once.Do(func() { close(s.halted) }) }

// openWindow starts counting answers separately; closeWindow returns them.
func (s *sender) openWindow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.window = &window{statuses: map[int]int{}}
}

func (s *sender) closeWindow() *window {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.window
	s.window = nil
	return w
}

func (s *sender) acks(i int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ackedBy[i]
}

func (s *sender) isAcked(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked[id]
}

// statusSummary is e.g. "200:912,503:40,none:7".
func (s *sender) statusSummary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return formatStatuses(s.statuses, s.transport)
}

func formatStatuses(statuses map[int]int, transport int) string {
	codes := make([]int, 0, len(statuses))
	for c := range statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d:%d", c, statuses[c]))
	}
	parts = append(parts, fmt.Sprintf("none:%d", transport))
	return strings.Join(parts, ",")
}
