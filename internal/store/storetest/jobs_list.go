package storetest

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// listFixture is five jobs, ids ascending:
//
//	0: type a, queue q1, priority 0, QUEUED
//	1: type b, queue q1, priority 1, QUEUED
//	2: type a, queue q2, priority 2, CREATED
//	3: type b, queue q2, priority 0, CANCELED
//	4: type c, queue q3, priority 1, RUNNING
type listFixture struct {
	ids        []uuid.UUID
	q1, q2, q3 string
}

func (b *bundle) listFixture(t *testing.T) *listFixture {
	t.Helper()
	f := &listFixture{q1: newQueue(), q2: newQueue(), q3: newQueue()}
	spec := []struct {
		typ, queue string
		priority   int
		state      job.State
	}{
		{"a", f.q1, 0, job.StateQueued},
		{"b", f.q1, 1, job.StateQueued},
		{"a", f.q2, 2, job.StateCreated},
		{"b", f.q2, 0, job.StateQueued},
		{"c", f.q3, 1, job.StateQueued},
	}
	var ps []*store.JobInsertParams
	for _, s := range spec {
		p := newJob(s.queue)
		p.Type, p.Priority, p.State = s.typ, s.priority, s.state
		ps = append(ps, p)
		f.ids = append(f.ids, p.ID)
	}
	b.insert(t, ps...)
	_, err := b.s.JobCancel(b.ctx, &store.JobCancelParams{ID: f.ids[3], Now: at(time.Second)})
	require.NoError(t, err)
	rows := b.acquire(t, f.q3, 1, at(time.Second))
	require.Equal(t, []uuid.UUID{f.ids[4]}, ids(rows))
	return f
}

// pick returns the fixture ids at idx, in the given order.
func (f *listFixture) pick(idx ...int) []uuid.UUID {
	out := []uuid.UUID{}
	for _, i := range idx {
		out = append(out, f.ids[i])
	}
	return out
}

