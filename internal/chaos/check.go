// Package chaos proves docket's reliability promises: a checker of the
// invariants that must hold on any docket database, and a chaos run that
// starts several docket processes on one PostgreSQL (or one SQLite file)
// and an external NATS, kills, pauses and restarts them on a seeded random
// schedule while jobs are submitted, then checks the invariants once
// everything is quiet.
package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/events"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// Script is how a job's handler behaves, and so which terminal state the
// job must end in.
type Script string

// Scripts of the chaos run.
const (
	ScriptSuccess Script = "success" // returns nil → SUCCESS
	ScriptRetry   Script = "retry"   // fails retryably on early attempts, then succeeds → SUCCESS
	ScriptFatal   Script = "fatal"   // fails for good → DEAD
	ScriptCancel  Script = "cancel"  // runs until canceled; the client cancels it → CANCELED
)

// Want is the terminal state a job of this script must end in.
func (s Script) Want() job.State {
	switch s {
	case ScriptFatal:
		return job.StateDead
	case ScriptCancel:
		return job.StateCanceled
	default:
		return job.StateSuccess
	}
}

// Expectations is what the checker holds the database to.
type Expectations struct {
	// Jobs maps each submitted idempotency key to its script. Jobs of the
	// database without a key, or with a key not listed, are checked for
	// everything but their terminal state.
	Jobs map[string]Script
	// Now is the instant of the check; zero means time.Now().
	Now time.Time
	// RescueWindow is how long past its lease's expiry a RUNNING job may
	// wait for the rescuer (rescue interval plus slack). Zero: one minute.
	RescueWindow time.Duration
	// AllowNonTerminal skips the "every job is terminal" check (for a
	// database still being worked on).
	AllowNonTerminal bool
	// Deliveries are the event consumers to hold to the outbox: each
	// must have seen every job transition of the outbox.
	Deliveries []Delivery
	// Runs maps each started run's idempotency key to the terminal state
	// it must end in. Runs without a key, or with a key not listed, are
	// checked for everything but their terminal state.
	Runs map[string]flow.RunState
	// ReapWindow is how long past its expiry an assignment may stay
	// ACTIVE before the reaper frees it (reaper interval plus slack).
	// Zero: one minute.
	ReapWindow time.Duration
	// FlagWindow is how long after a contributor's flag an assignment
	// they take in the pool is not yet a violation (KindFlaggedTake): a
	// take reads their state before it takes, and the flag's time is
	// when its transaction began, not when it committed. 0: 10 s.
	FlagWindow time.Duration
}

// Delivery is what one consumer of events (an SSE client, a webhook
// receiver) saw: how many times it got each event id.
type Delivery struct {
	Name string
	Seen map[string]int
	// ExactlyOnce: a repeat is a violation (SSE resumed with
	// Last-Event-ID); otherwise repeats are allowed (webhooks are at least
	// once).
	ExactlyOnce bool
}

// Kinds of violation.
const (
	KindMissing          = "missing"           // a submitted key has no job
	KindDuplicate        = "duplicate"         // a key has more than one job
	KindNotTerminal      = "not_terminal"      // the job is not finished
	KindWrongState       = "wrong_state"       // finished, but not as its script implies
	KindDoubleCompletion = "double_completion" // RUNNING→SUCCESS accepted more than once
	KindOverlap          = "overlap"           // two attempts completed by their holders overlapped in time
	KindAttempts         = "attempts"          // more attempts used than allowed
	KindOutbox           = "outbox"            // the outbox's transitions are not the job's path
	KindExpiredLease     = "expired_lease"     // RUNNING with a lease expired beyond the rescue window
	KindUndelivered      = "undelivered"       // a consumer never got a committed event
	KindRedelivered      = "redelivered"       // an exactly-once consumer got an event twice
	KindPhantomEvent     = "phantom_event"     // a consumer got an event that is not in the outbox
	KindBadSignature     = "bad_signature"     // a webhook delivery failed webhook.Verify (chaos run only)
)

// Violation is one broken invariant.
type Violation struct {
	Kind   string
	JobID  uuid.UUID
	RunID  uuid.UUID // set instead of JobID for a workflow invariant
	UnitID uuid.UUID // set for a human work invariant (with RunID when the unit has a run)
	Key    string
	Detail string
}

func (v Violation) String() string {
	if v.UnitID != uuid.Nil {
		return fmt.Sprintf("%s: unit %s: %s", v.Kind, v.UnitID, v.Detail)
	}
	if v.RunID != uuid.Nil {
		return fmt.Sprintf("%s: run %s (key %q): %s", v.Kind, v.RunID, v.Key, v.Detail)
	}
	return fmt.Sprintf("%s: job %s (key %q): %s", v.Kind, v.JobID, v.Key, v.Detail)
}

// Snapshot is everything the checker reads from a database.
type Snapshot struct {
	Jobs     []*job.Row
	Attempts map[uuid.UUID][]*job.Attempt
	// Transitions are the outbox's job transitions in outbox order.
	Transitions []Change
	// Flows are the workflow runs, their steps and their transitions.
	Flows *FlowSnapshot
	// Crowd is the human work tables (LoadCrowd); nil skips their
	// invariants.
	Crowd *CrowdSnapshot
}

