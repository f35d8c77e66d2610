package chaos_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/chaos"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

type checkBundle struct {
	ctx  context.Context
	st   store.Store
	exp  chaos.Expectations
	byID map[string]uuid.UUID // key → job id
}

// setupCheck makes one job per script on a fresh database and drives each
// to the end its script implies, through the store as workers would.
func setupCheck(t *testing.T, backend testdb.Backend) *checkBundle {
	t.Helper()
	ctx := context.Background()
	st := teststore.Open(t, backend.URL(t))

	b := &checkBundle{ctx: ctx, st: st, byID: map[string]uuid.UUID{}, exp: chaos.Expectations{Jobs: map[string]chaos.Script{
		"k-success": chaos.ScriptSuccess, "k-retry": chaos.ScriptRetry,
		"k-fatal": chaos.ScriptFatal, "k-cancel": chaos.ScriptCancel,
	}}}
	now := time.Now()
	var ins []*store.JobInsertParams
	for _, k := range []string{"k-success", "k-retry", "k-fatal", "k-cancel"} {
		ins = append(ins, &store.JobInsertParams{
			ID: uuid.Must(uuid.NewV7()), Type: "t", Queue: "q", Payload: json.RawMessage(`{}`),
			IdempotencyKey: k, State: job.StateQueued, MaxAttempts: 3,
		})
	}
	res, err := st.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: ins, Now: now})
	require.NoError(t, err)
	for _, r := range res {
		b.byID[r.Job.IdempotencyKey] = r.Job.ID
	}
	_, err = st.JobCancel(ctx, &store.JobCancelParams{ID: b.byID["k-cancel"], Now: now})
	require.NoError(t, err)

	finish := func(state job.State, outcome job.Outcome, now time.Time) {
		rows, err := st.JobAcquire(ctx, &store.JobAcquireParams{Queue: "q", Max: 10, Owner: "n1", LeaseDuration: time.Minute, Now: now})
		require.NoError(t, err)
		var fin []*store.JobFinishParams
		for _, r := range rows {
			st, oc := job.StateSuccess, job.OutcomeSuccess
			switch {
			case r.IdempotencyKey == "k-fatal":
				st, oc = job.StateDead, job.OutcomeError
			case r.IdempotencyKey == "k-retry" && state == job.StateRetry:
				st, oc = state, outcome
			}
			fin = append(fin, &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: st, Outcome: oc, Error: "e", RunAt: now, FinishedAt: now.Add(time.Millisecond)})
		}
		_, err = st.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: fin, Now: now.Add(time.Millisecond)})
		require.NoError(t, err)
	}
	finish(job.StateRetry, job.OutcomeError, now.Add(time.Second))
	_, err = st.JobSchedule(ctx, &store.JobScheduleParams{Now: now.Add(2 * time.Second), Max: 10})
	require.NoError(t, err)
	finish(job.StateSuccess, job.OutcomeSuccess, now.Add(3*time.Second))
	return b
}

func (b *checkBundle) load(t *testing.T) *chaos.Snapshot {
	t.Helper()
	s, err := chaos.Load(b.ctx, b.st)
	require.NoError(t, err)
	return s
}

func (b *checkBundle) row(s *chaos.Snapshot, key string) *job.Row {
	for _, r := range s.Jobs {
		if r.IdempotencyKey == key {
			return r
		}
	}
	return nil
}

