package docket

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// AttemptOutcome is how an attempt ended (JobAttempt.Outcome,
// JobFinishedEvent.Outcome).
type AttemptOutcome = job.Outcome

// Attempt outcomes.
const (
	OutcomeSuccess     = job.OutcomeSuccess     // the handler succeeded
	OutcomeError       = job.OutcomeError       // the handler returned an error (retryable or fatal)
	OutcomeTimeout     = job.OutcomeTimeout     // the attempt exceeded its deadline
	OutcomePanic       = job.OutcomePanic       // the handler panicked
	OutcomeExpired     = job.OutcomeExpired     // the lease expired and the job was rescued
	OutcomeCanceled    = job.OutcomeCanceled    // a cancel was honoured by the holder
	OutcomeInterrupted = job.OutcomeInterrupted // the worker shut down and gave the lease back
)

// JobFinishedEvent is the end of one attempt, as committed. See
// Config.OnJobFinished.
type JobFinishedEvent struct {
	JobID   uuid.UUID
	JobType string
	Queue   string
	Attempt int
	// State the job moved to: SUCCESS, RETRY, DEAD or CANCELED.
	State   JobState
	Outcome AttemptOutcome
	Error   string // "" on success
	// DueAt is when the attempt's job became due (its run_at), StartedAt
	// when the attempt acquired its lease, FinishedAt when it ended.
	DueAt      time.Time
	StartedAt  time.Time
	FinishedAt time.Time
}

// Failed reports whether the attempt ended in an error of the job: the
// handler or remote worker failed, timed out or panicked, or its holder
// died (the lease expired). Successes, cancellations and leases given back
// at shutdown are not failures.
func (e *JobFinishedEvent) Failed() bool {
	switch e.Outcome {
	case job.OutcomeError, job.OutcomeTimeout, job.OutcomePanic, job.OutcomeExpired:
		return true
	}
	return false
}

// QueueLatency is how long the job waited between becoming due and the
// start of the attempt (never negative).
func (e *JobFinishedEvent) QueueLatency() time.Duration {
	return max(0, e.StartedAt.Sub(e.DueAt))
}

// RunDuration is how long the attempt ran (never negative).
func (e *JobFinishedEvent) RunDuration() time.Duration {
	return max(0, e.FinishedAt.Sub(e.StartedAt))
}

func finishedEvent(row *job.Row, fin *store.JobFinishParams) JobFinishedEvent {
	return JobFinishedEvent{
		JobID: row.ID, JobType: row.Type, Queue: row.Queue, Attempt: fin.Attempt,
		State: fin.State, Outcome: fin.Outcome, Error: fin.Error,
		DueAt: row.RunAt, StartedAt: row.AttemptedAt, FinishedAt: fin.FinishedAt,
	}
}

// engineObserver adapts Config.OnJobFinished to engine.Config.OnFinish.
func (c *Client) engineObserver() func(*job.Row, *store.JobFinishParams) {
	if c.cfg.OnJobFinished == nil {
		return nil
	}
	return func(row *job.Row, fin *store.JobFinishParams) { c.cfg.OnJobFinished(finishedEvent(row, fin)) }
}

// observeLease reports a remote lease's end. row is the job as it was
// while the attempt ran, or nil to read it now (after a success, which
// leaves queue, run_at and attempted_at as they were).
func (c *Client) observeLease(ctx context.Context, row *job.Row, fin *store.JobFinishParams) {
	if c.cfg.OnJobFinished == nil {
		return
	}
	if row == nil {
		// Metrics only: a failed read loses one observation, not the job.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		got, err := c.store.JobGet(ctx, fin.ID)
		if err != nil || got.Attempt != fin.Attempt {
			return
		}
		row = got
	}
	c.cfg.OnJobFinished(finishedEvent(row, fin))
}