// Change is one job transition of the outbox with its event id.
type Change struct {
	EventID string
	job.Transition
}

// pageSize of the reads of Load.
const pageSize = 1000

// Reader is what Load and Check read of the store.
type Reader interface {
	JobList(ctx context.Context, p *store.JobListParams) ([]*job.Row, error)
	JobAttemptList(ctx context.Context, id uuid.UUID) ([]*job.Attempt, error)
	FlowReader // OutboxList, and the workflow tables
}

// Load reads every job, its attempts, the whole outbox, and every
// workflow run with its steps (LoadFlows).
func Load(ctx context.Context, st Reader) (*Snapshot, error) {
	s := &Snapshot{Attempts: map[uuid.UUID][]*job.Attempt{}}
	before := uuid.Nil
	for {
		rows, err := st.JobList(ctx, &store.JobListParams{BeforeID: before, Limit: pageSize})
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		s.Jobs = append(s.Jobs, rows...)
		if len(rows) < pageSize {
			break
		}
		before = rows[len(rows)-1].ID
	}
	for _, r := range s.Jobs {
		as, err := st.JobAttemptList(ctx, r.ID)
		if err != nil {
			return nil, fmt.Errorf("list attempts of job %s: %w", r.ID, err)
		}
		s.Attempts[r.ID] = as
	}
	var after int64
	for {
		evs, err := st.OutboxList(ctx, &store.OutboxListParams{AfterID: after, Limit: pageSize})
		if err != nil {
			return nil, fmt.Errorf("list outbox: %w", err)
		}
		for _, ev := range evs {
			after = ev.ID
			if ev.Type != job.EventStateChanged {
				continue
			}
			var d job.StateChangedData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				return nil, fmt.Errorf("decode outbox row %d: %w", ev.ID, err)
			}
			for i, tr := range d.Transitions {
				s.Transitions = append(s.Transitions, Change{EventID: events.EventID(ev.ID, i), Transition: tr})
			}
		}
		if len(evs) < pageSize {
			break
		}
	}
	f, err := LoadFlows(ctx, st)
	if err != nil {
		return nil, err
	}
	s.Flows = f
	return s, nil
}

// Check loads the database and checks it.
func Check(ctx context.Context, st Reader, exp Expectations) ([]Violation, error) {
	s, err := Load(ctx, st)
	if err != nil {
		return nil, err
	}
	return s.Check(exp), nil
}

// Check returns every invariant the snapshot breaks; none when it holds.
func (s *Snapshot) Check(exp Expectations) []Violation {
	now := exp.Now
	if now.IsZero() {
		now = time.Now()
	}
	window := exp.RescueWindow
	if window == 0 {
		window = time.Minute
	}
	var out []Violation
	add := func(kind string, r *job.Row, format string, args ...any) {
		v := Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)}
		if r != nil {
			v.JobID, v.Key = r.ID, r.IdempotencyKey
		}
		out = append(out, v)
	}

	byKey := map[string][]*job.Row{}
	for _, r := range s.Jobs {
		if r.IdempotencyKey != "" {
			byKey[r.IdempotencyKey] = append(byKey[r.IdempotencyKey], r)
		}
	}
	keys := make([]string, 0, len(exp.Jobs))
	for k := range exp.Jobs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch rs := byKey[k]; len(rs) {
		case 0:
			out = append(out, Violation{Kind: KindMissing, Key: k, Detail: "no job has this idempotency key"})
		case 1:
		default:
			add(KindDuplicate, rs[0], "%d jobs have this idempotency key", len(rs))
		}
	}

	paths := map[uuid.UUID][]job.Transition{}
	for _, tr := range s.Transitions {
		paths[tr.JobID] = append(paths[tr.JobID], tr.Transition)
	}
	known := map[uuid.UUID]bool{}
	for _, r := range s.Jobs {
		known[r.ID] = true
		if !exp.AllowNonTerminal && !r.State.Terminal() {
			add(KindNotTerminal, r, "state %s", r.State)
		}
		if script, ok := exp.Jobs[r.IdempotencyKey]; ok && r.State.Terminal() && r.State != script.Want() {
			add(KindWrongState, r, "script %s wants %s, job is %s (last error %q)", script, script.Want(), r.State, r.LastError)
		}
		if r.AttemptsUsed() > r.MaxAttempts {
			add(KindAttempts, r, "%d attempts used of %d", r.AttemptsUsed(), r.MaxAttempts)
		}
		if r.State == job.StateRunning && r.LeaseExpiresAt.Before(now.Add(-window)) {
			add(KindExpiredLease, r, "lease of attempt %d expired at %s, more than %v before %s", r.Attempt, r.LeaseExpiresAt.Format(time.RFC3339Nano), window, now.Format(time.RFC3339Nano))
		}
		s.checkAttempts(r, add)
		checkPath(r, paths[r.ID], add)
	}
	for id, p := range paths {
		if !known[id] {
			add(KindOutbox, &job.Row{ID: id}, "%d outbox transitions of a job that does not exist", len(p))
		}
	}
	for _, d := range exp.Deliveries {
		out = append(out, s.checkDelivery(d)...)
	}
	if s.Flows != nil {
		out = append(out, s.checkFlows(s.Flows, exp)...)
	}
	if s.Crowd != nil {
		out = append(out, s.checkCrowd(s.Crowd, exp, now)...)
	}
	return out
}

