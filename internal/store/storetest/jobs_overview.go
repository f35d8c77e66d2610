package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// testOverview: JobOverview's bounded counts, finished minutes and waits.
func testOverview(t *testing.T, open opener) {
	t.Run("Bounded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		o, err := b.s.JobOverview(b.ctx, &store.JobOverviewParams{Cap: 10, Since: base, FinishedCap: 10, LatencyOf: 10})
		require.NoError(t, err)
		require.Empty(t, o.Queues)
		require.Zero(t, o.Dead)
		require.Empty(t, o.Finished)
		require.Empty(t, o.Waits)
		require.False(t, o.FinishedCut)
		requireTime(t, base, o.FinishedFrom)
		_, err = b.s.JobOverview(b.ctx, &store.JobOverviewParams{Cap: 0, Since: base, FinishedCap: 10})
		require.Error(t, err, "a zero cap bounds nothing")

		// qa: 3 QUEUED. qb: 8 jobs, 7 acquired at 1 s: 3 stay RUNNING, one
		// RETRY, SUCCESS at 1m10s and 2m5s, DEAD at 1m20s; 1 QUEUED. qc:
		// paused, no jobs. qd: 2 jobs acquired at 3 s, DEAD at 3m (no
		// waiting or running job: not listed).
		qa, qb, qc, qd := "qa_"+newQueue(), "qb_"+newQueue(), "qc_"+newQueue(), "qd_"+newQueue()
		for range 3 {
			b.insertOne(t, newJob(qa))
		}
		for range 8 {
			b.insertOne(t, newJob(qb))
		}
		rs := b.acquire(t, qb, 7, at(time.Second))
		require.Len(t, rs, 7)
		require.Equal(t, []bool{true}, b.finish(t, at(time.Minute+10*time.Second), finishParams(rs[1], job.StateSuccess)))
		require.Equal(t, []bool{true}, b.finish(t, at(time.Minute+20*time.Second), finishParams(rs[2], job.StateDead)))
		require.Equal(t, []bool{true}, b.finish(t, at(2*time.Minute+5*time.Second), finishParams(rs[3], job.StateSuccess)))
		require.Equal(t, []bool{true}, b.finish(t, at(2*time.Minute), finishParams(rs[4], job.StateRetry)))
		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: qc, Paused: true, Now: base}))
		b.insertOne(t, newJob(qd))
		b.insertOne(t, newJob(qd))
		ds := b.acquire(t, qd, 2, at(3*time.Second))
		require.Len(t, ds, 2)
		require.Equal(t, []bool{true, true}, b.finish(t, at(3*time.Minute), finishParams(ds[0], job.StateDead), finishParams(ds[1], job.StateDead)))

		since := at(time.Minute + 15*time.Second) // after the first SUCCESS
		o, err = b.s.JobOverview(b.ctx, &store.JobOverviewParams{Cap: 10, Since: since, FinishedCap: 10, LatencyOf: 10})
		require.NoError(t, err)
		require.Equal(t, []store.QueueDepth{
			{Name: qa, Queued: 3},
			{Name: qb, Queued: 1, Running: 3, Retry: 1},
			{Name: qc, Paused: true},
		}, depths(o))
		require.False(t, o.RunningCut)
		require.False(t, o.RetryCut)
		require.Equal(t, 3, o.Dead)
		require.Equal(t, []store.FinishedMinute{
			{At: at(time.Minute), Dead: 1},
			{At: at(2 * time.Minute), Succeeded: 1},
			{At: at(3 * time.Minute), Dead: 2},
		}, minutes(o))
		require.False(t, o.FinishedCut)
		requireTime(t, since, o.FinishedFrom)
		require.Equal(t, []time.Duration{3 * time.Second, 3 * time.Second, time.Second, time.Second}, o.Waits)

		// Capped: at most Cap+1 counted or read.
		o, err = b.s.JobOverview(b.ctx, &store.JobOverviewParams{Cap: 2, Since: since, FinishedCap: 2, LatencyOf: 1})
		require.NoError(t, err)
		require.Equal(t, []store.QueueDepth{
			{Name: qa, Queued: 3},
			{Name: qb, Queued: 1, Running: 3, Retry: 1},
			{Name: qc, Paused: true},
		}, depths(o))
		require.True(t, o.RunningCut, "3 RUNNING read with a cap of 2")
		require.False(t, o.RetryCut)
		o2, err := b.s.JobOverview(b.ctx, &store.JobOverviewParams{Cap: 1, Since: since, FinishedCap: 2, LatencyOf: 1})
		require.NoError(t, err)
		require.Equal(t, 2, depths(o2)[0].Queued, "3 QUEUED counted up to 2 with a cap of 1")
		require.Equal(t, 2, depths(o2)[1].Running)
		require.Equal(t, 2, o2.Dead)
		require.Equal(t, 3, o.Dead)
		require.Equal(t, []store.FinishedMinute{{At: at(3 * time.Minute), Dead: 2}}, minutes(o))
		require.True(t, o.FinishedCut)
		requireTime(t, at(3*time.Minute), o.FinishedFrom)
		require.Equal(t, []time.Duration{3 * time.Second}, o.Waits)
	})
}

