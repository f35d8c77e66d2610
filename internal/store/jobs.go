package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/job"
)

// JobTx is the part of JobStore that runs in a caller's transaction (Tx) as
// well as on its own.
type JobTx interface {
	// JobInsertMany inserts jobs in one transaction. A job whose idempotency
	// key already exists (in the table or earlier in the same batch) is not
	// inserted; its result carries the existing row and Duplicate = true.
	// Results are in the order of p.Jobs.
	JobInsertMany(ctx context.Context, p *JobInsertManyParams) ([]*JobInsertResult, error)
	// JobGet reads one job; ErrNotFound when there is none.
	JobGet(ctx context.Context, id uuid.UUID) (*job.Row, error)
	// JobTransition makes one state change by the state machine's table:
	// *job.InvalidTransitionError when From → To is not allowed (nothing is
	// read) or when the job is not in state From (or, from RUNNING, not at
	// Attempt); ErrNotFound when there is no such job. From RUNNING it
	// writes the attempt's history row; last_error follows
	// job.SetsLastError.
	JobTransition(ctx context.Context, p *JobTransitionParams) (*job.Row, error)
	// JobFinishMany is JobStore.JobFinishMany (the ends of attempts, fenced
	// by attempt): the engine's completer writes a batch holding workflow
	// step jobs with it, and advances their runs in the same transaction.
	JobFinishMany(ctx context.Context, p *JobFinishManyParams) ([]job.State, error)
	// JobCancel cancels a CREATED, QUEUED or RETRY job at once; for a RUNNING
	// job it records the request (CancelRequested) and wakes the holder
	// (in a Tx, once it commits); an already CANCELED job is returned
	// unchanged. SUCCESS and DEAD give *job.InvalidTransitionError.
	// Canceled in the result tells whether this call moved the job to
	// CANCELED: the cancel of a workflow step's job advances its run in
	// the same transaction, and only when it did.
	JobCancel(ctx context.Context, p *JobCancelParams) (*JobCancelResult, error)
	// JobCancelMany is JobCancel for many jobs at once (a run's
	// fan-out), in one statement however many (on PostgreSQL, one more
	// for the few that change under it): each CREATED, QUEUED or RETRY job
	// is CANCELED, with one job.state_changed outbox row for them all; a
	// RUNNING job is asked to stop as JobCancel asks it (CancelRequested,
	// its holder woken, in a Tx once it commits), unless p.LeaveRunning;
	// a SUCCESS, DEAD or CANCELED job, and an id with no job, are left as
	// they are, without error. The result is aligned with p.IDs and says
	// what became of each job (an id given twice gets the same result
	// twice). Nothing is written for an empty p.IDs.
	JobCancelMany(ctx context.Context, p *JobCancelManyParams) ([]JobCancelManyResult, error)
}

