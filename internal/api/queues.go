package api

import (
	"context"
	"net/http"

	"github.com/docket-run/docket"
)

func (s *Server) queueRoutes() []route {
	return []route{
		{Method: "GET", Path: "/v1/queues", Perm: permRead, Handler: endpoint(s, s.listQueues)},
		{Method: "POST", Path: "/v1/queues/{queue}/pause", Perm: permAdmin, Handler: endpoint(s, s.pauseQueue)},
		{Method: "POST", Path: "/v1/queues/{queue}/resume", Perm: permAdmin, Handler: endpoint(s, s.resumeQueue)},
	}
}

// queueView is a queue with its pause flag and a count for every state.
type queueView struct {
	Name   string      `json:"name"`
	Paused bool        `json:"paused"`
	Counts stateCounts `json:"counts"`
}

type queuesResponse struct {
	Items []*queueView `json:"items"`
}

// listQueues lists every queue that has jobs or was ever paused.
func (s *Server) listQueues(ctx context.Context, _ *http.Request, _ *Empty) (int, *queuesResponse, error) {
	queues, err := s.client.Queues(ctx)
	if err != nil {
		return 0, nil, err
	}
	resp := &queuesResponse{Items: make([]*queueView, len(queues))}
	for i, q := range queues {
		counts := newStateCounts()
		for st, n := range q.Counts {
			counts[st] += n
		}
		resp.Items[i] = &queueView{Name: q.Name, Paused: q.Paused, Counts: counts}
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
