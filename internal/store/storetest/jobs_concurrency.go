package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

func testConcurrency(t *testing.T, open opener) {
	t.Run("AcquireEachJobOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		const jobs, workers, batch = 500, 8, 10
		q := newQueue()
		ps := make([]*store.JobInsertParams, jobs)
		for i := range ps {
			ps[i] = newJob(q)
			ps[i].Priority = i % 3
		}
		b.insert(t, ps...)

		var (
			mu   sync.Mutex
			got  = map[uuid.UUID]string{}
			errs []error
			wg   sync.WaitGroup
		)
		for w := range workers {
			node := fmt.Sprintf("node-%d", w)
			wg.Go(func() {
				for range jobs { // bounded: each call that returns rows takes one
					rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{
						Queue: q, Max: batch, Owner: node, LeaseDuration: lease, Now: at(time.Second),
					})
					mu.Lock()
					if err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", node, err))
						mu.Unlock()
						return
					}
					if len(rows) > batch {
						errs = append(errs, fmt.Errorf("%s: %d rows for Max %d", node, len(rows), batch))
					}
					for _, r := range rows {
						if prev, dup := got[r.ID]; dup {
							errs = append(errs, fmt.Errorf("job %s acquired by %s and %s", r.ID, prev, node))
						}
						got[r.ID] = node
						if r.LeaseOwner != node || r.Attempt != 1 {
							errs = append(errs, fmt.Errorf("job %s: owner %q attempt %d, want %q 1", r.ID, r.LeaseOwner, r.Attempt, node))
						}
					}
					mu.Unlock()
					if len(rows) == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		require.Len(t, got, jobs, "every job acquired")
		require.Equal(t, map[string]int{q + "/RUNNING": jobs}, countMap(t, b))
		for _, p := range ps[:20] {
			row := b.get(t, p.ID)
			require.Equal(t, got[p.ID], row.LeaseOwner, "the stored owner is the one that got the row")
			require.Equal(t, 1, row.Attempt)
		}
	})

	t.Run("InsertSameIdempotencyKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		const n = 100
		q := newQueue()
		var (
			mu      sync.Mutex
			results []*store.JobInsertResult
			errs    []error
			wg      sync.WaitGroup
		)
		for range n {
			p := newJob(q)
			p.IdempotencyKey = "same"
			wg.Go(func() {
				res, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{p}, Now: base})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case len(res) != 1 || res[0] == nil || res[0].Job == nil:
					errs = append(errs, fmt.Errorf("bad result %+v", res))
				default:
					results = append(results, res[0])
				}
			})
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		require.Len(t, results, n)
		inserted := 0
		for _, r := range results {
			require.Equal(t, results[0].Job.ID, r.Job.ID, "every caller gets the same job")
			if !r.Duplicate {
				inserted++
			}
		}
		require.Equal(t, 1, inserted, "exactly one caller inserted")
		require.Equal(t, map[string]int{q + "/QUEUED": 1}, countMap(t, b))
		evs := b.outboxSince(t, 0)
		require.Len(t, evs, 1, "one insert, one outbox row: %s", describeEvents(evs))
	})

	t.Run("FinishRace", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		const n = 20
		q := newQueue()
		for range n {
			b.insert(t, newJob(q))
		}
		rows := b.acquire(t, q, n, at(time.Second))
		require.Len(t, rows, n)

		var (
			applied atomic.Int64
			mu      sync.Mutex
			errs    []error
			wg      sync.WaitGroup
		)
		for _, row := range rows {
			// The holder completes while the rescuer gives up on the lease.
			for _, p := range []*store.JobFinishParams{
				finishParams(row, job.StateSuccess),
				{ID: row.ID, Attempt: row.Attempt, State: job.StateRetry, Outcome: job.OutcomeExpired, RunAt: later},
			} {
				wg.Go(func() {
					ok, err := b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{Jobs: []*store.JobFinishParams{p}, Now: at(2 * time.Minute)})
					if err != nil || len(ok) != 1 {
						mu.Lock()
						errs = append(errs, fmt.Errorf("finish: %v %v", ok, err))
						mu.Unlock()
						return
					}
					if ok[0] != "" {
						applied.Add(1)
					}
				})
			}
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		require.EqualValues(t, n, applied.Load(), "exactly one finish per attempt applies")
		for _, row := range rows {
			attempts, err := b.s.JobAttemptList(b.ctx, row.ID)
			require.NoError(t, err)
			require.Len(t, attempts, 1)
			require.NotEqual(t, job.OutcomeRunning, attempts[0].Outcome)
		}
		var transitions int
		for _, ev := range b.outboxSince(t, 0) {
			for _, tr := range decodeStateChanged(t, ev) {
				if tr.From == job.StateRunning {
					transitions++
				}
			}
		}
		require.Equal(t, n, transitions, "one finish transition per job in the outbox")
	})

	t.Run("LeaderRace", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		const n = 10
		var (
			leaders atomic.Int64
			mu      sync.Mutex
			errs    []error
			wg      sync.WaitGroup
		)
		for i := range n {
			wg.Go(func() {
				ok, err := b.s.LeaderAttemptElect(b.ctx, &store.LeaderElectParams{
					Name: "default", NodeID: fmt.Sprintf("node-%d", i), TTL: time.Minute, Now: base,
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if ok {
					leaders.Add(1)
				}
			})
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		require.EqualValues(t, 1, leaders.Load(), "exactly one leader")
	})
}
