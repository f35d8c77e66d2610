package job

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Row is one job as stored. The store converts its own rows into this type;
// nothing above the store sees driver types.
type Row struct {
	ID              uuid.UUID // UUIDv7, time ordered; the listing cursor
	Type            string
	Queue           string
	Priority        int // 0 (first) .. 9 (last)
	Payload         json.RawMessage
	Result          json.RawMessage // nil until a handler returns one
	IdempotencyKey  string          // "" when the job has none
	State           State
	Attempt         int // attempts started so far; the fencing token of the current lease
	MaxAttempts     int
	RunAt           time.Time     // not acquired before this instant
	Timeout         time.Duration // per-attempt deadline; 0 means the worker default
	LeaseOwner      string        // node id of the current lease holder, "" when not RUNNING
	LeaseExpiresAt  time.Time     // zero when not RUNNING
	AttemptedAt     time.Time     // start of the current (or last) attempt; zero before the first
	Progress        float64       // 0..100
	ProgressMsg     string
	CancelRequested bool // a cancel was asked for while RUNNING
	Version         int  // bumped on every change; optimistic lock for edits
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      time.Time // zero until SUCCESS, DEAD or CANCELED
	// LastError is the error of the latest failed attempt ("" when it
	// failed without a message), or an explanation given with a later
	// change; SUCCESS keeps it. See SetsLastError.
	LastError string
	// AttemptBase is Attempt as it stood at the last manual retry (plus one
	// for every attempt refunded because its worker shut down). Attempt
	// itself never goes back: it is the fencing token of the lease.
	AttemptBase int
}

// AttemptsUsed is how many attempts count against MaxAttempts: those
// started since the last manual retry, less the refunded ones.
func (r *Row) AttemptsUsed() int { return r.Attempt - r.AttemptBase }

// Ref names one attempt of one job: the pair is the fencing token of a lease.
type Ref struct {
	ID      uuid.UUID
	Attempt int
}

// Outcome is how an attempt ended.
type Outcome string

// Attempt outcomes; an attempt still running has OutcomeRunning.
const (
	OutcomeRunning  Outcome = "running"
	OutcomeSuccess  Outcome = "success"
	OutcomeError    Outcome = "error"    // handler returned an error (retryable or fatal)
	OutcomeTimeout  Outcome = "timeout"  // handler exceeded its deadline
	OutcomePanic    Outcome = "panic"    // handler panicked
	OutcomeExpired  Outcome = "expired"  // lease expired; rescued
	OutcomeCanceled Outcome = "canceled" // cancel honoured by the holder
	// OutcomeInterrupted: the worker shut down before the handler returned
	// and gave the lease back.
	OutcomeInterrupted Outcome = "interrupted"
)

// Attempt is one execution of a job, for history and audit.
type Attempt struct {
	JobID      uuid.UUID
	Attempt    int
	Node       string
	StartedAt  time.Time
	FinishedAt time.Time // zero while running
	Outcome    Outcome
	Error      string
}

// Duration is how long the attempt ran (0 while running).
func (a *Attempt) Duration() time.Duration {
	if a.FinishedAt.IsZero() {
		return 0
	}
	return a.FinishedAt.Sub(a.StartedAt)
}