func kinds(vs []chaos.Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Kind)
	}
	return out
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			b := setupCheck(t, backend)

			// Consumers that saw everything once: no violation.
			all := map[string]int{}
			for _, tr := range b.load(t).Transitions {
				all[tr.EventID] = 1
			}
			b.exp.Deliveries = []chaos.Delivery{{Name: "sse", Seen: all, ExactlyOnce: true}, {Name: "webhook", Seen: all}}
			vs, err := chaos.Check(b.ctx, b.st, b.exp)
			require.NoError(t, err)
			require.Empty(t, vs, "a correct database has no violation")
			seen := func(drop, twice, extra string) map[string]int {
				m := map[string]int{}
				for id := range all {
					if id != drop {
						m[id] = 1
					}
				}
				if twice != "" {
					m[twice] = 2
				}
				if extra != "" {
					m[extra] = 1
				}
				return m
			}
			var someID string
			for id := range all {
				someID = id
				break
			}

			// Every kind of violation, made by hand on a fresh snapshot.
			cases := []struct {
				kind    string
				breakIt func(s *chaos.Snapshot, exp *chaos.Expectations)
			}{
				{chaos.KindMissing, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Jobs = map[string]chaos.Script{"k-nowhere": chaos.ScriptSuccess}
				}},
				{chaos.KindDuplicate, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					c := *b.row(s, "k-success")
					c.ID = uuid.Must(uuid.NewV7())
					s.Jobs = append(s.Jobs, &c)
				}},
				{chaos.KindNotTerminal, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					b.row(s, "k-success").State = job.StateQueued
				}},
				{chaos.KindWrongState, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Jobs = map[string]chaos.Script{"k-success": chaos.ScriptFatal}
				}},
				{chaos.KindDoubleCompletion, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					r := b.row(s, "k-success")
					a := *s.Attempts[r.ID][0]
					a.Attempt++
					a.StartedAt = a.FinishedAt.Add(time.Hour)
					a.FinishedAt = a.StartedAt.Add(time.Second)
					s.Attempts[r.ID] = append(s.Attempts[r.ID], &a)
				}},
				{chaos.KindOverlap, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					r := b.row(s, "k-retry")
					first := s.Attempts[r.ID][0]
					first.FinishedAt = s.Attempts[r.ID][1].StartedAt.Add(time.Millisecond)
				}},
				{chaos.KindAttempts, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					b.row(s, "k-retry").MaxAttempts = 1
				}},
				{chaos.KindOutbox, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					id := b.row(s, "k-fatal").ID
					for i, tr := range s.Transitions {
						if tr.JobID == id && tr.From == job.StateQueued {
							s.Transitions = append(s.Transitions[:i:i], s.Transitions[i+1:]...)
							break
						}
					}
				}},
				{chaos.KindOutbox, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					id := b.row(s, "k-success").ID
					for _, tr := range s.Transitions {
						if tr.JobID == id && tr.To == job.StateSuccess {
							s.Transitions = append(s.Transitions, tr) // published twice
							break
						}
					}
				}},
				{chaos.KindUndelivered, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Deliveries = []chaos.Delivery{{Name: "webhook", Seen: seen(someID, "", "")}}
				}},
				{chaos.KindRedelivered, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Deliveries = []chaos.Delivery{{Name: "sse", Seen: seen("", someID, ""), ExactlyOnce: true}}
				}},
				{chaos.KindPhantomEvent, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Deliveries = []chaos.Delivery{{Name: "sse", Seen: seen("", "", "999999-0"), ExactlyOnce: true}}
				}},
				{chaos.KindExpiredLease, func(s *chaos.Snapshot, exp *chaos.Expectations) {
					exp.AllowNonTerminal = true
					r := b.row(s, "k-success")
					r.State = job.StateRunning
					r.LeaseExpiresAt = time.Now().Add(-time.Hour)
				}},
			}
			for _, c := range cases {
				s := b.load(t)
				exp := b.exp
				c.breakIt(s, &exp)
				got := kinds(s.Check(exp))
				require.Contains(t, got, c.kind, "the checker must catch a %s violation", c.kind)
			}
		})
	}
}

// Rescued counts, from the attempt history, the attempts the rescuer
// ended after their lease expired; the holder's late outcome is refused
// and counts nothing.
func TestSnapshotRescued(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			b := setupCheck(t, backend)
			require.Zero(t, b.load(t).Rescued(), "no lease expired in the scripted jobs")

			now := time.Now()
			res, err := b.st.JobInsertMany(b.ctx, &store.JobInsertManyParams{Now: now, Jobs: []*store.JobInsertParams{{
				ID: uuid.Must(uuid.NewV7()), Type: "t", Queue: "r", Payload: json.RawMessage(`{}`),
				IdempotencyKey: "k-rescued", State: job.StateQueued, MaxAttempts: 3,
			}}})
			require.NoError(t, err)
			id := res[0].Job.ID
			acquire := func(owner string, at time.Time) *job.Row {
				rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "r", Max: 1, Owner: owner, LeaseDuration: time.Second, Now: at})
				require.NoError(t, err)
				require.Len(t, rows, 1)
				return rows[0]
			}
			first := acquire("paused", now)
			// The lease ran out: the rescuer's end of attempt 1.
			ok, err := b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: now.Add(2 * time.Second), ExpiredOnly: true, Jobs: []*store.JobFinishParams{{
				ID: id, Attempt: first.Attempt, State: job.StateRetry, Outcome: job.OutcomeExpired, Error: "lease expired", RunAt: now.Add(2 * time.Second),
			}}})
			require.NoError(t, err)
			require.Equal(t, []job.State{job.StateRetry}, ok)
			_, err = b.st.JobSchedule(b.ctx, &store.JobScheduleParams{Now: now.Add(3 * time.Second), Max: 10})
			require.NoError(t, err)
			second := acquire("other", now.Add(3*time.Second))
			success := func(attempt int) []job.State {
				ok, err := b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: now.Add(4 * time.Second), Jobs: []*store.JobFinishParams{{
					ID: id, Attempt: attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess, FinishedAt: now.Add(4 * time.Second),
				}}})
				require.NoError(t, err)
				return ok
			}
			require.Equal(t, []job.State{""}, success(first.Attempt), "the paused holder's late completion is fenced")
			require.Equal(t, []job.State{job.StateSuccess}, success(second.Attempt))

			s := b.load(t)
			require.Equal(t, 1, s.Rescued())
			b.exp.Jobs["k-rescued"] = chaos.ScriptSuccess
			require.Empty(t, s.Check(b.exp))
		})
	}
}
