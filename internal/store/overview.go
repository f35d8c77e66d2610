package store

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/docket-run/docket/internal/job"
)

// Overviewer reads the dashboard's figures with bounded queries: no count
// over the whole jobs table, whatever its size (issue 15).
type Overviewer interface {
	// JobOverview reads queue depths, the DEAD count, the jobs finished per
	// minute and the newest jobs' wait before their start, each bounded as
	// JobOverviewParams says.
	JobOverview(ctx context.Context, p *JobOverviewParams) (*JobOverview, error)
	// QueueCount is QueueList with capped counts: every queue with QUEUED
	// jobs, with jobs among the others read, or a row in the queues
	// table, by name. A queue's QUEUED jobs are counted up to Cap+1
	// through the acquire index; of every other state at most Cap+1 jobs
	// are read over all queues (through the state's own index) and
	// counted by queue, so when that read was cut every queue's figure of
	// the state is a lower bound. Queue.AtLeast names the states whose
	// figure is one. No read grows with the jobs table.
	QueueCount(ctx context.Context, p *QueueCountParams) ([]*Queue, error)
}

// QueueCountParams bounds QueueCount.
type QueueCountParams struct {
	Cap int // > 0
	// After is the cursor: only queues whose name sorts after it (the
	// previous page's last name); "" starts at the first.
	After string
	// Limit: at most this many queues; non-positive: every one.
	Limit int
}

// QueueCounts assembles QueueCount's answer from the reads every backend
// makes: the queues with their pause flag and QUEUED depth (Queued), then
// the other states' capped reads counted by queue (Other); Done marks the
// lower bounds and orders the queues by name.
type QueueCounts struct {
	cap    int
	after  string
	limit  int
	out    []*Queue
	byName map[string]*Queue
	total  map[job.State]int
}

// NewQueueCounts collects a QueueCount read with p's cap, for p's page.
func NewQueueCounts(p *QueueCountParams) *QueueCounts {
	return &QueueCounts{cap: p.Cap, after: p.After, limit: p.Limit, byName: map[string]*Queue{}, total: map[job.State]int{}}
}

func (c *QueueCounts) queue(name string) *Queue {
	q := c.byName[name]
	if q == nil {
		q = &Queue{Name: name, Counts: map[job.State]int{}, AtLeast: map[job.State]bool{}}
		c.byName[name] = q
		c.out = append(c.out, q)
	}
	return q
}

// Queued adds a queue, its pause flag and its QUEUED jobs (counted up to
// cap+1).
func (c *QueueCounts) Queued(name string, paused bool, updatedAt time.Time, n int) {
	q := c.queue(name)
	q.Paused, q.UpdatedAt = paused, updatedAt
	if n > 0 {
		q.Counts[job.StateQueued] = n
	}
	if n > c.cap {
		q.AtLeast[job.StateQueued] = true
	}
}

// Other records n jobs of state (not QUEUED) in queue, read by a read of
// at most cap+1 jobs of that state.
func (c *QueueCounts) Other(state job.State, queue string, n int) {
	c.queue(queue).Counts[state] += n
	c.total[state] += n
}

// Done returns the page of queues by name, each state whose read was cut
// marked a lower bound in every queue. The reads cover every queue (their
// caps bound them), so a queue's figures are the same on any page.
func (c *QueueCounts) Done() []*Queue {
	for st, n := range c.total {
		if n > c.cap {
			for _, q := range c.out {
				q.AtLeast[st] = true
			}
		}
	}
	slices.SortFunc(c.out, func(a, b *Queue) int { return strings.Compare(a.Name, b.Name) })
	out := c.out
	if c.after != "" {
		i, found := slices.BinarySearchFunc(out, c.after, func(q *Queue, name string) int { return strings.Compare(q.Name, name) })
		if found {
			i++
		}
		out = out[i:]
	}
	if c.limit > 0 && len(out) > c.limit {
		out = out[:c.limit]
	}
	return out
}

// QueueCountStates are the states QueueCount reads over all queues, each
// through an index that holds only that state's jobs (with the id or the
// key its capped read is ordered by).
var QueueCountStates = []job.State{job.StateCreated, job.StateRunning, job.StateRetry, job.StateSuccess, job.StateDead, job.StateCanceled}

// JobOverviewParams bounds JobOverview.
type JobOverviewParams struct {
	// Cap bounds every count: a queue's QUEUED jobs are counted up to
	// Cap+1 through the acquire index, the DEAD jobs up to Cap+1 through
	// the state index, and at most Cap+1 RUNNING and Cap+1 RETRY jobs are
	// read (over all queues, through their partial indexes). A count above
	// Cap means "more than Cap".
	Cap int
	// Since is the start of the finished-jobs window; at most FinishedCap
	// jobs finished since then are read, newest first.
	Since       time.Time
	FinishedCap int
	// LatencyOf: the wait of the newest this many finished jobs that ran.
	LatencyOf int
}

