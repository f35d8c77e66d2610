package postgres

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// The batch's one statement (judgmentInsertBatchSQL) gives each judgment
// what its own statement would have, had the batch's judgments run one
// after another in the batch's order (by unit, then assignment; the
// assignments here are taken in that order, their ids being time-ordered).

// looking is a fn that keeps what its judgment's statement returned and
// writes nothing.
func looking(j *judged) func(context.Context, store.Tx, *store.JudgmentBegun) error {
	return func(_ context.Context, _ store.Tx, begun *store.JudgmentBegun) error {
		j.begun = begun
		j.tries++
		return nil
	}
}

// received is the judgment.received event of judgment id: its count, its
// time, and its place among the pool's events.
type received struct {
	count int
	at    time.Time
	seq   int
}

// receivedEvents are the pool's judgment.received events by judgment.
func (g *crowdPool) receivedEvents(t *testing.T) map[uuid.UUID]received {
	t.Helper()
	rs, err := g.s.Pool().Query(g.ctx, `SELECT (data->>'judgmentId')::uuid, (data->>'judgmentCount')::int, created_at,
		row_number() OVER (ORDER BY id)
		FROM docket_outbox WHERE event_type = 'judgment.received' AND data->>'poolId' = $1`, g.pool.String())
	require.NoError(t, err)
	out := map[uuid.UUID]received{}
	for rs.Next() {
		var (
			id uuid.UUID
			r  received
		)
		require.NoError(t, rs.Scan(&id, &r.count, &r.at, &r.seq))
		r.at = r.at.UTC()
		out[id] = r
	}
	require.NoError(t, rs.Err())
	return out
}

// TestJudgeBatchCounts: a batch with two judgments of a unit judged once
// before (target 3), three of a fresh unit and one of a third: in the
// batch's order each judgment's statement result counts after the ones
// before it (2, 3; 1, 2, 3; 1), the one that reaches the target finalizes
// (and only it), each judgment.received carries its own count and time
// and the events follow the batch's order; each judgment, its assignment
// and its event have the judgment's own time, and a unit the time of its
// last judgment in the batch's order.
func TestJudgeBatchCounts(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 3, 8, 3)
	ua, ub, uc := g.units[0].ID, g.units[1].ID, g.units[2].ID
	// ua judged once before, alone.
	var before judged
	require.NoError(t, g.s.JudgmentInTx(g.ctx, judgeParams(g.pool, g.assign(t, g.contributors[7], ua)), looking(&before)))
	require.Equal(t, 1, before.begun.Inserted.Unit.JudgmentCount)

	type want struct {
		unit  uuid.UUID
		count int
	}
	wants := []want{{ua, 2}, {ua, 3}, {ub, 1}, {ub, 2}, {ub, 3}, {uc, 1}, {uc, 2}}
	js := make([]*judged, len(wants))
	calls := make([]*judgeQueued, len(wants))
	nows := make([]time.Time, len(wants))
	for i, w := range wants {
		p := judgeParams(g.pool, g.assign(t, g.contributors[i], w.unit))
		// Times that fall in the batch's order: a unit's time is its
		// last judgment's, not its latest.
		nows[i] = testBase.Add(time.Duration(30-i) * time.Second)
		p.Insert.Now = nows[i]
		js[i] = &judged{}
		calls[i] = g.judgeCallOf(g.ctx, p, finalizing(js[i], nil))
	}
	// Queued in reverse: the batch's order is its own.
	rev := make([]*judgeQueued, len(calls))
	for i, c := range calls {
		rev[len(calls)-1-i] = c
	}
	g.s.judgeSend(g.ctx, rev)
	events := g.receivedEvents(t)
	seqs := []int{}
	for i, c := range calls {
		require.Equal(t, groupAnswer[struct{}]{}, <-c.done, "judgment %d", i)
		ins := js[i].begun.Inserted
		require.True(t, ins.Created, "judgment %d", i)
		require.Equal(t, wants[i].unit, ins.Unit.ID, "judgment %d", i)
		require.Equal(t, wants[i].count, ins.Unit.JudgmentCount, "judgment %d's count", i)
		require.Equal(t, 3, ins.Unit.JudgmentsPerUnit)
		require.Equal(t, crowd.UnitJudgable, ins.Unit.State, "judgment %d: as its statement left the unit", i)
		require.Equal(t, wants[i].count == 3, js[i].finalized, "judgment %d", i)
		require.Equal(t, calls[i].c.p.Insert.ID, ins.Judgment.ID)
		require.Equal(t, nows[i], ins.Judgment.SubmittedAt, "judgment %d's own time", i)
		require.JSONEq(t, `{"a":1}`, string(ins.Judgment.Data))
		ev, ok := events[ins.Judgment.ID]
		require.True(t, ok, "judgment %d's event", i)
		require.Equal(t, wants[i].count, ev.count, "judgment %d's event count", i)
		require.Equal(t, nows[i], ev.at, "judgment %d's event time", i)
		seqs = append(seqs, ev.seq)
		var finished time.Time
		require.NoError(t, g.s.Pool().QueryRow(g.ctx, `SELECT finished_at FROM docket_assignments WHERE id = $1`,
			calls[i].c.p.Insert.AssignmentID).Scan(&finished))
		require.Equal(t, nows[i], finished.UTC(), "judgment %d's assignment", i)
	}
	require.Len(t, events, 8)
	require.IsIncreasing(t, seqs, "the events in the batch's order")
	// A unit's update time is its last judgment's in the batch's order
	// (uc's: the two at their target were finalized since).
	var at time.Time
	require.NoError(t, g.s.Pool().QueryRow(g.ctx, `SELECT updated_at FROM docket_units WHERE id = $1 AND state = 'JUDGABLE'`, uc).Scan(&at))
	require.Equal(t, nows[6], at.UTC())
	judgments, unitCounts, counter, active, _ := g.judgeCounts(t)
	require.Equal(t, []int{8, 8, 8, 0}, []int{judgments, unitCounts, counter, active})
	// The two units at their target were finalized (by their third
	// judgment's fn), in the batch's transaction.
	require.Equal(t, 2, g.count(t, `SELECT count(*) FROM docket_units WHERE pool_id = $1 AND state = 'FINALIZED'`, g.pool))
}

// TestJudgeBatchRefusedAmongValid: in one batch, among valid judgments of
// two units, an expired assignment (at the judgment's own time), one sent
// by another contributor than its own, and two submitted before (the same
// data, and other data) change nothing and take no place in their unit's
// count: the valid judgments count as if they were not there; each is
// answered as alone. A valid judgment whose contributor has no quality
// state yet gets it made in the batch, and counts.
func TestJudgeBatchRefusedAmongValid(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 2, 9, 5)
	u0, u1 := g.units[0].ID, g.units[1].ID
	c := g.contributors
	// Submitted before, alone, on u1.
	s1, s2 := g.assign(t, c[6], u1), g.assign(t, c[7], u1)
	var j1, j2 judged
	p1, p2 := judgeParams(g.pool, s1), judgeParams(g.pool, s2)
	require.NoError(t, g.s.JudgmentInTx(g.ctx, p1, looking(&j1)))
	require.NoError(t, g.s.JudgmentInTx(g.ctx, p2, looking(&j2)))

	v1 := judgeParams(g.pool, g.assign(t, c[0], u0))
	expired := judgeParams(g.pool, g.assign(t, c[1], u0))
	expired.Insert.Now = testBase.Add(2 * time.Minute) // the lease is a minute
	foreign := judgeParams(g.pool, g.assign(t, c[2], u0))
	foreign.Insert.ContributorID = c[3] // with a quality state, in no other judgment of the batch
	stateless := judgeParams(g.pool, g.assign(t, c[4], u0))
	_, err := g.s.Pool().Exec(g.ctx, `DELETE FROM docket_pool_contributors WHERE pool_id = $1 AND contributor_id = $2`, g.pool, c[4])
	require.NoError(t, err)
	v2 := judgeParams(g.pool, g.assign(t, c[5], u0))
	again := *p1 // the same data again, by its own request
	again.Insert.ID = uuid.Must(uuid.NewV7())
	conflicting := *p2
	conflicting.Insert.ID = uuid.Must(uuid.NewV7())
	conflicting.Insert.Data = json.RawMessage(`{"a":2}`)
	v3 := judgeParams(g.pool, g.assign(t, c[8], u1))

	ps := []*store.JudgmentInTxParams{v1, expired, foreign, stateless, v2, &again, &conflicting, v3}
	js := make([]*judged, len(ps))
	calls := make([]*judgeQueued, len(ps))
	for i, p := range ps {
		js[i] = &judged{}
		calls[i] = g.judgeCallOf(g.ctx, p, looking(js[i]))
	}
	g.s.judgeSend(g.ctx, calls)
	answers := make([]groupAnswer[struct{}], len(calls))
	for i, c := range calls {
		answers[i] = <-c.done
		require.False(t, answers[i].alone, "judgment %d: %+v", i, answers[i])
	}
	refused := func(i int, reason crowd.Refusal) {
		t.Helper()
		var ae *crowd.AssignmentError
		require.ErrorAs(t, answers[i].err, &ae, "judgment %d", i)
		require.Equal(t, reason, ae.Reason, "judgment %d", i)
		require.Zero(t, js[i].tries, "judgment %d's fn did not run", i)
	}
	refused(1, crowd.RefusedExpired)
	refused(2, crowd.RefusedNotOwner)
	require.NotNil(t, js[3].begun.State, "the state made in the batch")
	require.Equal(t, 1, g.count(t, `SELECT count(*) FROM docket_pool_contributors WHERE pool_id = $1 AND contributor_id = $2`, g.pool, c[4]))
	var conflict *crowd.JudgmentConflictError
	require.ErrorAs(t, answers[6].err, &conflict)
	require.Equal(t, j2.begun.Inserted.Judgment.ID, conflict.JudgmentID)
	// The same data again: answered the stored judgment, not created.
	require.NoError(t, answers[5].err)
	require.False(t, js[5].begun.Inserted.Created)
	require.Equal(t, j1.begun.Inserted.Judgment.ID, js[5].begun.Inserted.Judgment.ID)
	// The valid ones count as if the others were not there.
	for _, k := range []struct{ i, count int }{{0, 1}, {3, 2}, {4, 3}, {7, 3}} {
		require.NoError(t, answers[k.i].err, "judgment %d", k.i)
		ins := js[k.i].begun.Inserted
		require.True(t, ins.Created, "judgment %d", k.i)
		require.Equal(t, k.count, ins.Unit.JudgmentCount, "judgment %d's count", k.i)
	}
	events := g.receivedEvents(t)
	require.Equal(t, 3, events[js[4].begun.Inserted.Judgment.ID].count)
	require.Equal(t, 3, events[js[7].begun.Inserted.Judgment.ID].count)
	judgments, unitCounts, counter, active, _ := g.judgeCounts(t)
	require.Equal(t, []int{6, 6, 6, 2}, []int{judgments, unitCounts, counter, active},
		"judgments, units' counts, counter, active: the refused two still ACTIVE")
	require.Equal(t, 6, len(events))
	for _, i := range []int{1, 2} {
		require.Equal(t, 1, g.count(t, `SELECT count(*) FROM docket_assignments WHERE id = $1 AND state = 'ACTIVE' AND finished_at IS NULL`,
			ps[i].Insert.AssignmentID), "judgment %d's assignment unchanged", i)
		require.Zero(t, g.count(t, `SELECT count(*) FROM docket_judgments WHERE id = $1`, ps[i].Insert.ID))
	}
}