// JobStore is the jobs domain: jobs, their attempts and their queues.
type JobStore interface {
	JobTx

	// JobInsertManyTx is JobInsertMany inside the caller's transaction:
	// pgx.Tx or *sql.Tx for postgres, *sql.Tx for sqlite. Nothing is
	// committed; wakeups are sent by the database on commit where it can
	// (postgres NOTIFY), otherwise workers find the jobs by polling.
	JobInsertManyTx(ctx context.Context, tx any, p *JobInsertManyParams) ([]*JobInsertResult, error)
	// JobNotifyInserted wakes this process's subscribers of
	// TopicJobAvailable for the queues of p.Jobs that are QUEUED and due
	// at p.Now, as the store does after its own inserts: for jobs the
	// caller inserted with JobInsertManyTx and has committed since. Other
	// processes are not told (on PostgreSQL the commit's NOTIFY told
	// every process already; on SQLite they poll). Call it after the
	// commit only: a subscriber woken before finds nothing.
	JobNotifyInserted(p *JobNotifyInsertedParams)

	// JobQueueOf reads the queue of one job, nothing else (a scoped
	// key's call on a lease checks it); ErrNotFound when there is none.
	JobQueueOf(ctx context.Context, id uuid.UUID) (string, error)
	// JobList lists jobs newest first (id descending), filtered.
	JobList(ctx context.Context, p *JobListParams) ([]*job.Row, error)
	// JobCount counts jobs by queue and state.
	JobCount(ctx context.Context) ([]*JobCount, error)
	// JobAttemptList lists a job's attempts, oldest first, including the
	// current one while it runs (Outcome = running). ErrNotFound when the
	// job does not exist.
	JobAttemptList(ctx context.Context, id uuid.UUID) ([]*job.Attempt, error)

	// JobAcquire leases up to p.Max due QUEUED jobs of one queue in one
	// transaction: ordered by sort key (priority with aging), then id; each is
	// set RUNNING with attempt+1, lease owner and expiry. Rows locked by
	// another acquirer are skipped, never waited for. Returns nothing while
	// the queue is paused.
	JobAcquire(ctx context.Context, p *JobAcquireParams) ([]*job.Row, error)
	// JobFinishMany (declared in JobTx) moves RUNNING jobs to SUCCESS,
	// RETRY, DEAD or CANCELED in one transaction, each guarded by state = RUNNING and attempt = the
	// given attempt (fencing). It writes each finished attempt's history row,
	// but for a success, which JobAttemptList reads from the job row (the
	// job keeps its last lease owner for that; rows show it only while
	// RUNNING).
	// An attempt finishing in RETRY while a cancel is requested ends the job
	// CANCELED instead (finished, never run again).
	// The result is aligned with p.Jobs: the state each job ended in, as
	// the statement wrote it (CANCELED for a RETRY whose cancel was
	// requested), and "" where the finish was fenced off (not applied).
	// JobHeartbeat extends the leases of RUNNING jobs still held under the
	// given attempts to Now+LeaseDuration, never shortening one (a lease
	// already reaching further keeps its expiry), and reports cancel
	// requests and the resulting expiry.
	JobHeartbeat(ctx context.Context, p *JobHeartbeatParams) ([]*JobHeartbeatResult, error)
	// JobProgress records progress of a running attempt and writes a
	// job.progress outbox row. ErrLeaseLost when the attempt is not current.
	JobProgress(ctx context.Context, p *JobProgressParams) error
	// JobCancel (declared in JobTx) cancels a job.
	// JobRetry puts a DEAD or CANCELED job back to QUEUED with attempts
	// reset. A CREATED, QUEUED, RETRY or RUNNING job is returned unchanged
	// (idempotent). SUCCESS gives *job.InvalidTransitionError, and so does
	// a RUNNING job whose cancel is requested (Reason
	// job.ReasonCancelRequested: it will end CANCELED, not as returned).
	JobRetry(ctx context.Context, p *JobRetryParams) (*job.Row, error)

	// JobSchedule moves RETRY jobs whose run_at has come to QUEUED and wakes
	// workers of their queues. Returns how many moved.
	JobSchedule(ctx context.Context, p *JobScheduleParams) (int, error)
	// JobListExpired lists RUNNING jobs whose lease expired before p.Now.
	JobListExpired(ctx context.Context, p *JobListExpiredParams) ([]*job.Row, error)
	// JobDeleteFinished deletes SUCCESS, DEAD and CANCELED jobs finished
	// before p.FinishedBefore (with their attempts). Returns how many.
	JobDeleteFinished(ctx context.Context, p *JobDeleteFinishedParams) (int, error)

	QueueSetPaused(ctx context.Context, p *QueueSetPausedParams) error
	// QueueList lists queues that have jobs or are paused, with counts.
	// Resuming (QueueSetPaused with Paused false) deletes the pause row.
	QueueList(ctx context.Context) ([]*Queue, error)
}

// JobInsertParams describes one job to insert.
type JobInsertParams struct {
	ID             uuid.UUID // UUIDv7, made by the caller
	Type           string
	Queue          string
	Priority       int
	Payload        json.RawMessage // valid JSON; never nil
	IdempotencyKey string          // "" for none
	State          job.State       // StateQueued or StateCreated
	MaxAttempts    int
	RunAt          time.Time // zero means Now
	Timeout        time.Duration
}

// JobInsertManyParams: insert these jobs at Now.
type JobInsertManyParams struct {
	Jobs []*JobInsertParams
	Now  time.Time
	// Prepare, when set, sets Jobs[i] (nil until then): a store calls it
	// once for each job, in order, before it reads the job, stops at its
	// first error and then writes nothing, and never calls it once it has
	// returned. PostgreSQL calls it as it streams a batch of
	// its own transaction with COPY, so the caller's work on the next jobs
	// overlaps the server's on the first; every other path prepares the
	// whole batch first (PrepareAll). Only for batches without idempotency
	// keys: a prepared job with one is an error.
	Prepare func(i int) error
}

// PrepareAll prepares every job of p (see Prepare) and clears Prepare.
func (p *JobInsertManyParams) PrepareAll() error {
	prepare := p.Prepare
	if prepare == nil {
		return nil
	}
	p.Prepare = nil
	for i := range p.Jobs {
		if err := p.Prepared(i, prepare); err != nil {
			return err
		}
	}
	return nil
}

// Prepared prepares job i of p with prepare and checks that it has no
// idempotency key (see Prepare).
func (p *JobInsertManyParams) Prepared(i int, prepare func(int) error) error {
	if err := prepare(i); err != nil {
		return err
	}
	if j := p.Jobs[i]; j != nil && j.IdempotencyKey != "" {
		return fmt.Errorf("insert jobs: job %d: a prepared batch has an idempotency key", i)
	}
	return nil
}

