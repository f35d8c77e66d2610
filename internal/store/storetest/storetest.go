// Package storetest is the conformance suite of store.Store. Each backend
// runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { ... })
//	}
//
// Tests are grouped as package store is, by domain (TestConformance/Jobs/…,
// /Cluster, /Keys, /Outbox, /Inbox, /Webhooks, /Flows, /Crowd, and /Store for the database
// as a whole and InTx), and each domain's tests are in files named after it.
//
// Every test opens its own store, so tests run in parallel and may assert on
// the whole outbox. Time is passed in as Now, starting from a fixed base, so
// no test sleeps.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// opener makes a migrated, empty store for one test.
type opener = func(t *testing.T) store.Store

// Run runs every conformance test against stores made by open. open must
// return a migrated, empty store isolated from other tests and close it via
// t.Cleanup. The store must use the default store.Options (the aging tests
// assume PriorityAgingDefault). Every leaf test calls open once.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	type group struct {
		name string
		run  func(t *testing.T, open opener)
	}
	// One entry per domain of package store, named as it is there; each
	// domain's tests live in files named after it (jobs_*.go, cluster.go,
	// …), and the Store's own in store_*.go.
	domains := []struct {
		name   string
		groups []group
	}{
		{"Store", []group{
			{"Basics", testBasics},
			{"Migration", testMigration},
			{"Subscribe", testSubscribe},
			{"Tx", testTx},
			{"Text", testText},
		}},
		{"Jobs", []group{
			{"Insert", testInsert},
			{"Acquire", testAcquire},
			{"SortKey", testSortKeyFollowsRunAt},
			{"Finish", testFinish},
			{"Transition", testTransition},
			{"LastError", testLastError},
			{"Cancel", testCancel},
			{"CancelMany", testCancelMany},
			{"Retry", testRetry},
			{"CancelOnRetry", testCancelOnRetry},
			{"HeartbeatProgress", testHeartbeatProgress},
			{"Maintenance", testMaintenance},
			{"List", testList},
			{"ListPayload", testListPayload},
			{"ListPayloadDeep", testListPayloadDeep},
			{"ListPayloadNumber", testListPayloadNumber},
			{"Queue", testQueue},
			{"QueueOf", testJobQueueOf},
			{"Overview", testOverview},
			{"QueueCount", testQueueCount},
			{"Concurrency", testConcurrency},
		}},
		{"Cluster", []group{
			{"Leader", testLeader},
			{"Node", testNode},
			{"AnalyzeGrown", testAnalyzeGrown},
		}},
		{"Keys", []group{
			{"APIKey", testAPIKey},
			{"Secret", testSecret},
		}},
		{"Outbox", []group{
			{"Write", testOutbox},
			{"Relay", testOutboxRelay},
		}},
		{"Inbox", []group{
			{"Handle", testInboxHandle},
			{"DeadLetter", testDeadLetter},
		}},
		{"Webhooks", []group{
			{"Webhook", testWebhook},
		}},
		{"Flows", []group{
			{"Workflow", testWorkflowVersions},
			{"RunInsert", testRunInsert},
			{"RunList", testRunList},
			{"RunTransition", testRunTransition},
			{"Steps", testSteps},
			{"Tx", testFlowTx},
			{"StepSweep", testStepSweep},
		}},
		{"Crowd", []group{
			{"Tasks", testTasks},
			{"Pools", testPools},
			{"PoolCompleteMany", testPoolCompleteMany},
			{"PoolCompleteManyPastOpen", testPoolCompleteManyPastOpen},
			{"UnitsClosing", testUnitsClosing},
			{"PoolReopen", testPoolReopen},
			{"Units", testUnits},
			{"UnitCancelMany", testUnitCancelMany},
			{"Overlap", testOverlap},
			{"Contributors", testContributors},
			{"QualityList", testQualityList},
			{"Assignments", testAssignments},
			{"Judgments", testJudgments},
			{"Quality", testQuality},
			{"QualityRepair", testQualityRepair},
			{"Review", testReview},
		}},
	}
	for _, d := range domains {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			for _, g := range d.groups {
				t.Run(g.name, func(t *testing.T) {
					t.Parallel()
					g.run(t, open)
				})
			}
		})
	}
}