func depths(o *store.JobOverview) []store.QueueDepth {
	out := []store.QueueDepth{}
	for _, q := range o.Queues {
		out = append(out, *q)
	}
	return out
}

func minutes(o *store.JobOverview) []store.FinishedMinute {
	out := []store.FinishedMinute{}
	for _, m := range o.Finished {
		out = append(out, *m)
	}
	return out
}

// testQueueCount: QueueCount with a cap above every count is QueueList
// (exact, no lower bound); with a small cap, a queue's QUEUED count stops
// at Cap+1 and is marked, and a state whose read over all queues reached
// Cap+1 jobs is marked in every queue, its figures lower bounds.
func testQueueCount(t *testing.T, open opener) {
	b := setup(t, open)
	_, err := b.s.QueueCount(b.ctx, &store.QueueCountParams{Cap: 0})
	require.Error(t, err, "a zero cap bounds nothing")
	qs, err := b.s.QueueCount(b.ctx, &store.QueueCountParams{Cap: 10})
	require.NoError(t, err)
	require.Empty(t, qs)

	// qa: 6 QUEUED, 1 CREATED. qb: 9 jobs, 8 acquired: 3 RUNNING, 2
	// SUCCESS, 1 DEAD, 1 RETRY, 1 CANCELED; 1 QUEUED. qc: paused, no jobs.
	// qd: 2 SUCCESS.
	qa, qb, qc, qd := "qa_"+newQueue(), "qb_"+newQueue(), "qc_"+newQueue(), "qd_"+newQueue()
	for range 6 {
		b.insertOne(t, newJob(qa))
	}
	created := newJob(qa)
	created.State = job.StateCreated
	b.insertOne(t, created)
	for range 9 {
		b.insertOne(t, newJob(qb))
	}
	rs := b.acquire(t, qb, 8, at(time.Second))
	require.Len(t, rs, 8)
	require.Equal(t, []bool{true, true, true, true, true}, b.finish(t, at(time.Minute),
		finishParams(rs[3], job.StateSuccess), finishParams(rs[4], job.StateSuccess), finishParams(rs[5], job.StateDead),
		finishParams(rs[6], job.StateRetry), finishParams(rs[7], job.StateCanceled)))
	require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: qc, Paused: true, Now: base}))
	b.insertOne(t, newJob(qd))
	b.insertOne(t, newJob(qd))
	ds := b.acquire(t, qd, 2, at(2*time.Second))
	require.Equal(t, []bool{true, true}, b.finish(t, at(time.Minute), finishParams(ds[0], job.StateSuccess), finishParams(ds[1], job.StateSuccess)))

	exact, err := b.s.QueueList(b.ctx)
	require.NoError(t, err)
	type row struct {
		name    string
		paused  bool
		counts  map[job.State]int
		atLeast []job.State
	}
	flat := func(qs []*store.Queue) []row {
		var out []row
		for _, q := range qs {
			r := row{name: q.Name, paused: q.Paused, counts: map[job.State]int{}, atLeast: []job.State{}}
			for st, n := range q.Counts {
				if n > 0 {
					r.counts[st] = n
				}
			}
			for st, on := range q.AtLeast {
				if on {
					r.atLeast = append(r.atLeast, st)
				}
			}
			slices.Sort(r.atLeast)
			out = append(out, r)
		}
		return out
	}
	want := flat(exact)
	require.Equal(t, []row{
		{qa, false, map[job.State]int{job.StateQueued: 6, job.StateCreated: 1}, []job.State{}},
		{qb, false, map[job.State]int{job.StateQueued: 1, job.StateRunning: 3, job.StateSuccess: 2, job.StateDead: 1, job.StateRetry: 1, job.StateCanceled: 1}, []job.State{}},
		{qc, true, map[job.State]int{}, []job.State{}},
		{qd, false, map[job.State]int{job.StateSuccess: 2}, []job.State{}},
	}, want, "the fixture, counted exactly")
	qs, err = b.s.QueueCount(b.ctx, &store.QueueCountParams{Cap: 100})
	require.NoError(t, err)
	require.Equal(t, want, flat(qs), "under the cap, the counts are exact")

	// Cap 3: qa's 6 QUEUED read as 4 (more than 3); SUCCESS (4 jobs) is
	// read as 4 jobs over all queues, so every queue's SUCCESS figure is a
	// lower bound; RUNNING (3 jobs, read 3 < 4) is exact.
	qs, err = b.s.QueueCount(b.ctx, &store.QueueCountParams{Cap: 3})
	require.NoError(t, err)
	got := flat(qs)
	require.Len(t, got, 4)
	require.Equal(t, row{qa, false, map[job.State]int{job.StateQueued: 4, job.StateCreated: 1}, []job.State{job.StateQueued, job.StateSuccess}}, got[0])
	require.Equal(t, row{qb, false, map[job.State]int{job.StateQueued: 1, job.StateRunning: 3, job.StateSuccess: 2, job.StateDead: 1, job.StateRetry: 1, job.StateCanceled: 1}, []job.State{job.StateSuccess}}, got[1])
	require.Equal(t, row{qc, true, map[job.State]int{}, []job.State{job.StateSuccess}}, got[2])
	require.Equal(t, row{qd, false, map[job.State]int{job.StateSuccess: 2}, []job.State{job.StateSuccess}}, got[3])

	// Cap 1: RUNNING (3) is read as 2, spread over queues as it falls.
	qs, err = b.s.QueueCount(b.ctx, &store.QueueCountParams{Cap: 1})
	require.NoError(t, err)
	total := map[job.State]int{}
	for _, q := range qs {
		for st, n := range q.Counts {
			total[st] += n
		}
		require.True(t, q.AtLeast[job.StateRunning] && q.AtLeast[job.StateSuccess], q.Name)
		require.False(t, q.AtLeast[job.StateCreated] || q.AtLeast[job.StateDead], q.Name)
	}
	require.Equal(t, 2, total[job.StateRunning])
	require.Equal(t, 2, total[job.StateSuccess])
	require.Equal(t, 1, total[job.StateDead])

	// Paged by name: Limit queues after After, each with the counts and
	// lower bounds it has in the whole list (Cap 3: SUCCESS marked in
	// every queue, on every page).
	page := func(after string, limit int) []row {
		t.Helper()
		qs, err := b.s.QueueCount(b.ctx, &store.QueueCountParams{Cap: 3, After: after, Limit: limit})
		require.NoError(t, err)
		return flat(qs)
	}
	require.Equal(t, got[:2], page("", 2))
	require.Equal(t, got[2:], page(qb, 2))
	require.Equal(t, got[3:], page(qc, 2), "the last page is short")
	require.Empty(t, page(qd, 2))
	require.Equal(t, got[1:], page(qa, 0), "no limit: every queue after the cursor")
	require.Equal(t, got[1:2], page(qa+"~", 1), "a cursor need not be a queue's name")
}
