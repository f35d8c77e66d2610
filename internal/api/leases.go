package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/remote"
)

// The remote-worker protocol: any program that speaks HTTP leases jobs,
// renews its leases, and ends each one: complete, fail, or release (give
// the job back unfinished). The lease id is the fencing token: calls with a
// lease that expired, was rescued, or belongs to an older attempt answer
// 409 and change nothing. Requests and responses are package remote's
// types, shared with the clients; the request types are redeclared here
// only to carry their validation.

func (s *Server) leaseRoutes() []route {
	action := func(a string) string { return remote.PathLeases + "/{leaseId}/" + a }
	return []route{
		{Method: "POST", Path: remote.PathLeases, Perm: permLease, Handler: endpoint(s, s.leaseAcquire)},
		{Method: "POST", Path: action(remote.ActionHeartbeat), Perm: permLease, Handler: endpoint(s, s.leaseHeartbeat)},
		{Method: "POST", Path: action(remote.ActionComplete), Perm: permLease, Handler: endpoint(s, s.leaseComplete)},
		{Method: "POST", Path: action(remote.ActionFail), Perm: permLease, Handler: endpoint(s, s.leaseFail)},
		{Method: "POST", Path: action(remote.ActionRelease), Perm: permLease, Handler: endpoint(s, s.leaseRelease)},
	}
}

// between is the message of a number outside min..max.
func between(min, max int) string { return fmt.Sprintf("must be between %d and %d", min, max) }

// leaseRequest is a lease request, with the queues of its key.
type leaseRequest struct {
	remote.LeaseRequest
	// scope: the queues of a scoped worker key (prepare), nil for a key
	// of any queue. A request naming no queue leases from these; one
	// naming others is 403 (leaseAcquire).
	scope []string
}

func (r *leaseRequest) prepare(_ *Server, hr *http.Request) {
	if k := principal(hr.Context()); k != nil {
		r.scope = k.Queues
	}
}

// Validate names every invalid field: the missing ones, then whatever
// docket.LeaseParams.Validate (the protocol's limits, queue and worker
// names) finds about the others. queues may be left out by a scoped key.
func (r *leaseRequest) Validate() error {
	var errs []FieldError
	if len(r.Queues) == 0 && r.scope == nil {
		errs = append(errs, FieldError{Field: "queues", Message: "is required: a list of at least one queue"})
	}
	if r.WorkerID == "" {
		errs = append(errs, FieldError{Field: "workerId", Message: "is required"})
	}
	if r.LeaseSeconds == nil {
		errs = append(errs, FieldError{Field: "leaseSeconds", Message: fmt.Sprintf("is required (%d..%d)", remote.LeaseSecondsMin, remote.LeaseSecondsMax)})
	}
	p := r.params()
	if err := p.Validate(); err != nil {
		errs = addFields(errs, problemFor(err).Errors...)
	}
	if len(errs) == 0 {
		return nil
	}
	return invalidFields(errs)
}

// params are the lease parameters r asks for; a missing leaseSeconds is 0.
func (r *leaseRequest) params() docket.LeaseParams {
	p := docket.LeaseParams{Queues: r.Queues, Max: 1, WorkerID: r.WorkerID}
	if len(p.Queues) == 0 && r.scope != nil {
		p.Queues = r.scope
	}
	if r.LeaseSeconds != nil {
		p.Duration = seconds(*r.LeaseSeconds)
	}
	if r.Max != nil {
		p.Max = *r.Max
	}
	if r.WaitSeconds != nil {
		p.Wait = seconds(*r.WaitSeconds)
	}
	return p
}

// seconds is n seconds as a duration, or -1 (out of every range the
// protocol takes) when n is negative or too large for a duration: n*1s
// would wrap, and 18446744079 seconds become 5.3 s, a valid lease.
func seconds(n int) time.Duration {
	if n < 0 || n > math.MaxInt64/int(time.Second) {
		return -1
	}
	return time.Duration(n) * time.Second
}

// leaseInScope refuses (403 naming leaseId) a call of a scoped key on the
// lease of a job outside its queues. The lease id's token is checked
// first and only the job's queue is read (LeaseQueue): a lease id that
// does not parse, has a wrong token or is of no job is left to the call,
// which refuses it as it would any (400, 409), so a forged id tells a
// scoped key nothing of jobs in other queues. A job's queue never
// changes, so the queue read here is the one of the job the call acts
// on. Keys of any queue read nothing.
func (s *Server) leaseInScope(ctx context.Context, leaseID string) error {
	key := principal(ctx)
	if key == nil || key.Queues == nil {
		return nil
	}
	queue, err := s.client.LeaseQueue(ctx, leaseID)
	if err != nil {
		var invalid *docket.ValidationError
		if errors.Is(err, docket.ErrNotFound) || errors.Is(err, docket.ErrLeaseLost) ||
			errors.Is(err, docket.ErrLeaseWithoutToken) || errors.As(err, &invalid) {
			return nil
		}
		return err
	}
	if !key.MayLease(queue) {
		return forbiddenField("leaseId", "the lease's job is not in a queue this key may lease from ("+strings.Join(key.Queues, ", ")+")")
	}
	return nil
}

// leaseGoneReason is the error recorded on a job whose lease was granted
// to a worker that had gone (its lease request cut) and was given back.
const leaseGoneReason = "the worker was gone when its lease was granted; given back"

// giveBackGone releases leases granted to a worker that went away (its
// request was cut: a shutdown, say) while its jobs were being leased: no
// one will run them, so they are given back at once, the attempt
// refunded, rather than left RUNNING until their leases expire (on a last
// attempt, that would end the job DEAD).
func (s *Server) giveBackGone(ctx context.Context, leases []*docket.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, l := range leases {
		if _, err := s.client.LeaseRelease(rctx, l.ID, leaseGoneReason); err != nil {
			s.cfg.Logger.Warn("give back a lease granted to a worker that was gone", "job_id", l.Job.ID, "attempt", l.Job.Attempt, "error", err)
		}
	}
}

func (s *Server) leaseAcquire(ctx context.Context, _ *http.Request, req *leaseRequest) (int, *remote.LeaseResponse, error) {
	if key := principal(ctx); key != nil {
		var outside []string
		for _, q := range req.Queues {
			if !key.MayLease(q) && !slices.Contains(outside, q) {
				outside = append(outside, q)
			}
		}
		if len(outside) > 0 {
			return 0, nil, forbiddenField("queues", fmt.Sprintf("this key may lease only from %s, not from %s",
				strings.Join(key.Queues, ", "), strings.Join(outside, ", ")))
		}
	}
	leases, err := s.client.Lease(ctx, req.params())
	if err != nil && len(leases) == 0 {
		if ctx.Err() != nil {
			// The long poll was cut short (client gone, server shutting
			// down): nothing was leased.
			return http.StatusOK, &remote.LeaseResponse{Leases: []remote.Lease{}}, nil
		}
		return 0, nil, err
	}
	if ctx.Err() != nil && len(leases) > 0 {
		s.giveBackGone(ctx, leases)
		return http.StatusOK, &remote.LeaseResponse{Leases: []remote.Lease{}}, nil
	}
	// Jobs leased before an error are returned: they are held now, and
	// dropping them would leave them to expire.
	resp := &remote.LeaseResponse{Leases: make([]remote.Lease, len(leases))}
	for i, l := range leases {
		resp.Leases[i] = remote.Lease{
			LeaseID: l.ID, JobID: l.Job.ID, JobType: l.Job.Type, Queue: l.Job.Queue,
			Payload: l.Job.Payload, Attempt: l.Job.Attempt, ExpiresAt: l.ExpiresAt,
		}
	}
	return http.StatusOK, resp, nil
}

type heartbeatRequest remote.HeartbeatRequest

func (*heartbeatRequest) bodyOptional() {}