// base is the suite's "now"; tests move time by adding to it.
var base = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// at returns base + d.
func at(d time.Duration) time.Time { return base.Add(d) }

const (
	// owner is the default lease holder.
	owner = "node-a"
	// lease is the default lease duration.
	lease = time.Minute
	// timeTolerance: SQLite keeps microseconds.
	timeTolerance = time.Microsecond
)

// bundle is what every test works with: its own store and a context.
type bundle struct {
	ctx context.Context
	s   store.Store
}

// setup opens a fresh store for t.
func setup(t *testing.T, open opener) *bundle {
	t.Helper()
	s := open(t)
	require.NotNil(t, s, "open returned a nil store")
	return &bundle{ctx: t.Context(), s: s}
}

func newID() uuid.UUID { return uuid.Must(uuid.NewV7()) }

// newQueue returns a queue name no other job of the test uses.
func newQueue() string { return "q_" + uuid.NewString()[:8] }

// newJob describes a due QUEUED job of type "email" in queue.
func newJob(queue string) *store.JobInsertParams {
	return &store.JobInsertParams{
		ID:          newID(),
		Type:        "email",
		Queue:       queue,
		Payload:     json.RawMessage(`{"to":"a@example.com","n":1}`),
		State:       job.StateQueued,
		MaxAttempts: 5,
	}
}

// insertAt inserts ps in one call at now.
func (b *bundle) insertAt(t *testing.T, now time.Time, ps ...*store.JobInsertParams) []*store.JobInsertResult {
	t.Helper()
	res, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: now})
	require.NoError(t, err)
	require.Len(t, res, len(ps))
	for i, r := range res {
		require.NotNil(t, r, "result %d", i)
		require.NotNil(t, r.Job, "result %d", i)
	}
	return res
}

// insert inserts ps in one call at base.
func (b *bundle) insert(t *testing.T, ps ...*store.JobInsertParams) []*store.JobInsertResult {
	t.Helper()
	return b.insertAt(t, base, ps...)
}

// insertOne inserts one new job at base and returns its row.
func (b *bundle) insertOne(t *testing.T, p *store.JobInsertParams) *job.Row {
	t.Helper()
	res := b.insert(t, p)
	require.False(t, res[0].Duplicate)
	require.Equal(t, p.ID, res[0].Job.ID)
	return res[0].Job
}

func (b *bundle) get(t *testing.T, id uuid.UUID) *job.Row {
	t.Helper()
	row, err := b.s.JobGet(b.ctx, id)
	require.NoError(t, err)
	require.NotNil(t, row)
	require.Equal(t, id, row.ID)
	return row
}

// acquire leases up to max jobs of queue to owner for lease at now.
func (b *bundle) acquire(t *testing.T, queue string, max int, now time.Time) []*job.Row {
	t.Helper()
	rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{
		Queue: queue, Max: max, Owner: owner, LeaseDuration: lease, Now: now,
	})
	require.NoError(t, err)
	require.LessOrEqual(t, len(rows), max)
	return rows
}

// finish finishes attempts at now and returns the aligned results: true
// where the finish was applied.
func (b *bundle) finish(t *testing.T, now time.Time, fs ...*store.JobFinishParams) []bool {
	t.Helper()
	return applied(b.finishEnded(t, now, fs...))
}

// finishEnded finishes attempts at now and returns the states the jobs
// ended in ("" where fenced).
func (b *bundle) finishEnded(t *testing.T, now time.Time, fs ...*store.JobFinishParams) []job.State {
	t.Helper()
	ended, err := b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{Jobs: fs, Now: now})
	require.NoError(t, err)
	require.Len(t, ended, len(fs))
	return ended
}

