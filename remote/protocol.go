// Package remote is the client side of docket's HTTP API for programs
// that work jobs in another process: the remote-worker lease protocol as
// typed requests and responses, its limits, and a Client that speaks it.
// The server (docket serve) decodes the same types, so the two sides
// cannot disagree on a field name or a limit.
//
// The package depends on the standard library and github.com/google/uuid
// only: a worker built on it links no database driver and no NATS.
//
// A worker leases jobs, renews each lease while it works, and ends each
// lease exactly once: Complete, Fail, or Release (hand the job back
// untouched, e.g. when the worker shuts down). The lease id is the fencing
// token: once a lease expired and its job was rescued, or the job moved
// on, every call with it answers 409 (IsLeaseLost) and changes nothing.
package remote

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Limits of the lease protocol. The server refuses requests outside them
// (400 naming the field).
const (
	// LeaseSecondsMin and LeaseSecondsMax bound leaseSeconds of a lease
	// request and of a heartbeat.
	LeaseSecondsMin = 5
	LeaseSecondsMax = 3600
	// HeartbeatLeaseSecondsDefault is the lease a heartbeat grants when it
	// names none.
	HeartbeatLeaseSecondsDefault = 30
	// LeaseMaxJobs is the most jobs one lease request may take (max).
	LeaseMaxJobs = 100
	// LeaseQueuesMax is the most queues one lease request may name: the
	// server looks at each in turn, every round of a long poll.
	LeaseQueuesMax = 100
	// WaitSecondsMax bounds waitSeconds, the long poll of a lease request.
	WaitSecondsMax = 30
	// ProgressMax: progress is a percentage, 0..ProgressMax.
	ProgressMax = 100
	// MessageMaxBytes bounds a heartbeat's progress message.
	MessageMaxBytes = 1000
	// ErrorMaxBytes bounds the error of a fail and the reason of a release.
	ErrorMaxBytes = 64 << 10
	// ReleaseRefundsMax bounds the refunds of one job: a release refunds
	// the attempt (it does not count against maxAttempts) while the job
	// has had fewer than ReleaseRefundsMax refunded interruptions in its
	// life; past that a release counts as a failed attempt (outcome error,
	// RETRY after backoff, DEAD when no attempt remains), so a worker that
	// always gives a job back cannot loop it forever.
	ReleaseRefundsMax = 25
)

// Paths of the lease protocol, relative to the server's base URL.
const (
	PathLeases = "/v1/leases"
	// The per-lease actions are PathLeases + "/" + leaseID + "/" + one of
	// these.
	ActionHeartbeat = "heartbeat"
	ActionComplete  = "complete"
	ActionFail      = "fail"
	ActionRelease   = "release"
)

// RedactLeasePath is path as logs and errors show it: the token of a lease
// id (PathLeases + "/<job id>.<attempt>.<token>/" + action) proves the
// lease to whoever holds it, so it is replaced by "xxxxx"; the job id and
// the attempt stay. Any other path is returned as it is.
func RedactLeasePath(path string) string {
	rest, ok := strings.CutPrefix(path, PathLeases+"/")
	if !ok {
		return path
	}
	id, action, hasAction := strings.Cut(rest, "/")
	parts := strings.SplitN(id, ".", 3)
	if len(parts) < 3 {
		return path
	}
	out := PathLeases + "/" + parts[0] + "." + parts[1] + ".xxxxx"
	if hasAction {
		out += "/" + action
	}
	return out
}

// LeaseRequest is the body of POST /v1/leases: take up to Max due jobs of
// Queues for LeaseSeconds, waiting up to WaitSeconds when none is due.
// Pointer fields tell "absent" from zero; Int makes one.
type LeaseRequest struct {
	// Queues to lease from, 1..LeaseQueuesMax; required, but for a key
	// scoped to queues, for which none means all of the key's (and
	// another queue is refused, 403).
	Queues []string `json:"queues"`
	// Max jobs to take, 1..LeaseMaxJobs; default 1.
	Max *int `json:"max,omitempty"`
	// WaitSeconds: long-poll this long when nothing is due,
	// 0..WaitSecondsMax; default 0.
	WaitSeconds *int `json:"waitSeconds,omitempty"`
	// LeaseSeconds: the lease, LeaseSecondsMin..LeaseSecondsMax; required.
	LeaseSeconds *int `json:"leaseSeconds"`
	// WorkerID is recorded as the jobs' holder and in their attempts.
	WorkerID string `json:"workerId"`
}

// Lease is one job leased to the caller until ExpiresAt.
type Lease struct {
	// LeaseID ("<job id>.<attempt>.<token>", opaque: pass it back as it
	// is) names the lease in every later call; its token proves the lease
	// was given to this worker.
	LeaseID   string          `json:"leaseId"`
	JobID     uuid.UUID       `json:"jobId"`
	JobType   string          `json:"jobType"`
	Queue     string          `json:"queue"`
	Payload   json.RawMessage `json:"payload"`
	Attempt   int             `json:"attempt"`
	ExpiresAt time.Time       `json:"expiresAt"`
}

// LeaseResponse answers a LeaseRequest; Leases is empty (not null) when
// nothing was due within the wait.
type LeaseResponse struct {
	Leases []Lease `json:"leases"`
}

// HeartbeatRequest is the body of POST /v1/leases/{leaseId}/heartbeat:
// renew the lease for LeaseSeconds (default HeartbeatLeaseSecondsDefault)
// and record Progress and Message when either is set: a Message without
// Progress keeps the job's progress.
type HeartbeatRequest struct {
	Progress     *float64 `json:"progress,omitempty"`
	Message      string   `json:"message,omitempty"`
	LeaseSeconds *int     `json:"leaseSeconds,omitempty"`
}

// HeartbeatResponse says until when the lease holds, and whether the job
// was canceled: then stop working on it and Fail it.
type HeartbeatResponse struct {
	ExpiresAt       time.Time `json:"expiresAt"`
	CancelRequested bool      `json:"cancelRequested"`
}

// CompleteRequest is the body of POST /v1/leases/{leaseId}/complete: the
// job succeeded with Result (any JSON; absent for none).
type CompleteRequest struct {
	Result json.RawMessage `json:"result,omitempty"`
}

// FailRequest is the body of POST /v1/leases/{leaseId}/fail. Retryable
// failures are retried after backoff while attempts remain; others end the
// job DEAD. Both fields are required.
type FailRequest struct {
	Error     string `json:"error"`
	Retryable *bool  `json:"retryable"`
}

// ReleaseRequest is the optional body of POST /v1/leases/{leaseId}/release:
// the worker gives the job back without having finished it (it is
// shutting down). The attempt is refunded — it does not count against the
// job's max attempts — and the job is due again at once. Reason, if given,
// is recorded as the attempt's error.
type ReleaseRequest struct {
	Reason string `json:"reason,omitempty"`
}

// StatusResponse answers complete, fail and release: the job's state after
// the call (SUCCESS; RETRY, DEAD or CANCELED).
type StatusResponse struct {
	Status string `json:"status"`
}

// Int returns a pointer to n, for the optional fields of requests.
func Int(n int) *int { return &n }
