package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// The remote-worker protocol: any program that speaks HTTP leases jobs,
// renews its leases, and reports each job's end. The lease id is the fencing
// token: calls with a lease that expired, was rescued, or belongs to an
// older attempt answer 409 and change nothing.

// heartbeatLeaseDefault is the lease a heartbeat grants when it names none.
const heartbeatLeaseDefault = 30 * time.Second

func (s *Server) leaseRoutes() []route {
	return []route{
		{Method: "POST", Path: "/v1/leases", Perm: permLease, Handler: endpoint(s, s.leaseAcquire)},
		{Method: "POST", Path: "/v1/leases/{leaseId}/heartbeat", Perm: permLease, Handler: endpoint(s, s.leaseHeartbeat)},
		{Method: "POST", Path: "/v1/leases/{leaseId}/complete", Perm: permLease, Handler: endpoint(s, s.leaseComplete)},
		{Method: "POST", Path: "/v1/leases/{leaseId}/fail", Perm: permLease, Handler: endpoint(s, s.leaseFail)},
	}
}

type leaseRequest struct {
	Queues       []string `json:"queues"`
	Max          *int     `json:"max"`
	WaitSeconds  *int     `json:"waitSeconds"`
	LeaseSeconds *int     `json:"leaseSeconds"`
	WorkerID     string   `json:"workerId"`
}

func (r *leaseRequest) Validate() error {
	if len(r.Queues) == 0 {
		return invalidField("queues", "is required: a list of at least one queue")
	}
	if r.WorkerID == "" {
		return invalidField("workerId", "is required")
	}
	if r.LeaseSeconds == nil {
		return invalidField("leaseSeconds", "is required (5..3600)")
	}
	return nil
}

func (r *leaseRequest) params() docket.LeaseParams {
	p := docket.LeaseParams{Queues: r.Queues, Max: 1, WorkerID: r.WorkerID, Duration: time.Duration(*r.LeaseSeconds) * time.Second}
	if r.Max != nil {
		p.Max = *r.Max
	}
	if r.WaitSeconds != nil {
		p.Wait = time.Duration(*r.WaitSeconds) * time.Second
	}
	return p
}

type leaseView struct {
	LeaseID   string          `json:"leaseId"`
	JobID     uuid.UUID       `json:"jobId"`
	JobType   string          `json:"jobType"`
	Queue     string          `json:"queue"`
	Payload   json.RawMessage `json:"payload"`
	Attempt   int             `json:"attempt"`
	ExpiresAt time.Time       `json:"expiresAt"`
}

type leaseResponse struct {
	Leases []leaseView `json:"leases"`
}

func (s *Server) leaseAcquire(ctx context.Context, _ *http.Request, req *leaseRequest) (int, *leaseResponse, error) {
	leases, err := s.client.Lease(ctx, req.params())
	if err != nil && len(leases) == 0 {
		if ctx.Err() != nil {
			// The long poll was cut short (client gone, server shutting
			// down): nothing was leased.
			return http.StatusOK, &leaseResponse{Leases: []leaseView{}}, nil
		}
		return 0, nil, err
	}
	// Jobs leased before an error are returned: they are held now, and
	// dropping them would leave them to expire.
	resp := &leaseResponse{Leases: make([]leaseView, len(leases))}
	for i, l := range leases {
		resp.Leases[i] = leaseView{
			LeaseID: l.ID, JobID: l.Job.ID, JobType: l.Job.Type, Queue: l.Job.Queue,
			Payload: l.Job.Payload, Attempt: l.Job.Attempt, ExpiresAt: l.ExpiresAt,
		}
	}
	return http.StatusOK, resp, nil
}

type heartbeatRequest struct {
	Progress     *float64 `json:"progress"`
	Message      string   `json:"message"`
	LeaseSeconds *int     `json:"leaseSeconds"`
}

func (*heartbeatRequest) bodyOptional() {}

func (r *heartbeatRequest) Validate() error {
	if r.Progress != nil && (*r.Progress < 0 || *r.Progress > 100) {
		return invalidField("progress", "must be between 0 and 100")
	}
	if r.LeaseSeconds != nil && (*r.LeaseSeconds < 5 || *r.LeaseSeconds > 3600) {
		return invalidField("leaseSeconds", "must be between 5 and 3600")
	}
	if len(r.Message) > 1000 {
		return invalidField("message", "must be at most 1000 bytes")
	}
	return nil
}

type heartbeatResponse struct {
	ExpiresAt       time.Time `json:"expiresAt"`
	CancelRequested bool      `json:"cancelRequested"`
}

func (s *Server) leaseHeartbeat(ctx context.Context, r *http.Request, req *heartbeatRequest) (int, *heartbeatResponse, error) {
	d := heartbeatLeaseDefault
	if req.LeaseSeconds != nil {
		d = time.Duration(*req.LeaseSeconds) * time.Second
	}
	st, err := s.client.LeaseHeartbeat(ctx, r.PathValue("leaseId"), d, req.Progress, req.Message)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, &heartbeatResponse{ExpiresAt: st.ExpiresAt, CancelRequested: st.CancelRequested}, nil
}

type completeRequest struct {
	Result json.RawMessage `json:"result"`
}

func (*completeRequest) bodyOptional() {}

type statusResponse struct {
	Status docket.JobState `json:"status"`
}

func (s *Server) leaseComplete(ctx context.Context, r *http.Request, req *completeRequest) (int, *statusResponse, error) {
	result := req.Result
	if string(result) == "null" {
		result = nil
	}
	if err := s.client.LeaseComplete(ctx, r.PathValue("leaseId"), result); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, &statusResponse{Status: docket.JobStateSuccess}, nil
}

type failRequest struct {
	Error     string `json:"error"`
	Retryable *bool  `json:"retryable"`
}

func (r *failRequest) Validate() error {
	if r.Error == "" {
		return invalidField("error", "is required: say what went wrong")
	}
	if len(r.Error) > 64<<10 {
		return invalidField("error", "must be at most 64 KiB")
	}
	if r.Retryable == nil {
		return invalidField("retryable", "is required (true or false)")
	}
	return nil
}

func (s *Server) leaseFail(ctx context.Context, r *http.Request, req *failRequest) (int, *statusResponse, error) {
	state, err := s.client.LeaseFail(ctx, r.PathValue("leaseId"), req.Error, *req.Retryable)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, &statusResponse{Status: state}, nil
}