func testList(t *testing.T, open opener) {
	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		f := b.listFixture(t)
		prio := func(n int) *int { return &n }
		for _, tc := range []struct {
			name string
			p    store.JobListParams
			want []int
		}{
			{"All", store.JobListParams{}, []int{4, 3, 2, 1, 0}},
			{"State", store.JobListParams{States: []job.State{job.StateQueued}}, []int{1, 0}},
			{"States", store.JobListParams{States: []job.State{job.StateQueued, job.StateCanceled}}, []int{3, 1, 0}},
			{"Running", store.JobListParams{States: []job.State{job.StateRunning}}, []int{4}},
			{"Type", store.JobListParams{Types: []string{"a"}}, []int{2, 0}},
			{"Types", store.JobListParams{Types: []string{"a", "c"}}, []int{4, 2, 0}},
			{"Queue", store.JobListParams{Queues: []string{f.q2}}, []int{3, 2}},
			{"Queues", store.JobListParams{Queues: []string{f.q1, f.q3}}, []int{4, 1, 0}},
			{"Priority0", store.JobListParams{Priority: prio(0)}, []int{3, 0}},
			{"Priority1", store.JobListParams{Priority: prio(1)}, []int{4, 1}},
			{"TypeAndQueue", store.JobListParams{Types: []string{"a"}, Queues: []string{f.q1}}, []int{0}},
			{"StateAndType", store.JobListParams{States: []job.State{job.StateRunning}, Types: []string{"b"}}, []int{}},
			{"Limit", store.JobListParams{Limit: 2}, []int{4, 3}},
			{"BeforeID", store.JobListParams{BeforeID: f.ids[2]}, []int{1, 0}},
			{"BeforeIDAndType", store.JobListParams{BeforeID: f.ids[3], Types: []string{"b"}}, []int{1}},
			{"UnknownType", store.JobListParams{Types: []string{"zzz"}}, []int{}},
			// Finished states only: listed through the finished jobs' index.
			{"Finished", store.JobListParams{States: []job.State{job.StateCanceled}}, []int{3}},
			{"FinishedQueueType", store.JobListParams{States: []job.State{job.StateCanceled}, Queues: []string{f.q2}, Types: []string{"b"}}, []int{3}},
			{"FinishedOtherQueue", store.JobListParams{States: []job.State{job.StateCanceled}, Queues: []string{f.q1}}, []int{}},
			{"FinishedStatesBefore", store.JobListParams{States: []job.State{job.StateCanceled, job.StateDead}, BeforeID: f.ids[4], Limit: 1}, []int{3}},
			{"FinishedBeforeAll", store.JobListParams{States: []job.State{job.StateCanceled}, BeforeID: f.ids[3]}, []int{}},
		} {
			p := tc.p
			if p.Limit == 0 {
				p.Limit = 100
			}
			rows, err := b.s.JobList(b.ctx, &p)
			require.NoError(t, err, tc.name)
			require.Equal(t, f.pick(tc.want...), append([]uuid.UUID{}, ids(rows)...), tc.name)
		}

		rows, err := b.s.JobList(b.ctx, &store.JobListParams{States: []job.State{job.StateRunning}, Limit: 10})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, owner, rows[0].LeaseOwner, "listed rows are whole rows")
		require.Equal(t, "c", rows[0].Type)
		rows, err = b.s.JobList(b.ctx, &store.JobListParams{States: []job.State{job.StateCanceled}, Limit: 10})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, job.StateCanceled, rows[0].State, "listed finished rows are whole rows")
		require.Equal(t, "b", rows[0].Type)
		require.Equal(t, f.q2, rows[0].Queue)
	})

	// Several finished states are listed together newest first, whatever
	// their mix, with the type, queue and cursor filters, and a waiting
	// job newer than all of them is left out.
	t.Run("FinishedStates", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		ends := []job.State{job.StateSuccess, job.StateDead, job.StateCanceled}
		var ps []*store.JobInsertParams
		for i := range 9 {
			p := newJob(q)
			p.Type = []string{"a", "b"}[i%2]
			ps = append(ps, p)
		}
		b.insert(t, ps...)
		rows := b.acquire(t, q, 9, setupAcquire)
		require.Len(t, rows, 9)
		byID := map[uuid.UUID]*job.Row{}
		for _, r := range rows {
			byID[r.ID] = r
		}
		var fs []*store.JobFinishParams
		for i, p := range ps {
			fs = append(fs, finishParams(byID[p.ID], ends[i%3]))
		}
		require.Equal(t, []bool{true, true, true, true, true, true, true, true, true}, b.finish(t, setupFinish, fs...))
		b.insert(t, newJob(q))
		pick := func(idx ...int) []uuid.UUID {
			out := []uuid.UUID{}
			for _, i := range idx {
				out = append(out, ps[i].ID)
			}
			return out
		}
		all := []job.State{job.StateSuccess, job.StateDead, job.StateCanceled}
		for _, tc := range []struct {
			name string
			p    store.JobListParams
			want []uuid.UUID
		}{
			{"All", store.JobListParams{States: all, Queues: []string{q}, Limit: 100}, pick(8, 7, 6, 5, 4, 3, 2, 1, 0)},
			{"Limit", store.JobListParams{States: all, Queues: []string{q}, Limit: 4}, pick(8, 7, 6, 5)},
			{"TypeRepeatedState", store.JobListParams{States: []job.State{job.StateDead, job.StateSuccess, job.StateDead}, Types: []string{"a"}, Limit: 3}, pick(6, 4, 0)},
			{"TypeBefore", store.JobListParams{States: []job.State{job.StateDead, job.StateSuccess}, Types: []string{"a"}, BeforeID: ps[6].ID, Limit: 2}, pick(4, 0)},
			{"TwoStates", store.JobListParams{States: []job.State{job.StateCanceled, job.StateDead}, Queues: []string{q}, Limit: 100}, pick(8, 7, 5, 4, 2, 1)},
			{"OtherQueue", store.JobListParams{States: all, Queues: []string{newQueue()}, Limit: 100}, pick()},
		} {
			rows, err := b.s.JobList(b.ctx, &tc.p)
			require.NoError(t, err, tc.name)
			require.Equal(t, tc.want, append([]uuid.UUID{}, ids(rows)...), tc.name)
			for _, r := range rows {
				require.Equal(t, q, r.Queue, "%s: whole rows", tc.name)
			}
		}
	})

	t.Run("Paging", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		const n = 250
		var ps []*store.JobInsertParams
		for i := range n {
			p := newJob(newQueue())
			p.Priority = i % 4
			ps = append(ps, p)
		}
		b.insert(t, ps...)

		seen := map[uuid.UUID]bool{}
		var pages []int
		cursor := uuid.Nil
		var prev uuid.UUID
		for {
			rows, err := b.s.JobList(b.ctx, &store.JobListParams{BeforeID: cursor, Limit: 100})
			require.NoError(t, err)
			if len(rows) == 0 {
				break
			}
			pages = append(pages, len(rows))
			for _, r := range rows {
				require.False(t, seen[r.ID], "job listed twice")
				seen[r.ID] = true
				if prev != uuid.Nil {
					require.Negative(t, compareUUID(r.ID, prev), "newest first")
				}
				prev = r.ID
			}
			cursor = rows[len(rows)-1].ID
			require.Less(t, len(pages), 10, "paging does not end")
		}
		require.Equal(t, []int{100, 100, 50}, pages)
		require.Len(t, seen, n)
	})

	// A type filter over every state (or over waiting and finished states)
	// merges a read per kind of state (finished through the type index,
	// RUNNING and QUEUED through their own): the pages must be exactly
	// those of filtering the whole list, newest first, at every page size.
	t.Run("TypeOverStates", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		var ps []*store.JobInsertParams
		for i := range 48 {
			p := newJob(q)
			p.Type = []string{"t", "u", "t", "v"}[i%4]
			if i%7 == 3 {
				p.State = job.StateCreated
			}
			ps = append(ps, p)
		}
		b.insert(t, ps...)
		// The oldest 18 due jobs start; of those, six end (SUCCESS, RETRY,
		// DEAD in turn); four waiting ones are canceled.
		running := b.acquire(t, q, 18, at(time.Second))
		require.Len(t, running, 18)
		var fs []*store.JobFinishParams
		for i, r := range running[:6] {
			f := &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: []job.State{job.StateSuccess, job.StateRetry, job.StateDead}[i%3], Error: "x"}
			if f.State == job.StateRetry {
				f.RunAt = at(time.Hour)
			}
			fs = append(fs, f)
		}
		require.Equal(t, []bool{true, true, true, true, true, true}, b.finish(t, at(2*time.Second), fs...))
		for _, i := range []int{40, 41, 44, 47} {
			_, err := b.s.JobCancel(b.ctx, &store.JobCancelParams{ID: ps[i].ID, Now: at(3 * time.Second)})
			require.NoError(t, err)
		}
		all, err := b.s.JobList(b.ctx, &store.JobListParams{Queues: []string{q}, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, all, 48)
		seen := map[job.State]bool{}
		for _, r := range all {
			seen[r.State] = true
		}
		require.Len(t, seen, 7, "every state is in the fixture: %v", seen)

		for _, tc := range []struct {
			name   string
			types  []string
			states []job.State
		}{
			{"Type", []string{"t"}, nil},
			{"Types", []string{"u", "v"}, nil},
			{"Queued", []string{"t"}, []job.State{job.StateQueued}},
			{"Running", []string{"t"}, []job.State{job.StateRunning}},
			{"Waiting", []string{"t", "v"}, []job.State{job.StateQueued, job.StateRunning}},
			{"WaitingAndFinished", []string{"t"}, []job.State{job.StateRunning, job.StateCanceled, job.StateSuccess}},
			{"WaitingAndCreated", []string{"t", "u"}, []job.State{job.StateQueued, job.StateCreated}},
			{"None", []string{"w"}, nil},
		} {
			want := []uuid.UUID{}
			for _, r := range all {
				if slices.Contains(tc.types, r.Type) && (len(tc.states) == 0 || slices.Contains(tc.states, r.State)) {
					want = append(want, r.ID)
				}
			}
			if tc.name != "None" {
				require.NotEmpty(t, want, tc.name)
			}
			for _, limit := range []int{1, 2, 3, 5, 100} {
				got := []uuid.UUID{}
				cursor := uuid.Nil
				for range 100 {
					rows, err := b.s.JobList(b.ctx, &store.JobListParams{Types: tc.types, States: tc.states, Queues: []string{q}, BeforeID: cursor, Limit: limit})
					require.NoError(t, err, tc.name)
					require.LessOrEqual(t, len(rows), limit)
					got = append(got, ids(rows)...)
					if len(rows) < limit {
						break
					}
					cursor = rows[len(rows)-1].ID
				}
				require.Equal(t, want, got, "%s, pages of %d", tc.name, limit)
			}
		}
	})

	// A listing by type reads the newest 2,000 jobs first and is done when
	// they hold a page; otherwise the merge reads further. Both give the
	// filtered list: old jobs behind 2,100 newer ones of another type are
	// found, and a page larger than the window's matches is complete.
	t.Run("TypeBehindWindow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		var ps []*store.JobInsertParams
		for i := range 2_103 {
			p := newJob(q)
			p.Type = "new"
			if i < 3 {
				p.Type = "old"
			}
			ps = append(ps, p)
		}
		b.insert(t, ps...)
		require.Len(t, b.acquire(t, q, 1, at(time.Second)), 1) // the oldest "old" job runs
		want := func(typ string) []uuid.UUID {
			out := []uuid.UUID{}
			for i := len(ps) - 1; i >= 0; i-- {
				if ps[i].Type == typ {
					out = append(out, ps[i].ID)
				}
			}
			return out
		}
		for _, tc := range []struct {
			typ   string
			limit int
		}{{"old", 51}, {"old", 2}, {"new", 51}, {"new", 2_500}} {
			rows, err := b.s.JobList(b.ctx, &store.JobListParams{Types: []string{tc.typ}, Limit: tc.limit})
			require.NoError(t, err)
			w := want(tc.typ)
			require.Equal(t, w[:min(len(w), tc.limit)], ids(rows), "%s, limit %d", tc.typ, tc.limit)
		}
		rows, err := b.s.JobList(b.ctx, &store.JobListParams{Types: []string{"old"}, States: []job.State{job.StateRunning}, Limit: 5})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{ps[0].ID}, ids(rows))
	})

	t.Run("Count", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		require.Empty(t, countMap(t, b))
		f := b.listFixture(t)
		require.Equal(t, map[string]int{
			f.q1 + "/QUEUED":   2,
			f.q2 + "/CREATED":  1,
			f.q2 + "/CANCELED": 1,
			f.q3 + "/RUNNING":  1,
		}, countMap(t, b))
	})

}

func compareUUID(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }
