package docket

import (
	"context"
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/backoff"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/workflow"
	"github.com/docket-run/docket/remote"
)

// Remote leases let a program outside this process (a worker in any
// language, over HTTP) take jobs, renew them and report their end. A lease
// id names the job and the attempt, and is the lease's fencing token: once
// the lease expired and the job was rescued, or the job moved on, every call
// with the old lease id is refused with ErrLeaseLost. It also carries a
// token only Lease hands out (an HMAC of the job and attempt under a secret
// the installation's processes share, leaseKeys): a worker cannot make the
// lease id of a job it did not lease — another worker's, or one running in
// a process — from the job's id and attempt, which any reader sees.

// Limits of LeaseParams: the remote-worker protocol's (package remote).
const (
	LeaseMaxJobs     = remote.LeaseMaxJobs
	LeaseMaxQueues   = remote.LeaseQueuesMax
	LeaseMaxWait     = remote.WaitSecondsMax * time.Second
	LeaseDurationMin = remote.LeaseSecondsMin * time.Second
	LeaseDurationMax = remote.LeaseSecondsMax * time.Second
)

// Lease is one job leased to a remote worker until ExpiresAt.
type Lease struct {
	ID        string // "<job id>.<attempt>.<token>": pass it as it is
	Job       *JobRow
	ExpiresAt time.Time
}

// LeaseParams ask for jobs.
type LeaseParams struct {
	Queues   []string      // at least one, at most LeaseMaxQueues
	Max      int           // 1 … LeaseMaxJobs
	Wait     time.Duration // long-poll up to this long when nothing is due (≤ LeaseMaxWait)
	Duration time.Duration // lease length, LeaseDurationMin … LeaseDurationMax
	WorkerID string        // recorded as the lease owner and in the attempt history
}

// Validate reports every invalid field of p: one *ValidationError, or an
// errors.Join of one per field. Lease calls it.
func (p *LeaseParams) Validate() error {
	var errs []error
	switch {
	case len(p.Queues) == 0:
		errs = append(errs, &ValidationError{Field: "queues", Message: "needs at least one queue"})
	case len(p.Queues) > LeaseMaxQueues:
		// Each queue is looked at in turn, every round of a long poll: 20,000
		// of them held SQLite's writer 1.9 s a round. Their names are not
		// looked at (one error each could make an answer larger than the
		// request).
		errs = append(errs, &ValidationError{Field: "queues", Message: fmt.Sprintf("must name at most %d queues, not %d", LeaseMaxQueues, len(p.Queues))})
	default:
		for i, q := range p.Queues {
			if err := validName(fmt.Sprintf("queues[%d]", i), q); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if p.Max < 1 || p.Max > LeaseMaxJobs {
		errs = append(errs, &ValidationError{Field: "max", Message: fmt.Sprintf("must be between 1 and %d", LeaseMaxJobs)})
	}
	if p.Wait < 0 || p.Wait > LeaseMaxWait {
		errs = append(errs, &ValidationError{Field: "waitSeconds", Message: fmt.Sprintf("must be between 0 and %d", int(LeaseMaxWait/time.Second))})
	}
	if p.Duration < LeaseDurationMin || p.Duration > LeaseDurationMax {
		errs = append(errs, leaseSecondsError())
	}
	if err := validName("workerId", p.WorkerID); err != nil {
		errs = append(errs, err)
	}
	return joinValidation(errs)
}

// leaseSecondsError is the error of a lease duration out of range.
func leaseSecondsError() *ValidationError {
	return &ValidationError{Field: "leaseSeconds", Message: fmt.Sprintf("must be between %d and %d",
		int(LeaseDurationMin/time.Second), int(LeaseDurationMax/time.Second))}
}

// joinValidation is nil for no errors, the error itself for one, and their
// errors.Join for more: each names one field.
func joinValidation(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

// leaseID formats the lease id of one attempt of a job: the job, the
// attempt and the attempt's token under key.
func leaseID(key []byte, jobID uuid.UUID, attempt int) string {
	return jobID.String() + "." + strconv.Itoa(attempt) + "." + leaseToken(key, jobID, attempt)
}

// leaseToken is the token of one attempt of a job: 128 bits of
// HMAC-SHA-256 under key, base64url.
func leaseToken(key []byte, jobID uuid.UUID, attempt int) string {
	m := hmac.New(sha256.New, key)
	m.Write(jobID[:])
	m.Write(binary.BigEndian.AppendUint32(nil, uint32(attempt)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// leaseSecretName names the lease tokens' key among the stored secrets.
const leaseSecretName = "lease"

// leaseKeys holds the key of lease tokens once read: the first process
// to need one stores a random one, which every process then reads, so a
// lease taken from one server is renewed and ended through any other.
type leaseKeys struct {
	mu  sync.Mutex
	key []byte
}

// leaseKey returns the key of lease tokens, reading (or making) it on
// first use; a failed read is tried again by the next call.
func (c *Client) leaseKey(ctx context.Context) ([]byte, error) {
	c.leaseKeys.mu.Lock()
	defer c.leaseKeys.mu.Unlock()
	if c.leaseKeys.key != nil {
		return c.leaseKeys.key, nil
	}
	fresh := make([]byte, 32)
	if _, err := crand.Read(fresh); err != nil {
		return nil, fmt.Errorf("make lease key: %w", err)
	}
	key, err := c.store.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: leaseSecretName, Secret: fresh, Now: c.cfg.Now()})
	if err != nil {
		return nil, fmt.Errorf("read lease key: %w", err)
	}
	c.leaseKeys.key = key
	return key, nil
}

// ParseLeaseID splits a lease id into job id and attempt. It checks the
// form only: whether the id's token is the one its lease was given is for
// the lease calls to check (LeaseHeartbeat and the others refuse a wrong
// or missing token with ErrLeaseLost).
func ParseLeaseID(s string) (uuid.UUID, int, error) {
	id, attempt, _, err := parseLeaseID(s)
	return id, attempt, err
}

// parseLeaseID splits a lease id into job id, attempt and token; a lease
// id without a token (as lease ids were before they had one) parses with
// token "", and so is never held.
func parseLeaseID(s string) (uuid.UUID, int, string, error) {
	id, rest, ok := strings.Cut(s, ".")
	if !ok {
		return uuid.Nil, 0, "", &ValidationError{Field: "leaseId", Message: "must be a lease id as POST /v1/leases gave it: <job id>.<attempt>.<token>"}
	}
	att, token, _ := strings.Cut(rest, ".")
	jobID, err := uuid.Parse(id)
	if err != nil {
		return uuid.Nil, 0, "", &ValidationError{Field: "leaseId", Message: "job id is not a UUID"}
	}
	// An attempt is counted in 32 bits by the databases: a larger one
	// was never leased.
	attempt, err := strconv.ParseInt(att, 10, 32)
	if err != nil || attempt < 1 {
		return uuid.Nil, 0, "", &ValidationError{Field: "leaseId", Message: "attempt must be an integer between 1 and 2147483647"}
	}
	return jobID, int(attempt), token, nil
}

// parseRef splits a lease id into its job and attempt; only its form is
// checked (heldRef checks its token).
func parseRef(leaseID string) (job.Ref, string, error) {
	id, attempt, token, err := parseLeaseID(leaseID)
	return job.Ref{ID: id, Attempt: attempt}, token, err
}

// heldRef checks that token is the one Lease gave the attempt of ref:
// ErrLeaseLost when it is not (forged), ErrLeaseWithoutToken for a lease
// id without one (an older docket's).
func (c *Client) heldRef(ctx context.Context, ref job.Ref, token string) error {
	if token == "" {
		return ErrLeaseWithoutToken
	}
	key, err := c.leaseKey(ctx)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(token), []byte(leaseToken(key, ref.ID, ref.Attempt))) {
		return ErrLeaseLost
	}
	return nil
}

// leaseRef parses a lease id and checks its token.
func (c *Client) leaseRef(ctx context.Context, leaseID string) (job.Ref, error) {
	ref, token, err := parseRef(leaseID)
	if err != nil {
		return ref, err
	}
	return ref, c.heldRef(ctx, ref, token)
}

// LeaseQueue is the queue of a lease's job, for checking a caller may
// act on the lease: ErrLeaseLost when the id's token is not the one its
// lease was given (nothing is read then, so a forged id tells nothing of
// the job), ErrLeaseWithoutToken for an id without one, a
// *ValidationError naming leaseId when it does not parse, ErrNotFound when
// there is no such job. Only the job's queue is read.
func (c *Client) LeaseQueue(ctx context.Context, leaseID string) (string, error) {
	ref, err := c.leaseRef(ctx, leaseID)
	if err != nil {
		return "", err
	}
	return c.store.JobQueueOf(ctx, ref.ID)
}

// Lease takes up to p.Max due jobs from p.Queues. When none is due it waits
// up to p.Wait for one (woken by inserts, polling every second as a
// fallback) and then returns an empty list. Calls waiting on the same
// queues take turns: one listens at a time (leaseTurns).
func (c *Client) Lease(ctx context.Context, p LeaseParams) ([]*Lease, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	key, err := c.leaseKey(ctx)
	if err != nil {
		return nil, err
	}
	var wakeups <-chan string
	deadline := c.cfg.Now().Add(p.Wait)
	queues := append([]string(nil), p.Queues...)
	for {
		rand.Shuffle(len(queues), func(i, j int) { queues[i], queues[j] = queues[j], queues[i] })
		var out []*Lease
		for _, q := range queues {
			rows, err := c.store.JobAcquire(ctx, &store.JobAcquireParams{
				Queue: q, Max: p.Max - len(out), Owner: p.WorkerID,
				LeaseDuration: p.Duration, Now: c.cfg.Now(),
			})
			if err != nil {
				return out, fmt.Errorf("lease jobs of queue %q: %w", q, err)
			}
			for _, row := range rows {
				out = append(out, &Lease{ID: leaseID(key, row.ID, row.Attempt), Job: row, ExpiresAt: row.LeaseExpiresAt})
			}
			if len(out) == p.Max {
				break
			}
		}
		remaining := deadline.Sub(c.cfg.Now())
		if len(out) > 0 || remaining <= 0 {
			return out, nil
		}
		if wakeups == nil {
			// Wait on these queues only once it is this call's turn
			// (leaseTurns): other calls on them are waiting already.
			release, ok := c.leaseTurns.take(ctx, queues, remaining)
			if !ok {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				return out, nil
			}
			defer release()
			ch, unsubscribe := c.store.Subscribe(store.TopicJobAvailable)
			defer unsubscribe()
			wakeups = ch
			continue // look once more: a job may have come before we listened
		}
		t := time.NewTimer(min(remaining, time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-wakeups:
		case <-t.C:
		}
		t.Stop()
	}
}

// LeaseState is what a heartbeat learns.
type LeaseState struct {
	ExpiresAt       time.Time
	CancelRequested bool // the job was canceled: stop and call LeaseFail
}

// LeaseHeartbeat renews a lease for d and, when progress is not nil or
// message is not empty, records progress (0..100) and message: a message
// alone keeps the job's progress (a job.progress event carries both).
// ErrLeaseLost when the lease is no longer held.
func (c *Client) LeaseHeartbeat(ctx context.Context, leaseID string, d time.Duration, progress *float64, message string) (*LeaseState, error) {
	var errs []error
	ref, token, err := parseRef(leaseID)
	if err != nil {
		errs = append(errs, err)
	}
	if d < LeaseDurationMin || d > LeaseDurationMax {
		errs = append(errs, leaseSecondsError())
	}
	if progress != nil && !(*progress >= 0 && *progress <= remote.ProgressMax) { // NaN too
		errs = append(errs, &ValidationError{Field: "progress", Message: fmt.Sprintf("must be between 0 and %d", remote.ProgressMax)})
	}
	if len(message) > remote.MessageMaxBytes {
		errs = append(errs, &ValidationError{Field: "message", Message: fmt.Sprintf("must be at most %d bytes", remote.MessageMaxBytes)})
	}
	if err := joinValidation(errs); err != nil {
		return nil, err
	}
	if err := c.heldRef(ctx, ref, token); err != nil {
		return nil, err
	}
	now := c.cfg.Now()
	res, err := c.store.JobHeartbeat(ctx, &store.JobHeartbeatParams{Jobs: []job.Ref{ref}, LeaseDuration: d, Now: now})
	if err != nil {
		return nil, fmt.Errorf("renew lease of job %s attempt %d: %w", ref.ID, ref.Attempt, err)
	}
	if !res[0].Extended {
		return nil, ErrLeaseLost
	}
	if progress != nil || message != "" {
		err := c.store.JobProgress(ctx, &store.JobProgressParams{Ref: ref, Progress: progress, Message: message, Now: now})
		if err != nil {
			return nil, err
		}
	}
	return &LeaseState{ExpiresAt: res[0].LeaseExpiresAt, CancelRequested: res[0].CancelRequested}, nil
}

// LeaseComplete records SUCCESS with an optional JSON result.
func (c *Client) LeaseComplete(ctx context.Context, leaseID string, result json.RawMessage) error {
	ref, token, err := parseRef(leaseID)
	if err != nil {
		return err
	}
	if len(result) > 0 && !json.Valid(result) {
		return &ValidationError{Field: "result", Message: "is not valid JSON"}
	}
	if msg := store.JSONUnstorable(result); msg != "" {
		return &ValidationError{Field: "result", Message: msg}
	}
	if err := c.heldRef(ctx, ref, token); err != nil {
		return err
	}
	// The job is read first (one read by primary key, on SQLite from the
	// readers): its payload tells a step job, whose run is advanced in
	// the transaction that records its end.
	row, err := c.heldJob(ctx, ref)
	if err != nil {
		return err
	}
	fin := &store.JobFinishParams{
		ID: ref.ID, Attempt: ref.Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess, Result: result,
	}
	if _, err := c.finishLease(ctx, fin, row.Payload); err != nil {
		return err
	}
	c.observeLease(ctx, row, fin)
	return nil
}

// LeaseFail records a failed attempt: RETRY after backoff when retryable
// and attempts remain, DEAD otherwise, CANCELED when the job's cancel was
// requested. It returns the state recorded.
func (c *Client) LeaseFail(ctx context.Context, leaseID, message string, retryable bool) (JobState, error) {
	ref, err := c.leaseRef(ctx, leaseID)
	if err != nil {
		return "", err
	}
	row, err := c.heldJob(ctx, ref)
	if err != nil {
		return "", err
	}
	now := c.cfg.Now()
	fin := &store.JobFinishParams{ID: ref.ID, Attempt: ref.Attempt, Outcome: job.OutcomeError, Error: message, FinishedAt: now}
	switch {
	case row.CancelRequested:
		fin.State, fin.Outcome = job.StateCanceled, job.OutcomeCanceled
	case !retryable || row.AttemptsUsed() >= row.MaxAttempts:
		fin.State = job.StateDead
	default:
		fin.State = job.StateRetry
		fin.RunAt = now.Add(c.retryPolicy().Delay(row.Attempt))
	}
	ended, err := c.finishLease(ctx, fin, row.Payload)
	if err != nil {
		return "", err
	}
	fin.State = ended // observed as it was recorded
	c.observeLease(ctx, row, fin)
	return ended, nil
}

// leaseReleasedDefault is the attempt's error of a release without reason.
const leaseReleasedDefault = "released by its worker before it finished"

// LeaseReleaseRefundsMax is how many refunded interruptions a job may have
// before a release counts as an attempt (see LeaseRelease).
const LeaseReleaseRefundsMax = remote.ReleaseRefundsMax

// LeaseRelease hands a leased job back unfinished (its worker is shutting
// down, say): the attempt ends "interrupted" and is refunded, so it does
// not count against the job's max attempts, and the job is due again at
// once (RETRY, queued by the scheduler's next round). A job whose cancel
// was requested ends CANCELED instead. reason, if not empty, is recorded
// as the attempt's error. It returns the state recorded; ErrLeaseLost when
// the lease is no longer held, like LeaseComplete and LeaseFail.
//
// Refunds are bounded: once the job's attempt history holds
// LeaseReleaseRefundsMax interrupted attempts, a release counts as a
// failed attempt instead (outcome error, RETRY after backoff, DEAD when no
// attempt remains), so a worker that always gives a job back cannot loop
// it forever.
func (c *Client) LeaseRelease(ctx context.Context, leaseID, reason string) (JobState, error) {
	ref, token, err := parseRef(leaseID)
	if err != nil {
		return "", err
	}
	if len(reason) > remote.ErrorMaxBytes {
		return "", &ValidationError{Field: "reason", Message: fmt.Sprintf("must be at most %d bytes", remote.ErrorMaxBytes)}
	}
	if err := c.heldRef(ctx, ref, token); err != nil {
		return "", err
	}
	if reason == "" {
		reason = leaseReleasedDefault
	}
	row, err := c.heldJob(ctx, ref)
	if err != nil {
		return "", err
	}
	refunded, err := c.refundedInterruptions(ctx, ref.ID)
	if err != nil {
		return "", err
	}
	now := c.cfg.Now()
	fin := &store.JobFinishParams{
		ID: ref.ID, Attempt: ref.Attempt, State: job.StateRetry, Outcome: job.OutcomeInterrupted,
		Error: reason, RunAt: now, FinishedAt: now,
	}
	if refunded >= LeaseReleaseRefundsMax {
		fin.Outcome = job.OutcomeError
		fin.Error = fmt.Sprintf("%s (released after %d refunded interruptions: counted as an attempt)", reason, refunded)
		if row.AttemptsUsed() >= row.MaxAttempts {
			fin.State, fin.RunAt = job.StateDead, time.Time{}
		} else {
			fin.RunAt = now.Add(c.retryPolicy().Delay(row.Attempt))
		}
	}
	ended, err := c.finishLease(ctx, fin, row.Payload)
	if err != nil {
		return "", err
	}
	fin.State = ended // observed as it was recorded
	c.observeLease(ctx, row, fin)
	return ended, nil
}

// refundedInterruptions counts the attempts of a job that ended
// interrupted (and were refunded), from its attempt history.
func (c *Client) refundedInterruptions(ctx context.Context, id uuid.UUID) (int, error) {
	atts, err := c.store.JobAttemptList(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("read attempts of job %s: %w", id, err)
	}
	n := 0
	for _, a := range atts {
		if a.Outcome == job.OutcomeInterrupted {
			n++
		}
	}
	return n, nil
}

// heldJob reads the job of a lease, ErrLeaseLost when the lease's attempt
// no longer runs. The finish that follows is fenced all the same: this read
// only decides which state to ask for.
func (c *Client) heldJob(ctx context.Context, ref job.Ref) (*job.Row, error) {
	row, err := c.store.JobGet(ctx, ref.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrLeaseLost
	}
	if err != nil {
		return nil, err
	}
	if row.State != job.StateRunning || row.Attempt != ref.Attempt {
		return nil, ErrLeaseLost
	}
	return row, nil
}

// finishLease ends the lease's attempt as fin says and returns the state
// the job ended in, which the statement decides: a RETRY of a job whose
// cancel was requested by then ends CANCELED. ErrLeaseLost when the
// attempt no longer held the job. payload is the job's: a workflow step's
// job that ended has its run advanced in the same transaction (as the
// engine's completer does), so its next steps are released by the commit
// that ends it. Should that transaction fail for another reason than the
// lease, the end is written alone and the workflow sweeper advances the
// run.
func (c *Client) finishLease(ctx context.Context, fin *store.JobFinishParams, payload []byte) (JobState, error) {
	if fin.FinishedAt.IsZero() {
		fin.FinishedAt = c.cfg.Now()
	}
	params := &store.JobFinishManyParams{Jobs: []*store.JobFinishParams{fin}, Now: c.cfg.Now()}
	if runID, ok := workflow.IsStepPayload(payload); ok {
		if adv, err := c.flows(); err != nil {
			c.cfg.Logger.Warn("finish a step job's lease without its run's advancement: the workflow runtime failed to start; the sweeper advances the run",
				"service", "workflow", "run_id", runID.String(), "error", err)
		} else {
			var ended []job.State
			err = c.store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
				// The run before the job, as a run cancel takes them
				// (see lockStepRuns).
				if err := lockRun(ctx, tx, runID); err != nil {
					return err
				}
				var err error
				if ended, err = tx.JobFinishMany(ctx, params); err != nil {
					return err
				}
				if ended[0] == "" || !ended[0].Terminal() {
					return nil
				}
				return adv.AdvanceRunsTx(ctx, tx, []uuid.UUID{runID})
			})
			if err == nil {
				if ended[0] == "" {
					return "", ErrLeaseLost
				}
				return ended[0], nil
			}
			if ctx.Err() != nil {
				return "", fmt.Errorf("finish lease of job %s attempt %d: %w", fin.ID, fin.Attempt, err)
			}
			c.cfg.Logger.Warn("finish a step job's lease with its run's advancement failed; finishing it alone, the sweeper advances the run",
				"service", "workflow", "run_id", runID.String(), "error", err)
		}
	}
	ended, err := c.store.JobFinishMany(ctx, params)
	if err != nil {
		return "", fmt.Errorf("finish lease of job %s attempt %d: %w", fin.ID, fin.Attempt, err)
	}
	if ended[0] == "" {
		return "", ErrLeaseLost
	}
	return ended[0], nil
}

func (c *Client) retryPolicy() backoff.Policy {
	return backoff.Policy{Base: c.cfg.RetryBackoffBase, Max: c.cfg.RetryBackoffMax}
}