// applied maps JobFinishMany's result to true where a finish was applied.
func applied(ended []job.State) []bool {
	ok := make([]bool, len(ended))
	for i, to := range ended {
		ok[i] = to != ""
	}
	return ok
}

// finishParams is a plausible end of row's current attempt in state.
func finishParams(row *job.Row, state job.State) *store.JobFinishParams {
	p := &store.JobFinishParams{ID: row.ID, Attempt: row.Attempt, State: state}
	switch state {
	case job.StateSuccess:
		p.Outcome = job.OutcomeSuccess
		p.Result = json.RawMessage(`{"ok":true}`)
	case job.StateRetry:
		p.Outcome = job.OutcomeError
		p.Error = "temporary failure"
		p.RunAt = at(30 * time.Minute)
	case job.StateDead:
		p.Outcome = job.OutcomeError
		p.Error = "fatal failure"
	case job.StateCanceled:
		p.Outcome = job.OutcomeCanceled
		p.Error = "canceled by user"
	}
	return p
}

// Timeline of jobIn: inserted at base, acquired at setupAcquire, finished at
// setupFinish. Tests act on such jobs at later.
var (
	setupAcquire = at(time.Second)
	setupFinish  = at(2 * time.Second)
	later        = at(time.Hour)
)

// jobIn makes a fresh job, alone in its own queue, in state using only store
// methods: CREATED by insert, QUEUED by insert, RUNNING by insert+acquire,
// RETRY/SUCCESS/DEAD/CANCELED by insert+acquire+finish.
func (b *bundle) jobIn(t *testing.T, state job.State) *job.Row {
	t.Helper()
	p := newJob(newQueue())
	if state == job.StateCreated {
		p.State = job.StateCreated
	}
	row := b.insertOne(t, p)
	if state == job.StateCreated || state == job.StateQueued {
		require.Equal(t, state, row.State)
		return row
	}
	rows := b.acquire(t, p.Queue, 1, setupAcquire)
	require.Len(t, rows, 1)
	require.Equal(t, p.ID, rows[0].ID)
	if state == job.StateRunning {
		return b.get(t, p.ID)
	}
	ok := b.finish(t, setupFinish, finishParams(rows[0], state))
	require.Equal(t, []bool{true}, ok)
	row = b.get(t, p.ID)
	require.Equal(t, state, row.State)
	return row
}

// requireTime asserts got is want within the storage precision; a zero want
// requires a zero got.
func requireTime(t *testing.T, want, got time.Time, msgAndArgs ...any) {
	t.Helper()
	if want.IsZero() {
		require.True(t, got.IsZero(), "want zero time, got %v %s", got, fmt.Sprint(msgAndArgs...))
		return
	}
	require.False(t, got.IsZero(), "want %v, got zero time %s", want, fmt.Sprint(msgAndArgs...))
	require.WithinDuration(t, want, got, timeTolerance, msgAndArgs...)
}

// requireUnchanged asserts that after is the same version of the job as
// before.
func requireUnchanged(t *testing.T, before, after *job.Row) {
	t.Helper()
	require.Equal(t, before.ID, after.ID)
	require.Equal(t, before.State, after.State, "state changed")
	require.Equal(t, before.Version, after.Version, "version changed")
	require.Equal(t, before.Attempt, after.Attempt, "attempt changed")
	requireTime(t, before.UpdatedAt, after.UpdatedAt, "updated_at changed")
	require.Equal(t, before.LeaseOwner, after.LeaseOwner, "lease owner changed")
	requireTime(t, before.LeaseExpiresAt, after.LeaseExpiresAt, "lease expiry changed")
	requireTime(t, before.RunAt, after.RunAt, "run_at changed")
	requireTime(t, before.FinishedAt, after.FinishedAt, "finished_at changed")
	require.Equal(t, before.LastError, after.LastError, "last_error changed")
}

