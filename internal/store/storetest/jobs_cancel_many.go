package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// cancelManyBy cancels jobs: on its own (Store.JobCancelMany) or in a
// committed transaction (Tx.JobCancelMany in InTx). Both behave the same.
var cancelManyBy = []struct {
	name   string
	cancel func(b *bundle, p *store.JobCancelManyParams) ([]store.JobCancelManyResult, error)
}{
	{"Store", func(b *bundle, p *store.JobCancelManyParams) ([]store.JobCancelManyResult, error) {
		return b.s.JobCancelMany(b.ctx, p)
	}},
	{"Tx", func(b *bundle, p *store.JobCancelManyParams) ([]store.JobCancelManyResult, error) {
		var out []store.JobCancelManyResult
		err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			out, err = tx.JobCancelMany(ctx, p)
			return err
		})
		return out, err
	}},
}

// cancelManySet is one job in every state, a RUNNING one asked to stop
// already, an id of no job, and the QUEUED job's id twice.
type cancelManySet struct {
	rows    map[string]*job.Row // by name: a state, or "asked"
	unknown uuid.UUID
	ids     []uuid.UUID
	names   []string // aligned with ids ("unknown" for the unknown one)
}

const cancelManyWhy = "the run was canceled"

func (b *bundle) cancelManySet(t *testing.T) *cancelManySet {
	t.Helper()
	set := &cancelManySet{rows: map[string]*job.Row{}, unknown: newID()}
	for _, s := range job.States {
		set.rows[string(s)] = b.jobIn(t, s)
	}
	asked := b.jobIn(t, job.StateRunning)
	_, err := b.s.JobCancel(b.ctx, &store.JobCancelParams{ID: asked.ID, Now: at(10 * time.Second)})
	require.NoError(t, err)
	set.rows["asked"] = b.get(t, asked.ID)
	require.True(t, set.rows["asked"].CancelRequested)
	for _, name := range []string{"CREATED", "QUEUED", "RETRY", "RUNNING", "asked", "SUCCESS", "DEAD", "CANCELED", "unknown", "QUEUED"} {
		id := set.unknown
		if name != "unknown" {
			id = set.rows[name].ID
		}
		set.ids = append(set.ids, id)
		set.names = append(set.names, name)
	}
	return set
}

// want is what JobCancelMany reports for the job named name.
func (set *cancelManySet) want(name string) store.JobCancelManyResult {
	switch name {
	case "CREATED", "QUEUED", "RETRY":
		return store.JobCancelManyResult{State: job.StateCanceled, Canceled: true}
	case "RUNNING", "asked":
		return store.JobCancelManyResult{State: job.StateRunning}
	case "unknown":
		return store.JobCancelManyResult{}
	}
	return store.JobCancelManyResult{State: set.rows[name].State}
}

// check asserts the results and the jobs as read through get after a
// cancel of set with cancelManyWhy at later.
func (set *cancelManySet) check(t *testing.T, got []store.JobCancelManyResult, leaveRunning bool, get func(uuid.UUID) *job.Row) {
	t.Helper()
	require.Len(t, got, len(set.ids))
	for i, name := range set.names {
		require.Equal(t, set.want(name), got[i], "result %d (%s)", i, name)
		if name == "unknown" {
			continue
		}
		before, row := set.rows[name], get(set.ids[i])
		switch name {
		case "CREATED", "QUEUED", "RETRY":
			require.Equal(t, job.StateCanceled, row.State, name)
			requireTime(t, later, row.FinishedAt, name)
			requireTime(t, later, row.UpdatedAt, name)
			require.Greater(t, row.Version, before.Version, name)
			require.Equal(t, cancelManyWhy, row.LastError, name)
			require.Equal(t, before.Attempt, row.Attempt, name)
			requireNoLease(t, row)
		case "RUNNING":
			if leaveRunning {
				requireUnchanged(t, before, row)
				require.False(t, row.CancelRequested, "a RUNNING job left running is not asked to stop")
				continue
			}
			require.Equal(t, job.StateRunning, row.State, "a running job is canceled by its holder")
			require.True(t, row.CancelRequested, "the running job is asked to stop")
			require.Equal(t, before.Attempt, row.Attempt)
			require.Equal(t, before.LeaseOwner, row.LeaseOwner)
			requireTime(t, before.LeaseExpiresAt, row.LeaseExpiresAt)
			require.True(t, row.FinishedAt.IsZero())
			require.Equal(t, before.LastError, row.LastError)
		case "asked":
			require.Equal(t, job.StateRunning, row.State)
			require.True(t, row.CancelRequested)
			require.Equal(t, before.Attempt, row.Attempt)
		default: // finished: left as they are
			requireUnchanged(t, before, row)
			require.Equal(t, before.CancelRequested, row.CancelRequested, name)
		}
	}
}

// transitions are the outbox transitions of a cancel of set.
func (set *cancelManySet) transitions() []job.Transition {
	var out []job.Transition
	for _, s := range []job.State{job.StateCreated, job.StateQueued, job.StateRetry} {
		out = append(out, tr(set.rows[string(s)], s, job.StateCanceled))
	}
	return out
}

