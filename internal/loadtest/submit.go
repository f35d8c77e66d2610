package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// submitter sends submissions, each one POST /v1/jobs, over keep-alive
// connections; at most MaxInFlight await an answer at once.
type submitter struct {
	url   string
	key   string
	http  *http.Client
	slots chan struct{} // one per submission in flight
}

func newSubmitter(url, key string, cfg Config) *submitter {
	return &submitter{
		url: url, key: key,
		http: &http.Client{
			Timeout: cfg.RequestTimeout,
			Transport: &http.Transport{
				// Every connection opened is kept for the next request.
				MaxIdleConns:        cfg.MaxInFlight,
				MaxIdleConnsPerHost: cfg.MaxInFlight,
				IdleConnTimeout:     time.Minute,
				DisableCompression:  true,
			},
		},
		slots: make(chan struct{}, cfg.MaxInFlight),
	}
}

func (s *submitter) close() { s.http.CloseIdleConnections() }

// submitRequest is the body of POST /v1/jobs.
type submitRequest struct {
	JobType        string   `json:"jobType"`
	Queue          string   `json:"queue"`
	Payload        loadArgs `json:"payload"`
	IdempotencyKey string   `json:"idempotencyKey"`
}

// answer is how one submission ended.
type answer struct {
	at   time.Time // the answer came (or the request failed)
	kind string    // "" when accepted (2xx), else "status N" or "transport"
	text string    // what went wrong, for the report
}

// submit sends job n with the idempotency key and returns how it ended.
func (s *submitter) submit(ctx context.Context, n int, key string) answer {
	// Strings and an int: encoding cannot fail.
	body, _ := json.Marshal(submitRequest{JobType: JobType, Queue: Queue, Payload: loadArgs{N: n}, IdempotencyKey: key})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/jobs", bytes.NewReader(body))
	if err != nil {
		return answer{at: time.Now(), kind: "transport", text: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", "application/json")
	res, err := s.http.Do(req)
	if err != nil {
		return answer{at: time.Now(), kind: "transport", text: err.Error()}
	}
	// Read to the end, so the connection is reused.
	data, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	at := time.Now()
	switch {
	case err != nil:
		return answer{at: at, kind: "transport", text: "read the answer: " + err.Error()}
	case res.StatusCode/100 != 2:
		kind := fmt.Sprintf("status %d", res.StatusCode)
		return answer{at: at, kind: kind, text: kind + ": " + string(bytes.TrimSpace(data))}
	}
	return answer{at: at}
}