// JobOverview is JobOverview's answer.
type JobOverview struct {
	// Queues: every queue with QUEUED jobs, RUNNING or RETRY jobs among
	// those read, or a row in the queues table; by name.
	Queues []*QueueDepth
	// RunningCut, RetryCut: Cap+1 jobs of that state were read, so a
	// queue's figure is a lower bound.
	RunningCut, RetryCut bool
	Dead                 int // up to Cap+1
	// Finished: per minute (the start of the minute, UTC), oldest first,
	// only minutes with jobs. FinishedCut: FinishedCap jobs were read, so
	// minutes before FinishedFrom are not counted.
	Finished     []*FinishedMinute
	FinishedCut  bool
	FinishedFrom time.Time
	// Waits: run_at (due) to attempted_at (the last attempt's start) of
	// the newest LatencyOf finished jobs that ran, newest first.
	Waits []time.Duration
}

// QueueDepth is one queue's waiting and running jobs.
type QueueDepth struct {
	Name                   string
	Paused                 bool
	Queued, Running, Retry int
}

// FinishedMinute counts the jobs finished in one minute by final state.
type FinishedMinute struct {
	At                        time.Time
	Succeeded, Dead, Canceled int
}

// FinishedRow is one finished job as JobOverview reads it.
type FinishedRow struct {
	FinishedAt  time.Time
	State       job.State
	RunAt       time.Time
	AttemptedAt time.Time // zero: never ran
}

// SummarizeFinished fills o.Finished, o.FinishedCut, o.FinishedFrom and
// o.Waits from rows (newest first, as read with p's bounds). Both
// backends use it.
func SummarizeFinished(o *JobOverview, p *JobOverviewParams, rows []FinishedRow) {
	o.FinishedFrom = p.Since.UTC()
	if len(rows) >= p.FinishedCap && len(rows) > 0 {
		o.FinishedCut = true
		o.FinishedFrom = rows[len(rows)-1].FinishedAt.UTC()
	}
	byMinute := map[time.Time]*FinishedMinute{}
	for i := len(rows) - 1; i >= 0; i-- {
		r := rows[i]
		m := r.FinishedAt.UTC().Truncate(time.Minute)
		fm := byMinute[m]
		if fm == nil {
			fm = &FinishedMinute{At: m}
			byMinute[m] = fm
			o.Finished = append(o.Finished, fm)
		}
		switch r.State {
		case job.StateSuccess:
			fm.Succeeded++
		case job.StateDead:
			fm.Dead++
		case job.StateCanceled:
			fm.Canceled++
		}
	}
	for _, r := range rows {
		if len(o.Waits) >= p.LatencyOf {
			break
		}
		if r.AttemptedAt.IsZero() {
			continue
		}
		w := r.AttemptedAt.Sub(r.RunAt)
		if w < 0 {
			w = 0
		}
		o.Waits = append(o.Waits, w)
	}
}

// QueueDepths assembles a JobOverview's queues from the two capped reads
// every backend makes: the QUEUED depth of each queue (Queued), then the
// RUNNING and RETRY counts by queue (Active); Done sets the cuts and
// orders the queues by name.
type QueueDepths struct {
	o              *JobOverview
	byName         map[string]*QueueDepth
	running, retry int
}

// NewQueueDepths collects into o.Queues.
func NewQueueDepths(o *JobOverview) *QueueDepths {
	return &QueueDepths{o: o, byName: map[string]*QueueDepth{}}
}

// Queued adds a queue with its QUEUED depth.
func (d *QueueDepths) Queued(q *QueueDepth) {
	d.byName[q.Name] = q
	d.o.Queues = append(d.o.Queues, q)
}

// Active records n jobs of state (RUNNING or RETRY) in queue.
func (d *QueueDepths) Active(state, queue string, n int) {
	q := d.byName[queue]
	if q == nil {
		q = &QueueDepth{Name: queue}
		d.Queued(q)
	}
	if state == string(job.StateRunning) {
		q.Running, d.running = n, d.running+n
	} else {
		q.Retry, d.retry = n, d.retry+n
	}
}

// Done marks the RUNNING and RETRY reads cut when they read more than
// limit jobs, and orders the queues by name.
func (d *QueueDepths) Done(limit int) {
	d.o.RunningCut, d.o.RetryCut = d.running > limit, d.retry > limit
	slices.SortFunc(d.o.Queues, func(a, b *QueueDepth) int { return strings.Compare(a.Name, b.Name) })
}