func (r *heartbeatRequest) Validate() error {
	var errs []error
	if r.Progress != nil && (*r.Progress < 0 || *r.Progress > remote.ProgressMax) {
		errs = append(errs, invalidField("progress", between(0, remote.ProgressMax)))
	}
	if r.LeaseSeconds != nil && (*r.LeaseSeconds < remote.LeaseSecondsMin || *r.LeaseSeconds > remote.LeaseSecondsMax) {
		errs = append(errs, invalidField("leaseSeconds", between(remote.LeaseSecondsMin, remote.LeaseSecondsMax)))
	}
	if len(r.Message) > remote.MessageMaxBytes {
		errs = append(errs, invalidField("message", fmt.Sprintf("must be at most %d bytes", remote.MessageMaxBytes)))
	}
	return errors.Join(errs...)
}

func (s *Server) leaseHeartbeat(ctx context.Context, r *http.Request, req *heartbeatRequest) (int, *remote.HeartbeatResponse, error) {
	d := remote.HeartbeatLeaseSecondsDefault * time.Second
	if req.LeaseSeconds != nil {
		d = time.Duration(*req.LeaseSeconds) * time.Second
	}
	if err := s.leaseInScope(ctx, r.PathValue("leaseId")); err != nil {
		return 0, nil, err
	}
	st, err := s.client.LeaseHeartbeat(ctx, r.PathValue("leaseId"), d, req.Progress, req.Message)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, &remote.HeartbeatResponse{ExpiresAt: st.ExpiresAt, CancelRequested: st.CancelRequested}, nil
}

type completeRequest remote.CompleteRequest

func (*completeRequest) bodyOptional() {}

func statusOf(st docket.JobState) *remote.StatusResponse {
	return &remote.StatusResponse{Status: string(st)}
}

func (s *Server) leaseComplete(ctx context.Context, r *http.Request, req *completeRequest) (int, *remote.StatusResponse, error) {
	result := req.Result
	if string(result) == "null" {
		result = nil
	}
	if err := s.leaseInScope(ctx, r.PathValue("leaseId")); err != nil {
		return 0, nil, err
	}
	if err := s.client.LeaseComplete(ctx, r.PathValue("leaseId"), result); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, statusOf(docket.JobStateSuccess), nil
}

type failRequest remote.FailRequest

func (r *failRequest) Validate() error {
	var errs []error
	switch {
	case r.Error == "":
		errs = append(errs, invalidField("error", "is required: say what went wrong"))
	case len(r.Error) > remote.ErrorMaxBytes:
		errs = append(errs, invalidField("error", "must be at most 64 KiB"))
	}
	if r.Retryable == nil {
		errs = append(errs, invalidField("retryable", "is required (true or false)"))
	}
	return errors.Join(errs...)
}

func (s *Server) leaseFail(ctx context.Context, r *http.Request, req *failRequest) (int, *remote.StatusResponse, error) {
	if err := s.leaseInScope(ctx, r.PathValue("leaseId")); err != nil {
		return 0, nil, err
	}
	state, err := s.client.LeaseFail(ctx, r.PathValue("leaseId"), req.Error, *req.Retryable)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, statusOf(state), nil
}

type releaseRequest remote.ReleaseRequest

func (*releaseRequest) bodyOptional() {}

func (r *releaseRequest) Validate() error {
	if len(r.Reason) > remote.ErrorMaxBytes {
		return invalidField("reason", "must be at most 64 KiB")
	}
	return nil
}

// leaseRelease: POST /v1/leases/{leaseId}/release gives the job back
// unfinished; the attempt is refunded (up to remote.ReleaseRefundsMax
// times per job) and the job is due again at once.
func (s *Server) leaseRelease(ctx context.Context, r *http.Request, req *releaseRequest) (int, *remote.StatusResponse, error) {
	if err := s.leaseInScope(ctx, r.PathValue("leaseId")); err != nil {
		return 0, nil, err
	}
	state, err := s.client.LeaseRelease(ctx, r.PathValue("leaseId"), req.Reason)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, statusOf(state), nil
}
