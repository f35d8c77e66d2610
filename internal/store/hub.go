package store

import (
	"sync"
	"time"

	"github.com/docket-run/docket/internal/job"
)

// Hub fans wakeups out to in-process subscribers without ever blocking the
// sender. Backends embed one to implement Store.Subscribe.
type Hub struct {
	mu   sync.Mutex
	subs map[Topic]map[chan string]struct{}
}

// Subscribe returns a channel of payloads for topic and a cancel function.
// The channel is buffered; a full channel drops the wakeup (callers poll).
func (h *Hub) Subscribe(topic Topic) (<-chan string, func()) {
	ch := make(chan string, 64)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[Topic]map[chan string]struct{})
	}
	if h.subs[topic] == nil {
		h.subs[topic] = make(map[chan string]struct{})
	}
	h.subs[topic][ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.subs[topic], ch)
			h.mu.Unlock()
		})
	}
}

// Publish sends payload to every subscriber of topic that has room.
func (h *Hub) Publish(topic Topic, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[topic] {
		select {
		case ch <- payload:
		default:
		}
	}
}

// PublishAvailable publishes TopicJobAvailable once for each queue where
// one of rows is QUEUED and due at now.
func (h *Hub) PublishAvailable(now time.Time, rows ...*job.Row) {
	var seen map[string]bool
	for _, r := range rows {
		if r == nil || r.State != job.StateQueued || r.RunAt.After(now) || seen[r.Queue] {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[r.Queue] = true
		h.Publish(TopicJobAvailable, r.Queue)
	}
}