// TestJudgeBatchUnitStates: a batch's judgments of a unit CANCELED and of
// one PAUSED before it, and of one canceled by a transaction that held the
// unit while the batch waited for it and committed then: each statement
// result is the unit as it stands once locked (CANCELED, PAUSED,
// CANCELED), counted, as a single judgment's statement returns it; a
// JUDGABLE unit's judgment between them is unaffected.
func TestJudgeBatchUnitStates(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 4, 4, 3)
	ids := []uuid.UUID{g.units[0].ID, g.units[1].ID, g.units[2].ID, g.units[3].ID}
	ps := make([]*store.JudgmentInTxParams, len(ids))
	for i, u := range ids {
		ps[i] = judgeParams(g.pool, g.assign(t, g.contributors[i], u))
	}
	for _, tr := range []struct {
		unit uuid.UUID
		to   crowd.UnitState
	}{{ids[0], crowd.UnitCanceled}, {ids[1], crowd.UnitPaused}} {
		_, err := g.s.UnitTransition(g.ctx, &store.UnitTransitionParams{ID: tr.unit, From: crowd.UnitJudgable, To: tr.to, Now: testBase})
		require.NoError(t, err)
	}
	// ids[2] is held by a transaction that cancels it and commits once
	// the batch waits for the unit.
	tx, err := g.s.Pool().Begin(g.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(g.ctx) }()
	// Its 32-bit xid, as pg_locks shows it (txid_current() adds the
	// epoch, and would match no lock once the cluster's xids wrapped).
	var xid string
	require.NoError(t, tx.QueryRow(g.ctx, `SELECT pg_current_xact_id()::xid::text`).Scan(&xid))
	_, err = tx.Exec(g.ctx, `UPDATE docket_units SET state = 'CANCELED', updated_at = $2 WHERE id = $1`, ids[2], testBase)
	require.NoError(t, err)

	js := make([]*judged, len(ps))
	calls := make([]*judgeQueued, len(ps))
	for i, p := range ps {
		js[i] = &judged{}
		calls[i] = g.judgeCallOf(g.ctx, p, looking(js[i]))
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		g.s.judgeSend(g.ctx, calls)
	}()
	require.Eventually(t, func() bool {
		return g.count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted
			AND transactionid::text = $1`, xid) > 0
	}, time.Minute, 20*time.Millisecond, "the batch waits for the unit")
	require.NoError(t, tx.Commit(g.ctx))
	<-sent
	states := []crowd.UnitState{crowd.UnitCanceled, crowd.UnitPaused, crowd.UnitCanceled, crowd.UnitJudgable}
	for i, c := range calls {
		require.Equal(t, groupAnswer[struct{}]{}, <-c.done, "judgment %d", i)
		u := js[i].begun.Inserted.Unit
		require.Equal(t, ids[i], u.ID)
		require.Equal(t, states[i], u.State, "judgment %d", i)
		require.Equal(t, 1, u.JudgmentCount, "judgment %d", i)
	}
	judgments, unitCounts, counter, _, events := g.judgeCounts(t)
	require.Equal(t, []int{4, 4, 4, 4}, []int{judgments, unitCounts, counter, events})
}
