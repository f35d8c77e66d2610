package storetest

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

func testInsert(t *testing.T, open opener) {
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := newJob(newQueue())
		res := b.insert(t, p)
		require.False(t, res[0].Duplicate)

		for _, row := range []*job.Row{res[0].Job, b.get(t, p.ID)} {
			require.Equal(t, p.ID, row.ID)
			require.Equal(t, job.StateQueued, row.State)
			require.Equal(t, 0, row.Attempt)
			requireTime(t, base, row.RunAt, "zero RunAt means Now")
			requireTime(t, base, row.CreatedAt)
			requireTime(t, base, row.UpdatedAt)
			require.Empty(t, row.Result)
			require.Empty(t, row.IdempotencyKey)
			require.Zero(t, row.Timeout)
			requireNoLease(t, row)
			require.True(t, row.AttemptedAt.IsZero(), "attempted_at before the first attempt")
			require.True(t, row.FinishedAt.IsZero())
			require.Zero(t, row.Progress)
			require.Empty(t, row.ProgressMsg)
			require.False(t, row.CancelRequested)
			require.Empty(t, row.LastError)
		}
	})

	t.Run("QueueDefaultsToType", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := newJob("")
		p.Type = "thumbnail"
		row := b.insertOne(t, p)
		require.Equal(t, "thumbnail", row.Queue)
		require.Equal(t, "thumbnail", b.get(t, p.ID).Queue)
		rows := b.acquire(t, "thumbnail", 1, at(time.Second))
		require.Len(t, rows, 1)
		require.Equal(t, p.ID, rows[0].ID)
	})

	t.Run("EveryFieldRoundTrips", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		// Times are instants: another zone must come back as the same one.
		runAt := at(5*time.Minute + 123456*time.Microsecond).In(time.FixedZone("UTC+5", 5*3600))
		p := &store.JobInsertParams{
			ID:             newID(),
			Type:           "report.render",
			Queue:          "reports",
			Priority:       3,
			Payload:        json.RawMessage(`{"user": 42, "tags": ["a", "b"], "nested": {"x": 1.5, "ok": true, "none": null}, "text": "héllo ✓ \"q\" \\ \n", "big": 9007199254740991}`),
			IdempotencyKey: "render-42",
			State:          job.StateQueued,
			MaxAttempts:    7,
			RunAt:          runAt,
			Timeout:        90 * time.Second,
		}
		res := b.insert(t, p)
		for _, row := range []*job.Row{res[0].Job, b.get(t, p.ID)} {
			require.Equal(t, p.ID, row.ID)
			require.Equal(t, "report.render", row.Type)
			require.Equal(t, "reports", row.Queue)
			require.Equal(t, 3, row.Priority)
			require.JSONEq(t, string(p.Payload), string(row.Payload))
			require.Equal(t, "render-42", row.IdempotencyKey)
			require.Equal(t, job.StateQueued, row.State)
			require.Equal(t, 7, row.MaxAttempts)
			requireTime(t, runAt, row.RunAt)
			require.Equal(t, 90*time.Second, row.Timeout)
			requireTime(t, base, row.CreatedAt)
		}
	})

	t.Run("InitialStates", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		created := newJob(newQueue())
		created.State = job.StateCreated
		queued := newJob(newQueue())
		res := b.insert(t, created, queued)
		require.Equal(t, job.StateCreated, res[0].Job.State)
		require.Equal(t, job.StateQueued, res[1].Job.State)
		require.Equal(t, job.StateCreated, b.get(t, created.ID).State)
		require.Equal(t, job.StateQueued, b.get(t, queued.ID).State)

		// A CREATED job is not acquired: it has not been released.
		require.Empty(t, b.acquire(t, created.Queue, 10, later))
	})

	t.Run("ResultsInParamOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		var ps []*store.JobInsertParams
		for i := range 20 {
			p := newJob(q)
			p.Payload = json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
			ps = append(ps, p)
		}
		// Reverse order, so id order and param order differ.
		for i, j := 0, len(ps)-1; i < j; i, j = i+1, j-1 {
			ps[i], ps[j] = ps[j], ps[i]
		}
		res := b.insert(t, ps...)
		for i, r := range res {
			require.Equal(t, ps[i].ID, r.Job.ID, "result %d", i)
			require.JSONEq(t, string(ps[i].Payload), string(r.Job.Payload))
		}
	})

	t.Run("IdempotencyKeyAcrossCalls", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		first := newJob(newQueue())
		first.IdempotencyKey = "once"
		row := b.insertOne(t, first)
		mark := b.outboxMark(t)

		again := newJob(newQueue())
		again.Type = "other"
		again.Payload = json.RawMessage(`{"different":true}`)
		again.IdempotencyKey = "once"
		res := b.insertAt(t, at(time.Minute), again)
		require.True(t, res[0].Duplicate)
		require.Equal(t, first.ID, res[0].Job.ID, "the existing row is returned")
		require.Equal(t, "email", res[0].Job.Type)
		require.JSONEq(t, string(first.Payload), string(res[0].Job.Payload))

		_, err := b.s.JobGet(b.ctx, again.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "the duplicate was inserted")
		requireUnchanged(t, row, b.get(t, first.ID))
		b.requireNoOutbox(t, mark)
	})

	t.Run("IdempotencyKeyWithinBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		a, dup, other := newJob(q), newJob(q), newJob(q)
		a.IdempotencyKey = "k"
		dup.IdempotencyKey = "k"
		other.IdempotencyKey = "k2"
		mark := b.outboxMark(t)
		res := b.insert(t, a, dup, other)
		require.False(t, res[0].Duplicate)
		require.Equal(t, a.ID, res[0].Job.ID)
		require.True(t, res[1].Duplicate)
		require.Equal(t, a.ID, res[1].Job.ID)
		require.False(t, res[2].Duplicate)
		require.Equal(t, other.ID, res[2].Job.ID)

		_, err := b.s.JobGet(b.ctx, dup.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		rows, err := b.s.JobList(b.ctx, &store.JobListParams{Limit: 100})
		require.NoError(t, err)
		require.ElementsMatch(t, ids(rows), ids([]*job.Row{res[0].Job, res[2].Job}))
		b.requireOneStateChanged(t, mark,
			tr(res[0].Job, "", job.StateQueued), tr(res[2].Job, "", job.StateQueued))
	})

	t.Run("LargeBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		const n = 3000
		q := newQueue()
		ps := make([]*store.JobInsertParams, n)
		for i := range ps {
			ps[i] = newJob(q)
			ps[i].Payload = json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
			ps[i].Priority = i % 3
		}
		mark := b.outboxMark(t)
		res := b.insert(t, ps...)
		for i, r := range res {
			require.False(t, r.Duplicate, "result %d", i)
			require.Equal(t, ps[i].ID, r.Job.ID, "result %d", i)
		}
		require.Equal(t, map[string]int{q + "/QUEUED": n}, countMap(t, b))
		for _, i := range []int{0, 1, 1234, n - 1} {
			row := b.get(t, ps[i].ID)
			require.JSONEq(t, string(ps[i].Payload), string(row.Payload))
			require.Equal(t, i%3, row.Priority)
			require.Equal(t, q, row.Queue)
		}
		evs := b.outboxSince(t, mark)
		require.Len(t, evs, 1, "one outbox row per call")
		require.Len(t, decodeStateChanged(t, evs[0]), n)
	})

	t.Run("LargeBatchWithIdempotencyKeys", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		const n = 3000
		q := newQueue()
		existing := newJob(q)
		existing.IdempotencyKey = "k-17"
		b.insertOne(t, existing)

		ps := make([]*store.JobInsertParams, n)
		for i := range ps {
			ps[i] = newJob(q)
		}
		ps[17].IdempotencyKey = "k-17"  // exists in the table
		ps[18].IdempotencyKey = "k-new" // first in the batch
		ps[2999].IdempotencyKey = "k-new"
		res := b.insert(t, ps...)
		for i, r := range res {
			switch i {
			case 17:
				require.True(t, r.Duplicate)
				require.Equal(t, existing.ID, r.Job.ID)
			case 2999:
				require.True(t, r.Duplicate)
				require.Equal(t, ps[18].ID, r.Job.ID)
			default:
				require.False(t, r.Duplicate, "result %d", i)
				require.Equal(t, ps[i].ID, r.Job.ID, "result %d", i)
			}
		}
		require.Equal(t, map[string]int{q + "/QUEUED": n - 1}, countMap(t, b))
	})

	// A batch whose jobs the store prepares as it reads them
	// (JobInsertManyParams.Prepare): PostgreSQL streams a large one through
	// COPY, making each job as it sends it. Sizes on both sides of the
	// COPY threshold, and a large one spanning many chunks of the stream.
	for _, n := range []int{1, 7, 3000} {
		t.Run(fmt.Sprintf("Prepared/%d", n), func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			q := newQueue()
			want := make([]*store.JobInsertParams, n)
			for i := range want {
				want[i] = newJob(q)
				want[i].Payload = json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
			}
			// Jobs[i] is nil until Prepare sets it. Prepare may run on a
			// goroutine of the store's: the order is checked once the store
			// returned.
			p := &store.JobInsertManyParams{Jobs: make([]*store.JobInsertParams, n), Now: base}
			var order []int
			p.Prepare = func(i int) error {
				order = append(order, i)
				p.Jobs[i] = want[i]
				return nil
			}
			mark := b.outboxMark(t)
			res, err := b.s.JobInsertMany(b.ctx, p)
			require.NoError(t, err)
			for i, k := range order {
				require.Equal(t, i, k, "jobs are prepared once each, in order")
			}
			require.Len(t, order, n)
			require.Len(t, res, n)
			for i, r := range res {
				require.False(t, r.Duplicate, "result %d", i)
				require.Equal(t, want[i].ID, r.Job.ID, "result %d", i)
				require.JSONEq(t, string(want[i].Payload), string(r.Job.Payload), "result %d", i)
			}
			require.Equal(t, map[string]int{q + "/QUEUED": n}, countMap(t, b))
			row := b.get(t, want[n-1].ID)
			require.JSONEq(t, string(want[n-1].Payload), string(row.Payload))
			evs := b.outboxSince(t, mark)
			require.Len(t, evs, 1, "one outbox row per call")
			require.Len(t, decodeStateChanged(t, evs[0]), n)
		})
	}

	// A job that cannot be prepared ends the batch: the caller gets its
	// error, no job or outbox row is written (even after rows were sent),
	// no later job is prepared, and the store goes on working.
	for _, c := range []struct {
		name   string
		n, bad int
		key    bool // the bad job is prepared, with an idempotency key
	}{
		{"Small", 7, 3, false},
		{"FirstOfLarge", 3000, 0, false},
		{"MiddleOfLarge", 3000, 2500, false},
		{"LastOfLarge", 3000, 2999, false},
		{"KeyInLarge", 3000, 2500, true},
	} {
		t.Run("PreparedFails/"+c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			q := newQueue()
			all := make([]store.JobInsertParams, c.n)
			p := &store.JobInsertManyParams{Jobs: make([]*store.JobInsertParams, c.n), Now: base}
			for i := range all {
				p.Jobs[i] = &all[i]
			}
			refused := errors.New("job refused")
			last := -1
			p.Prepare = func(i int) error {
				last = i
				all[i] = *newJob(q)
				if i == c.bad {
					if c.key {
						all[i].IdempotencyKey = "k"
						return nil
					}
					return refused
				}
				return nil
			}
			mark := b.outboxMark(t)
			_, err := b.s.JobInsertMany(b.ctx, p)
			require.Error(t, err)
			if !c.key {
				require.ErrorIs(t, err, refused)
			}
			require.Equal(t, c.bad, last, "no job is prepared after the one that failed")
			require.Empty(t, countMap(t, b), "nothing is written")
			require.Empty(t, b.outboxSince(t, mark))

			ok := newJob(q)
			b.insertOne(t, ok)
			require.Equal(t, map[string]int{q + "/QUEUED": 1}, countMap(t, b))
		})
	}

	t.Run("EmptyBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		res, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Now: base})
		require.NoError(t, err)
		require.Empty(t, res)
		b.requireNoOutbox(t, 0)
	})

	t.Run("GetUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		_, err := b.s.JobGet(b.ctx, newID())
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("TxUnsupported", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := newJob(newQueue())
		_, err := b.s.JobInsertManyTx(b.ctx, struct{}{}, &store.JobInsertManyParams{
			Jobs: []*store.JobInsertParams{p}, Now: base,
		})
		require.True(t, errors.Is(err, store.ErrUnsupportedTx), "want ErrUnsupportedTx, got %v", err)
		// No transaction of a supported type is refused as well, not
		// dereferenced.
		_, err = b.s.JobInsertManyTx(b.ctx, (*sql.Tx)(nil), &store.JobInsertManyParams{
			Jobs: []*store.JobInsertParams{p}, Now: base,
		})
		require.True(t, errors.Is(err, store.ErrUnsupportedTx), "want ErrUnsupportedTx, got %v", err)
		_, err = b.s.JobGet(b.ctx, p.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// countMap returns JobCount as "queue/STATE" → count.
func countMap(t *testing.T, b *bundle) map[string]int {
	t.Helper()
	counts, err := b.s.JobCount(b.ctx)
	require.NoError(t, err)
	m := map[string]int{}
	for _, c := range counts {
		key := c.Queue + "/" + string(c.State)
		_, dup := m[key]
		require.False(t, dup, "JobCount lists %s twice", key)
		if c.Count != 0 {
			m[key] = c.Count
		}
	}
	return m
}