// checkDelivery: the consumer saw every outbox transition (once, if
// ExactlyOnce) and nothing else. Several misses of one consumer are one
// violation per event, so the count says how much was lost.
func (s *Snapshot) checkDelivery(d Delivery) []Violation {
	var out []Violation
	committed := make(map[string]bool, len(s.Transitions))
	for _, tr := range s.Transitions {
		committed[tr.EventID] = true
		switch n := d.Seen[tr.EventID]; {
		case n == 0:
			out = append(out, Violation{Kind: KindUndelivered, JobID: tr.JobID, Detail: fmt.Sprintf("%s never got event %s (%s→%s)", d.Name, tr.EventID, tr.From, tr.To)})
		case n > 1 && d.ExactlyOnce:
			out = append(out, Violation{Kind: KindRedelivered, JobID: tr.JobID, Detail: fmt.Sprintf("%s got event %s %d times", d.Name, tr.EventID, n)})
		}
	}
	ids := make([]string, 0, len(d.Seen))
	for id := range d.Seen {
		if !committed[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, Violation{Kind: KindPhantomEvent, Detail: fmt.Sprintf("%s got event %s, which no outbox row holds", d.Name, id)})
	}
	return out
}

// Rescued counts the attempts that ended because their lease expired and
// the rescuer took the job back (outcome expired). Each is a lease lost by
// its holder: from then on the holder's outcome or renewal of that attempt
// is refused by the attempt fence.
func (s *Snapshot) Rescued() int {
	n := 0
	for _, as := range s.Attempts {
		for _, a := range as {
			if a.Outcome == job.OutcomeExpired {
				n++
			}
		}
	}
	return n
}

// completedByHolder: the attempt's own lease holder reported how it ended
// (as opposed to a rescue or a shutdown refund).
func completedByHolder(o job.Outcome) bool {
	switch o {
	case job.OutcomeSuccess, job.OutcomeError, job.OutcomeTimeout, job.OutcomePanic, job.OutcomeCanceled:
		return true
	}
	return false
}

func (s *Snapshot) checkAttempts(r *job.Row, add func(string, *job.Row, string, ...any)) {
	as := s.Attempts[r.ID]
	successes := 0
	for _, a := range as {
		if a.Outcome == job.OutcomeSuccess {
			successes++
		}
	}
	if successes > 1 {
		add(KindDoubleCompletion, r, "%d attempts ended in success", successes)
	}
	for i, a := range as {
		if !completedByHolder(a.Outcome) || a.FinishedAt.IsZero() {
			continue
		}
		for _, b := range as[i+1:] {
			if !completedByHolder(b.Outcome) || b.FinishedAt.IsZero() {
				continue
			}
			if a.StartedAt.Before(b.FinishedAt) && b.StartedAt.Before(a.FinishedAt) {
				add(KindOverlap, r, "attempts %d [%s, %s] and %d [%s, %s] overlap and both completed",
					a.Attempt, a.StartedAt.Format(time.RFC3339Nano), a.FinishedAt.Format(time.RFC3339Nano),
					b.Attempt, b.StartedAt.Format(time.RFC3339Nano), b.FinishedAt.Format(time.RFC3339Nano))
			}
		}
	}
}

// checkPath: the job's outbox transitions form a path of the state machine
// from "" (its insert) to its current state.
func checkPath(r *job.Row, path []job.Transition, add func(string, *job.Row, string, ...any)) {
	if len(path) == 0 {
		add(KindOutbox, r, "no outbox transition at all (state %s)", r.State)
		return
	}
	successes := 0
	prev := job.State("")
	for i, tr := range path {
		if tr.From != prev {
			add(KindOutbox, r, "transition %d is %s→%s but the previous one ended in %q", i, tr.From, tr.To, prev)
			return
		}
		if i == 0 && tr.From != "" {
			add(KindOutbox, r, "first transition is %s→%s, not from the insert", tr.From, tr.To)
			return
		}
		if i > 0 && !job.CanTransition(tr.From, tr.To) {
			add(KindOutbox, r, "transition %d %s→%s is not in the state machine", i, tr.From, tr.To)
			return
		}
		if tr.From == job.StateRunning && tr.To == job.StateSuccess {
			successes++
		}
		prev = tr.To
	}
	if successes > 1 {
		add(KindDoubleCompletion, r, "the outbox has %d RUNNING→SUCCESS transitions", successes)
	}
	if prev != r.State {
		add(KindOutbox, r, "the outbox's last transition ends in %s, the job is %s", prev, r.State)
	}
}