// JobNotifyInsertedParams names jobs a caller's transaction inserted
// and committed.
type JobNotifyInsertedParams struct {
	Jobs []*job.Row
	Now  time.Time
}

// JobInsertResult is the outcome for one inserted job.
type JobInsertResult struct {
	Job       *job.Row
	Duplicate bool // the idempotency key existed; Job is the existing row
}

// JobListParams filters JobList. Empty slices and nil pointers filter nothing.
type JobListParams struct {
	States   []job.State
	Types    []string
	Queues   []string
	Priority *int
	BeforeID uuid.UUID // cursor: only ids strictly less than this (uuid.Nil = from the newest)
	Limit    int
	// Payload, when set, keeps the jobs whose payload matches it among the
	// newest Payload.Within jobs the other filters select (BeforeID and
	// Limit apply to what matched), so the scan is bounded.
	Payload *PayloadMatch
}

// Validate names every filter that is not text (checkText).
func (p *JobListParams) Validate() error {
	pr := problemsOf("list jobs")
	checkTexts(pr, "types", p.Types)
	checkTexts(pr, "queues", p.Queues)
	return pr.Err()
}

// PayloadMatch selects jobs by one value in their payload: the value at
// Path (object keys, outermost first; never array indexes) is the JSON
// string Text, or the number Number (compared as numbers), or the literal
// Literal (true, false or null). Keys are letters, digits, '_' and '-'
// (package docket checks; SQLite writes them quoted in a JSON path).
type PayloadMatch struct {
	Path    []string
	Text    string
	Number  string // "" or a JSON number
	Literal string // "", "true", "false" or "null"
	Within  int    // the newest rows scanned; > 0
}

// JobCount is the number of jobs of one queue in one state.
type JobCount struct {
	Queue string
	State job.State
	Count int
}

// JobAcquireParams: lease up to Max due jobs of Queue to Owner.
type JobAcquireParams struct {
	Queue         string
	Max           int
	Owner         string // node id
	LeaseDuration time.Duration
	Now           time.Time
}

// JobFinishParams is the end of one attempt.
type JobFinishParams struct {
	ID      uuid.UUID
	Attempt int       // fencing token: must equal the job's attempt
	State   job.State // SUCCESS, RETRY, DEAD or CANCELED
	Outcome job.Outcome
	Result  json.RawMessage // SUCCESS only; nil for none
	// Error becomes last_error for RETRY, DEAD and CANCELED, even when it
	// is "" (job.SetsLastError); SUCCESS keeps last_error. It is stored as
	// ErrorText: free text (a handler's error, a program's stderr) need
	// not be UTF-8.
	Error string
	RunAt time.Time // RETRY: when the job becomes due again
	// FinishedAt is when the attempt ended (handler return); zero means Now.
	FinishedAt time.Time
}

// ErrorText is Error as every backend stores it: each NUL and each byte
// that is not part of valid UTF-8 becomes U+FFFD (PostgreSQL's text can
// hold neither, and one such error must not fail the batch it is in).
func (p *JobFinishParams) ErrorText() string { return CleanText(p.Error) }

// Validate checks p against the state machine: a finish ends a RUNNING
// attempt in SUCCESS, RETRY, DEAD or CANCELED; anything else is an
// *job.InvalidTransitionError.
func (p *JobFinishParams) Validate() error {
	switch p.State {
	case job.StateSuccess, job.StateRetry, job.StateDead, job.StateCanceled:
		return nil
	}
	return &job.InvalidTransitionError{JobID: p.ID.String(), From: job.StateRunning, To: p.State}
}

// JobFinishManyParams finishes many attempts in one transaction.
type JobFinishManyParams struct {
	Jobs []*JobFinishParams
	Now  time.Time
	// ExpiredOnly adds the guard lease_expires_at < Now: the rescuer uses it
	// so a lease renewed since it was listed is left alone.
	ExpiredOnly bool
}

// JobHeartbeatParams extends the leases of these attempts to at least
// Now+LeaseDuration.
type JobHeartbeatParams struct {
	Jobs          []job.Ref
	LeaseDuration time.Duration
	Now           time.Time
}

// JobHeartbeatResult is the outcome for one attempt, aligned with the params.
type JobHeartbeatResult struct {
	Ref             job.Ref
	Extended        bool // false: the lease is lost (fenced)
	CancelRequested bool
	LeaseExpiresAt  time.Time
}

// JobProgressParams records progress of a running attempt: Progress and
// Message replace the stored ones, and a job.progress event carries both.
type JobProgressParams struct {
	Ref job.Ref
	// Progress is 0..100; nil keeps the stored progress (a message alone),
	// which the event then carries.
	Progress *float64
	Message  string // stored, and sent in the event, as MessageText
	Now      time.Time
}