func testCancelMany(t *testing.T, open opener) {
	for _, c := range cancelManyBy {
		for _, leave := range []bool{false, true} {
			name := c.name
			if leave {
				name += "/LeaveRunning"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, open)
				set := b.cancelManySet(t)
				mark := b.outboxMark(t)
				got, err := c.cancel(b, &store.JobCancelManyParams{IDs: set.ids, Error: cancelManyWhy, LeaveRunning: leave, Now: later})
				require.NoError(t, err)
				set.check(t, got, leave, func(id uuid.UUID) *job.Row { return b.get(t, id) })
				b.requireOneStateChanged(t, mark, set.transitions()...)
				// A canceled job is never acquired.
				for _, s := range []string{"CREATED", "QUEUED", "RETRY"} {
					require.Empty(t, b.acquire(t, set.rows[s].Queue, 10, later.Add(time.Hour)), s)
				}

				// Again: nothing is canceled any more; the RUNNING jobs
				// are asked again (or left), and no outbox row.
				mark = b.outboxMark(t)
				again, err := c.cancel(b, &store.JobCancelManyParams{IDs: set.ids, Error: "again", LeaveRunning: leave, Now: later.Add(time.Minute)})
				require.NoError(t, err)
				for i, name := range set.names {
					want := set.want(name)
					if want.Canceled {
						want.Canceled = false // CANCELED already
					}
					require.Equal(t, want, again[i], "again: result %d (%s)", i, name)
				}
				b.requireNoOutbox(t, mark)
				require.Equal(t, cancelManyWhy, b.get(t, set.rows["QUEUED"].ID).LastError, "a job CANCELED already keeps its error")
			})
		}
	}

	// In a transaction that rolls back, the transaction reads the
	// cancels, and nothing of them is left: no job changed, no outbox
	// row, and no holder woken.
	t.Run("TxRolledBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		set := b.cancelManySet(t)
		before := map[uuid.UUID]*job.Row{}
		for _, row := range set.rows {
			before[row.ID] = b.get(t, row.ID)
		}
		wakeups, unsubscribe := b.s.Subscribe(store.TopicJobCancel)
		defer unsubscribe()
		mark := b.outboxMark(t)
		boom := errors.New("boom")
		err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			got, err := tx.JobCancelMany(ctx, &store.JobCancelManyParams{IDs: set.ids, Error: cancelManyWhy, Now: later})
			require.NoError(t, err)
			set.check(t, got, false, func(id uuid.UUID) *job.Row {
				row, err := tx.JobGet(ctx, id)
				require.NoError(t, err)
				return row
			})
			// The transaction stays usable.
			none, err := tx.JobCancelMany(ctx, &store.JobCancelManyParams{Now: later})
			require.NoError(t, err)
			require.Empty(t, none)
			return boom
		})
		require.ErrorIs(t, err, boom)
		for id, row := range before {
			requireUnchanged(t, row, b.get(t, id))
			require.Equal(t, row.CancelRequested, b.get(t, id).CancelRequested)
		}
		b.requireNoOutbox(t, mark)
		for {
			select {
			case id := <-wakeups:
				require.NotEqual(t, set.rows["RUNNING"].ID.String(), id, "a holder woken for a rolled back cancel")
				continue
			default:
			}
			break
		}
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		mark := b.outboxMark(t)
		for _, c := range cancelManyBy {
			got, err := c.cancel(b, &store.JobCancelManyParams{Now: later})
			require.NoError(t, err, c.name)
			require.Empty(t, got, c.name)
		}
		b.requireNoOutbox(t, mark)
	})

	// Nothing to cancel: finished jobs and ids of none, no outbox row.
	t.Run("NothingToCancel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		done, dead := b.jobIn(t, job.StateSuccess), b.jobIn(t, job.StateDead)
		mark := b.outboxMark(t)
		for _, c := range cancelManyBy {
			got, err := c.cancel(b, &store.JobCancelManyParams{IDs: []uuid.UUID{newID(), done.ID, dead.ID, uuid.Nil}, Now: later})
			require.NoError(t, err, c.name)
			require.Equal(t, []store.JobCancelManyResult{{}, {State: job.StateSuccess}, {State: job.StateDead}, {}}, got, c.name)
		}
		requireUnchanged(t, done, b.get(t, done.ID))
		requireUnchanged(t, dead, b.get(t, dead.ID))
		b.requireNoOutbox(t, mark)
	})

	// With no Error, a canceled job keeps its last_error, as JobCancel.
	t.Run("KeepsLastError", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		retry := b.jobIn(t, job.StateRetry)
		require.NotEmpty(t, retry.LastError)
		got, err := b.s.JobCancelMany(b.ctx, &store.JobCancelManyParams{IDs: []uuid.UUID{retry.ID}, Now: later})
		require.NoError(t, err)
		require.Equal(t, []store.JobCancelManyResult{{State: job.StateCanceled, Canceled: true}}, got)
		row := b.get(t, retry.ID)
		require.Equal(t, job.StateCanceled, row.State)
		require.Equal(t, retry.LastError, row.LastError)
	})

	// The holders of the RUNNING jobs asked are woken, after the commit.
	for _, c := range cancelManyBy {
		t.Run("Wakeup"+c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			row := b.jobIn(t, job.StateRunning)
			ch, cancel := b.s.Subscribe(store.TopicJobCancel)
			defer cancel()
			awaitWakeup(t, ch, row.ID.String(), func() {
				got, err := c.cancel(b, &store.JobCancelManyParams{IDs: []uuid.UUID{row.ID}, Now: at(10 * time.Second)})
				require.NoError(t, err)
				require.Equal(t, []store.JobCancelManyResult{{State: job.StateRunning}}, got)
			})
		})
	}
}
