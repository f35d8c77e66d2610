package api

import (
	"context"
	"net/http"

	"github.com/docket-run/docket"
)

func (s *Server) queueRoutes() []route {
	return []route{
		{Method: "GET", Path: "/v1/queues", Perm: permRead, Query: []string{"limit", "cursor"}, Handler: endpoint(s, s.listQueues)},
		{Method: "POST", Path: "/v1/queues/{queue}/pause", Perm: permAdmin, Handler: endpoint(s, s.pauseQueue)},
		{Method: "POST", Path: "/v1/queues/{queue}/resume", Perm: permAdmin, Handler: endpoint(s, s.resumeQueue)},
	}
}

// queueView is a queue with its pause flag and a count for every state;
// CountsAtLeast names the states whose count is a lower bound (its capped
// read stopped at CountCap+1 jobs).
type queueView struct {
	Name          string            `json:"name"`
	Paused        bool              `json:"paused"`
	Counts        stateCounts       `json:"counts"`
	CountsAtLeast []docket.JobState `json:"countsAtLeast"`
}

type queuesResponse struct {
	Items    []*queueView `json:"items"`
	CountCap int          `json:"countCap"`
	// NextCursor fetches the next page; null on the last one.
	NextCursor *string `json:"nextCursor"`
}

// listQueues pages through the queues that have jobs or are paused, by
// name, with capped counts (Client.QueueList): no count grows with the
// jobs table. The cursor is the last name of the previous page: a queue
// made meanwhile shows on a later page or not at all, never twice.
func (s *Server) listQueues(ctx context.Context, r *http.Request, _ *Empty) (int, *queuesResponse, error) {
	q, errs := query(r)
	p := docket.QueueListParams{Cap: CountCap}
	limit, err := queryLimit(q.Get("limit"), q.Has("limit"))
	if err != nil {
		errs = append(errs, problemFor(err).Errors...)
	}
	if q.Has("cursor") {
		name, err := decodeQueueCursor(q.Get("cursor"))
		if err != nil {
			errs = append(errs, problemFor(err).Errors...)
		}
		p.After = name
	}
	if err := queryErrors(errs); err != nil {
		return 0, nil, err
	}
	p.Limit = limit + 1 // one more tells whether there is a next page
	queues, err := s.client.QueueList(ctx, p)
	if err != nil {
		return 0, nil, err
	}
	resp := &queuesResponse{CountCap: CountCap}
	if len(queues) > limit {
		queues = queues[:limit]
		next := encodeNameCursor(queues[limit-1].Name)
		resp.NextCursor = &next
	}
	resp.Items = make([]*queueView, len(queues))
	for i, q := range queues {
		counts := newStateCounts()
		for st, n := range q.Counts {
			counts[st] += n
		}
		v := &queueView{Name: q.Name, Paused: q.Paused, Counts: counts, CountsAtLeast: []docket.JobState{}}
		for _, st := range docket.JobStates() {
			if q.AtLeast[st] {
				v.CountsAtLeast = append(v.CountsAtLeast, st)
			}
		}
		resp.Items[i] = v
	}
	return http.StatusOK, resp, nil
}

// pauseResponse is a queue's pause flag after a pause or resume.
type pauseResponse struct {
	Name   string `json:"name"`
	Paused bool   `json:"paused"`
}

func (s *Server) pauseQueue(ctx context.Context, r *http.Request, _ *Empty) (int, *pauseResponse, error) {
	return s.setPaused(ctx, r, true)
}

func (s *Server) resumeQueue(ctx context.Context, r *http.Request, _ *Empty) (int, *pauseResponse, error) {
	return s.setPaused(ctx, r, false)
}

// setPaused pauses or resumes the {queue} of the path; doing it twice is
// the same as doing it once.
func (s *Server) setPaused(ctx context.Context, r *http.Request, paused bool) (int, *pauseResponse, error) {
	name := r.PathValue("queue")
	if err := docket.CheckName("queue", name); err != nil {
		return 0, nil, err
	}
	set := s.client.ResumeQueue
	if paused {
		set = s.client.PauseQueue
	}
	if err := set(ctx, name); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, &pauseResponse{Name: name, Paused: paused}, nil
}

// decodeQueueCursor decodes a name cursor (encodeNameCursor) whose name
// is one a queue can have.
func decodeQueueCursor(s string) (string, error) {
	name, err := decodeAnyNameCursor(s)
	if err != nil || docket.CheckName("queue", name) != nil {
		return "", invalidField("cursor", "is not a cursor this server returned")
	}
	return name, nil
}