// MessageText is Message as every backend stores it (see CleanText): free
// text from a remote worker need not be UTF-8.
func (p *JobProgressParams) MessageText() string { return CleanText(p.Message) }

// JobTransitionParams asks for one state change.
type JobTransitionParams struct {
	ID      uuid.UUID
	From    job.State
	To      job.State
	Attempt int // required when From is RUNNING (fencing)
	Now     time.Time
	// To QUEUED or RETRY: when the job becomes due (zero = Now).
	RunAt time.Time
	// To RUNNING: the lease.
	Owner          string
	LeaseExpiresAt time.Time
	// From RUNNING: the attempt's end (Outcome "" = job.OutcomeOf(To)).
	Outcome job.Outcome
	Result  json.RawMessage // To SUCCESS; nil for none
	// Error is the attempt's error from RUNNING, or an explanation of the
	// change; whether it replaces last_error is job.SetsLastError's rule
	// (from RUNNING always, even "", to SUCCESS never, otherwise when not
	// "").
	Error string
}

// Validate checks p before any row is read: *job.InvalidTransitionError
// when the state machine has no From → To; an error when a move to RUNNING
// lacks its owner or lease expiry.
func (p *JobTransitionParams) Validate() error {
	if !job.CanTransition(p.From, p.To) {
		return &job.InvalidTransitionError{JobID: p.ID.String(), From: p.From, To: p.To}
	}
	if p.To == job.StateRunning && (p.Owner == "" || p.LeaseExpiresAt.IsZero()) {
		return fmt.Errorf("transition job %s to %s: owner and lease expiry are required", p.ID, p.To)
	}
	return nil
}

// JobCancelParams cancels one job.
type JobCancelParams struct {
	ID  uuid.UUID
	Now time.Time
}

// JobCancelResult is the outcome of one cancel.
type JobCancelResult struct {
	Job *job.Row // as the cancel left it
	// Canceled: this cancel moved the job from CREATED, QUEUED or RETRY to
	// CANCELED. False for a RUNNING job (the request is recorded, the
	// holder ends it) and for a job that was CANCELED already.
	Canceled bool
}

// JobCancelManyParams cancels many jobs.
type JobCancelManyParams struct {
	IDs []uuid.UUID
	// Error, when not "", becomes the last_error of the jobs this call
	// CANCELS (job.SetsLastError: an explanation, such as "the run was
	// canceled"), stored as CleanText; "" keeps theirs, as JobCancel
	// does. A RUNNING job's is never changed.
	Error string
	// LeaveRunning: a RUNNING job is not asked to stop, only reported
	// (a run that failed lets its running jobs finish).
	LeaveRunning bool
	Now          time.Time
}

// ErrorText is Error as every backend stores it (CleanText).
func (p *JobCancelManyParams) ErrorText() string { return CleanText(p.Error) }

// JobCancelManyResult is what JobCancelMany did to one job.
type JobCancelManyResult struct {
	// State is the job's state after the call: CANCELED (by this call
	// or before it), RUNNING (asked to stop, unless LeaveRunning: it
	// ends later), SUCCESS or DEAD; "" when there is no such job.
	State job.State
	// Canceled: this call moved the job from CREATED, QUEUED or RETRY
	// to CANCELED.
	Canceled bool
}

// JobRetryParams retries one job by hand.
type JobRetryParams struct {
	ID  uuid.UUID
	Now time.Time
}

// JobScheduleParams: move up to Max due RETRY jobs to QUEUED.
type JobScheduleParams struct {
	Now time.Time
	Max int
}

// JobListExpiredParams lists up to Max RUNNING jobs with leases expired at Now.
type JobListExpiredParams struct {
	Now time.Time
	Max int
}

// JobDeleteFinishedParams deletes up to Max finished jobs.
type JobDeleteFinishedParams struct {
	FinishedBefore time.Time
	Max            int
}

// QueueSetPausedParams pauses or resumes a queue.
type QueueSetPausedParams struct {
	Name   string
	Paused bool
	Now    time.Time
}

// Validate refuses a queue name that is not text (checkText).
func (p *QueueSetPausedParams) Validate() error {
	pr := problemsOf("pause or resume queue")
	checkText(pr, "queue", p.Name)
	return pr.Err()
}

// Queue is a queue's pause flag and job counts by state.
type Queue struct {
	Name      string
	Paused    bool
	UpdatedAt time.Time // of the pause flag; zero if never set
	Counts    map[job.State]int
	// AtLeast: the states whose count is a lower bound (QueueCount's
	// capped reads stopped before the end); nil from QueueList, which
	// counts exactly.
	AtLeast map[job.State]bool
}
