package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/docket-run/docket/internal/webhook"
)

// sseFollower follows GET /v1/events across server kills: when its
// stream breaks it reconnects to the next server with Last-Event-ID, so
// it must see every event exactly once.
type sseFollower struct {
	r         *run
	connected chan struct{} // closed at the first 200
	once      sync.Once

	mu   sync.Mutex
	seen map[string]int
	last string
}

func newSSEFollower(r *run) *sseFollower {
	return &sseFollower{r: r, connected: make(chan struct{}), seen: map[string]int{}}
}

// follow streams until ctx ends.
func (f *sseFollower) follow(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		f.stream(ctx, f.r.urls[i%len(f.r.urls)]+"/v1/events?types=job.state_changed")
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // before trying the next server
		}
	}
}

func (f *sseFollower) stream(ctx context.Context, url string) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+f.r.adminKey)
	req.Header.Set("Accept", "text/event-stream")
	f.mu.Lock()
	if f.last != "" {
		req.Header.Set("Last-Event-ID", f.last)
	}
	f.mu.Unlock()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, res.Body)
		return
	}
	f.once.Do(func() { close(f.connected) })
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	id := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id:"):
			id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case line == "":
			if id != "" {
				f.mu.Lock()
				f.seen[id]++
				f.last = id
				f.mu.Unlock()
			}
			id = ""
		}
	}
}

func (f *sseFollower) snapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.seen)
}

// webhookReceiver is a subscriber's endpoint: it checks each delivery's
// signature and counts event ids (deliveries are at least once).
type webhookReceiver struct {
	secret string
	srv    *http.Server
	url    string

	mu     sync.Mutex
	seen   map[string]int
	badSig []string
}

func startWebhookReceiver(secret string) (*webhookReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &webhookReceiver{secret: secret, seen: map[string]int{}, url: "http://" + ln.Addr().String() + "/hook"}
	w.srv = &http.Server{Handler: http.HandlerFunc(w.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = w.srv.Serve(ln) }()
	return w, nil
}

func (w *webhookReceiver) serve(rw http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	id := req.Header.Get("X-Docket-Event-Id")
	if err := webhook.Verify(w.secret, req.Header.Get("X-Docket-Signature"), req.Header.Get("X-Docket-Timestamp"), body); err != nil {
		w.mu.Lock()
		w.badSig = append(w.badSig, fmt.Sprintf("event %s: %v", id, err))
		w.mu.Unlock()
		http.Error(rw, err.Error(), http.StatusUnauthorized)
		return
	}
	var env struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.ID != id {
		w.mu.Lock()
		w.badSig = append(w.badSig, fmt.Sprintf("event %s: body id %q (%v)", id, env.ID, err))
		w.mu.Unlock()
		http.Error(rw, "bad body", http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.seen[id]++
	w.mu.Unlock()
	rw.WriteHeader(http.StatusNoContent)
}

func (w *webhookReceiver) snapshot() (map[string]int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.seen), append([]string(nil), w.badSig...)
}

func (w *webhookReceiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.srv.Shutdown(ctx)
}