// requireNoLease asserts a job holds no lease, as every non-RUNNING job.
func requireNoLease(t *testing.T, row *job.Row) {
	t.Helper()
	require.Empty(t, row.LeaseOwner, "lease owner of a %s job", row.State)
	require.True(t, row.LeaseExpiresAt.IsZero(), "lease expiry of a %s job: %v", row.State, row.LeaseExpiresAt)
}

// outboxSince lists every outbox row with id > after.
func (b *bundle) outboxSince(t *testing.T, after int64) []*store.OutboxEvent {
	t.Helper()
	var all []*store.OutboxEvent
	for {
		evs, err := b.s.OutboxList(b.ctx, &store.OutboxListParams{AfterID: after, Limit: 500})
		require.NoError(t, err)
		if len(evs) == 0 {
			return all
		}
		for _, ev := range evs {
			require.Greater(t, ev.ID, after, "outbox rows out of id order")
			after = ev.ID
		}
		all = append(all, evs...)
	}
}

// outboxMark returns the id of the newest outbox row (0 if none).
func (b *bundle) outboxMark(t *testing.T) int64 {
	t.Helper()
	evs := b.outboxSince(t, 0)
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].ID
}

// requireNoOutbox asserts nothing was written to the outbox after mark.
func (b *bundle) requireNoOutbox(t *testing.T, mark int64) {
	t.Helper()
	evs := b.outboxSince(t, mark)
	require.Empty(t, evs, "outbox rows written: %s", describeEvents(evs))
}

// requireOneStateChanged asserts exactly one outbox row was written after
// mark: a job.state_changed row with exactly the transitions want (in any
// order). It returns that row.
func (b *bundle) requireOneStateChanged(t *testing.T, mark int64, want ...job.Transition) *store.OutboxEvent {
	t.Helper()
	evs := b.outboxSince(t, mark)
	require.Len(t, evs, 1, "want exactly one outbox row, got: %s", describeEvents(evs))
	require.Equal(t, job.EventStateChanged, evs[0].Type)
	got := decodeStateChanged(t, evs[0])
	require.ElementsMatch(t, want, got)
	return evs[0]
}

func decodeStateChanged(t *testing.T, ev *store.OutboxEvent) []job.Transition {
	t.Helper()
	require.Equal(t, job.EventStateChanged, ev.Type)
	var d job.StateChangedData
	require.NoError(t, json.Unmarshal(ev.Data, &d), "decode %s", ev.Data)
	return d.Transitions
}

func describeEvents(evs []*store.OutboxEvent) string {
	s := ""
	for _, ev := range evs {
		s += fmt.Sprintf("\n  #%d %s %s", ev.ID, ev.Type, ev.Data)
	}
	return s
}

// tr is the outbox transition of row from → to; the attempt is row's.
func tr(row *job.Row, from, to job.State) job.Transition {
	return job.Transition{
		JobID: row.ID, JobType: row.Type, Queue: row.Queue,
		From: from, To: to, Attempt: row.Attempt,
	}
}

// ids returns the ids of rows, in order.
func ids(rows []*job.Row) []uuid.UUID {
	out := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// requireInvalidTransition asserts err is an *job.InvalidTransitionError
// naming from and to.
func requireInvalidTransition(t *testing.T, err error, from, to job.State) {
	t.Helper()
	require.Error(t, err)
	var ite *job.InvalidTransitionError
	require.ErrorAs(t, err, &ite, "want *job.InvalidTransitionError, got %T: %v", err, err)
	require.Equal(t, from, ite.From, "InvalidTransitionError.From")
	require.Equal(t, to, ite.To, "InvalidTransitionError.To")
}

func testBasics(t *testing.T, open opener) {
	t.Run("BackendAndPing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		require.Contains(t, []string{"postgres", "sqlite"}, b.s.Backend())
		require.NoError(t, b.s.Ping(b.ctx))
	})
}
