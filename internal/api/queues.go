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
}

// listQueues lists every queue that has jobs or is paused, with
// capped counts (Client.QueueCounts): no count grows with the jobs table.
func (s *Server) listQueues(ctx context.Context, r *http.Request, _ *Empty) (int, *queuesResponse, error) {
	queues, err := s.client.QueueCounts(ctx, CountCap)
	if err != nil {
		return 0, nil, err
	}
	resp := &queuesResponse{Items: make([]*queueView, len(queues)), CountCap: CountCap}
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
