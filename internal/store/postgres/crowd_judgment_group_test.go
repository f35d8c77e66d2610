package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// setupJudge is setupCrowdPool's pool with units of target
// judgmentsPerUnit and contributors with a quality state each.
func setupJudge(t *testing.T, units, contributors, judgmentsPerUnit int) *crowdPool {
	t.Helper()
	g := setupCrowdPool(t, crowdPoolParams{Units: units, Slots: judgmentsPerUnit, Contributors: contributors})
	for _, c := range g.contributors {
		_, err := g.s.PoolContributorPut(g.ctx, &store.PoolContributorPutParams{PoolID: g.pool, ContributorID: c, Now: testBase})
		require.NoError(t, err)
	}
	return g
}

// assign is contributor c's assignment on unit u.
func (g *crowdPool) assign(t *testing.T, c, u uuid.UUID) *crowd.Assignment {
	t.Helper()
	tk, err := g.s.AssignmentTake(g.ctx, &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: g.pool, ContributorID: c,
		Strategy: crowd.StrategyCandidates, Candidates: []uuid.UUID{u}, Duration: time.Minute, Now: testBase})
	require.NoError(t, err)
	require.Equal(t, u, tk.Unit.ID)
	return tk.Assignment
}

// judged is what one judgment's last try of fn saw and did.
type judged struct {
	begun     *store.JudgmentBegun
	finalized bool
	tries     int
}

// judgeParams are a's judgment, its unit known.
func judgeParams(pool uuid.UUID, a *crowd.Assignment) *store.JudgmentInTxParams {
	return &store.JudgmentInTxParams{PoolID: pool, UnitID: a.UnitID, RunOfUnit: a.UnitID, Insert: store.JudgmentInsertParams{
		ID: uuid.Must(uuid.NewV7()), AssignmentID: a.ID, ContributorID: a.ContributorID, Data: json.RawMessage(`{"a":1}`),
		Now: testBase.Add(time.Second)}}
}

// finalizing is JudgmentSubmit's fn in short: the judgment whose count
// reaches the target finalizes the unit; ret, when set, is its error.
func finalizing(j *judged, ret error) func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error {
	return func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error {
		j.begun, j.finalized = begun, false
		j.tries++
		if ret != nil {
			return ret
		}
		u := begun.Inserted.Unit
		if !begun.Inserted.Created || u.State != crowd.UnitJudgable || u.JudgmentCount < u.JudgmentsPerUnit {
			return nil
		}
		_, err := tx.UnitFinalize(ctx, &store.UnitFinalizeParams{ID: u.ID, Result: json.RawMessage(`{}`), Now: testBase.Add(time.Second)})
		j.finalized = err == nil
		return err
	}
}

// judgeCallOf queues p with fn, as judgmentInTxGrouped does.
func (g *crowdPool) judgeCallOf(ctx context.Context, p *store.JudgmentInTxParams, fn func(context.Context, store.Tx, *store.JudgmentBegun) error) *judgeQueued {
	return &judgeQueued{ctx: ctx, pool: g.pool, done: make(chan groupAnswer[struct{}], 2), c: judgeCall{p: p, fn: fn}}
}

// judgeCounts are the pool's judgments stored, the units' counts, the
// counter's judgments and its active assignments, and the outbox's
// judgment.received rows.
func (g *crowdPool) judgeCounts(t *testing.T) (judgments, unitCounts, counter, active, events int) {
	t.Helper()
	return g.count(t, `SELECT count(*) FROM docket_judgments WHERE pool_id = $1`, g.pool),
		g.count(t, `SELECT coalesce(sum(judgment_count), 0) FROM docket_units WHERE pool_id = $1`, g.pool),
		g.count(t, `SELECT coalesce(sum(judgments), 0) FROM docket_pool_counters WHERE pool_id = $1`, g.pool),
		g.count(t, `SELECT coalesce(sum(active_assignments), 0) FROM docket_pool_counters WHERE pool_id = $1`, g.pool),
		g.count(t, `SELECT count(*) FROM docket_outbox WHERE event_type = 'judgment.received' AND data->>'poolId' = $1`, g.pool.String())
}

// TestJudgeGroupAnswers: one batch with three judgments of one unit of
// target 3 and one of another: their statements count in order (1, 2, 3),
// the third's fn finalizes the unit, exactly once; each judgment gets its
// own answer; a judgment whose context ended while queued is answered
// with its context's error and left out; a contributor's second judgment
// waits for a later batch (handed the lead); one counter shard moves.
func TestJudgeGroupAnswers(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 2, 5, 3)
	u0, u1 := g.units[0].ID, g.units[1].ID
	as := []*crowd.Assignment{
		g.assign(t, g.contributors[2], u0), g.assign(t, g.contributors[0], u0), g.assign(t, g.contributors[1], u0),
		g.assign(t, g.contributors[3], u1), g.assign(t, g.contributors[4], u1),
		g.assign(t, g.contributors[0], u1), // the same contributor's second
	}
	canceled, cancel := context.WithCancel(g.ctx)
	cancel()
	js := make([]*judged, len(as))
	calls := make([]*judgeQueued, len(as))
	for i, a := range as {
		js[i] = &judged{}
		ctx := g.ctx
		if i == 4 {
			ctx = canceled
		}
		calls[i] = g.judgeCallOf(ctx, judgeParams(g.pool, a), finalizing(js[i], nil))
	}
	g.s.judges.pools = map[uuid.UUID]*groupQueue[judgeCall, struct{}]{g.pool: {calls: slices.Clone(calls), leaders: 1}}
	before := g.s.judges.batched.Load()
	g.s.judges.lead(g.s, judgeSpec, canceled, calls[4]) // the leader's own request ended
	for i, c := range calls[:5] {
		a := <-c.done
		require.False(t, a.alone || a.lead, "judgment %d: %+v", i, a)
		if i == 4 {
			require.ErrorIs(t, a.err, context.Canceled)
			continue
		}
		require.NoError(t, a.err, "judgment %d", i)
		require.True(t, js[i].begun.Inserted.Created)
		require.Equal(t, 1, js[i].tries)
	}
	require.Equal(t, int64(4), g.s.judges.batched.Load()-before)
	// In the batch's order (by unit, then assignment) the counts were 1,
	// 2, 3; only the judgment that reached 3 finalized.
	seen := map[int]bool{}
	for i := range 3 {
		n := js[i].begun.Inserted.Unit.JudgmentCount
		require.False(t, seen[n])
		seen[n] = true
		require.Equal(t, n == 3, js[i].finalized, "judgment %d (count %d)", i, n)
		require.Equal(t, as[i].ContributorID, js[i].begun.State.ContributorID, "its own contributor's state")
	}
	require.Equal(t, 1, js[3].begun.Inserted.Unit.JudgmentCount)
	unit, err := g.s.UnitGet(g.ctx, u0)
	require.NoError(t, err)
	require.Equal(t, crowd.UnitFinalized, unit.State)

	// The contributor's second judgment stayed queued, and was handed
	// the lead.
	last := calls[5]
	require.True(t, last.led, "the lead went to the judgment still queued")
	require.True(t, (<-last.done).lead)
	g.s.judges.lead(g.s, judgeSpec, g.ctx, last)
	a := <-last.done
	require.NoError(t, a.err)
	require.Equal(t, 2, js[5].begun.Inserted.Unit.JudgmentCount)
	require.Empty(t, g.s.judges.pools, "every lead ended, the queue dropped")

	judgments, unitCounts, counter, active, events := g.judgeCounts(t)
	require.Equal(t, 5, judgments)
	require.Equal(t, 5, unitCounts)
	require.Equal(t, 5, counter)
	require.Equal(t, 1, active, "the canceled judgment's assignment")
	require.Equal(t, 5, events)
	require.LessOrEqual(t, g.count(t, `SELECT count(*) FROM docket_pool_counters WHERE pool_id = $1 AND judgments <> 0`, g.pool), 2,
		"one counter shard per batch (two batches)")
}

// TestJudgeGroupRollsBackWhole: a fn's error rolls the whole batch back —
// the judgments before it too — and every judgment is told to run alone;
// nothing of the batch stays (no judgment, count, counter or event).
// Alone, each gets its own answer. The same when an earlier fn changed
// the unit a later judgment of the batch counted on.
func TestJudgeGroupRollsBackWhole(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	t.Run("fn", func(t *testing.T) {
		t.Parallel()
		g := setupJudge(t, 2, 3, 3)
		u0, u1 := g.units[0].ID, g.units[1].ID
		as := []*crowd.Assignment{g.assign(t, g.contributors[0], u0), g.assign(t, g.contributors[1], u0), g.assign(t, g.contributors[2], u1)}
		js := []*judged{{}, {}, {}}
		rets := []error{nil, boom, nil}
		var calls []*judgeQueued
		for i, a := range as {
			calls = append(calls, g.judgeCallOf(g.ctx, judgeParams(g.pool, a), finalizing(js[i], rets[i])))
		}
		g.s.judgeSend(g.ctx, calls)
		for i, c := range calls {
			a := <-c.done
			require.True(t, a.alone, "judgment %d: %+v", i, a)
		}
		judgments, unitCounts, counter, active, events := g.judgeCounts(t)
		require.Zero(t, judgments+unitCounts+counter+events)
		require.Equal(t, 3, active)
		require.Equal(t, 3, g.count(t, `SELECT count(*) FROM docket_assignments WHERE pool_id = $1 AND state = 'ACTIVE'`, g.pool))
		for i, c := range calls {
			err := g.s.JudgmentInTx(g.ctx, c.c.p, c.c.fn)
			if i == 1 {
				require.ErrorIs(t, err, boom)
			} else {
				require.NoError(t, err)
			}
		}
		judgments, unitCounts, counter, active, events = g.judgeCounts(t)
		require.Equal(t, []int{2, 2, 2, 1, 2}, []int{judgments, unitCounts, counter, active, events})
	})
	t.Run("unit changed", func(t *testing.T) {
		t.Parallel()
		g := setupJudge(t, 1, 2, 2)
		u0 := g.units[0].ID
		as := []*crowd.Assignment{g.assign(t, g.contributors[0], u0), g.assign(t, g.contributors[1], u0)}
		// Target 1 now: the first judgment's fn finalizes the unit, which
		// the second's statement saw open, with its target reached.
		_, err := g.s.Pool().Exec(g.ctx, `UPDATE docket_units SET judgments_per_unit = 1 WHERE id = $1`, u0)
		require.NoError(t, err)
		js := []*judged{{}, {}}
		// The second only looks: run after the first, it must see the
		// unit FINALIZED, as it would alone.
		var sawOpen bool
		look := func(_ context.Context, _ store.Tx, begun *store.JudgmentBegun) error {
			u := begun.Inserted.Unit
			sawOpen = u.State == crowd.UnitJudgable && u.JudgmentCount >= u.JudgmentsPerUnit
			return nil
		}
		calls := []*judgeQueued{g.judgeCallOf(g.ctx, judgeParams(g.pool, as[0]), finalizing(js[0], nil)),
			g.judgeCallOf(g.ctx, judgeParams(g.pool, as[1]), look)}
		g.s.judgeSend(g.ctx, calls)
		for i, c := range calls {
			a := <-c.done
			require.True(t, a.alone, "judgment %d: %+v", i, a)
		}
		require.False(t, sawOpen, "in the batch, the second fn ran on the unit its statement left, not the one the first fn made")
		judgments, _, _, _, _ := g.judgeCounts(t)
		require.Zero(t, judgments)
		// Alone, one after the other: the first finalizes, the second
		// sees it.
		for _, c := range calls {
			require.NoError(t, g.s.JudgmentInTx(g.ctx, c.c.p, c.c.fn))
		}
		require.True(t, js[0].finalized)
		require.False(t, sawOpen)
	})
}

// TestJudgeGroupFnStatementsKeepBatch: three judgments of one unit whose
// fns each run a statement (as a golden unit's write their quality
// state) do not roll their batch back: the second's and third's unit,
// read again, is at what the batch's statements left it, not at their
// own counts; the third finalizes, each is answered once.
func TestJudgeGroupFnStatementsKeepBatch(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 1, 3, 3)
	u0 := g.units[0].ID
	js := []*judged{{}, {}, {}}
	var calls []*judgeQueued
	for i, c := range g.contributors {
		fin := finalizing(js[i], nil)
		calls = append(calls, g.judgeCallOf(g.ctx, judgeParams(g.pool, g.assign(t, c, u0)),
			func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error {
				if _, err := tx.UnitGet(ctx, u0); err != nil {
					return err
				}
				return fin(ctx, tx, begun)
			}))
	}
	g.s.judgeSend(g.ctx, calls)
	finalized := 0
	for i, c := range calls {
		require.Equal(t, groupAnswer[struct{}]{}, <-c.done, "judgment %d", i)
		require.Equal(t, 1, js[i].tries, "judgment %d ran once", i)
		if js[i].finalized {
			finalized++
		}
	}
	require.Equal(t, 1, finalized)
	judgments, unitCounts, counter, _, _ := g.judgeCounts(t)
	require.Equal(t, []int{3, 3, 3}, []int{judgments, unitCounts, counter})
}

// TestJudgeGroupSiblingCanceled: an earlier fn that changes another
// unit than its own (as finalizing a unit may end its run and cancel the
// run's other units) rolls the batch back when a later judgment counted on
// that unit; one after another the later judgment would have seen it
// CANCELED.
func TestJudgeGroupSiblingCanceled(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 2, 2, 3)
	first, second := g.units[0].ID, g.units[1].ID
	if bytes.Compare(first[:], second[:]) > 0 {
		first, second = second, first // the batch's order is the units'
	}
	// Units of one run (a fan-out step's): only a fn of a unit of a run
	// can change another unit (finalizing it may end the run and cancel
	// the others); a unit of no run is changed by its own judgments only.
	_, err := g.s.pool.Exec(g.ctx, `UPDATE docket_units SET run_id = $1 WHERE id = ANY($2)`,
		uuid.Must(uuid.NewV7()), []uuid.UUID{first, second})
	require.NoError(t, err)
	cancelSecond := func(ctx context.Context, tx store.Tx, _ *store.JudgmentBegun) error {
		_, err := tx.UnitTransition(ctx, &store.UnitTransitionParams{ID: second, From: crowd.UnitJudgable, To: crowd.UnitCanceled,
			Now: testBase.Add(time.Second)})
		return err
	}
	var looked int
	look := func(context.Context, store.Tx, *store.JudgmentBegun) error { looked++; return nil }
	calls := []*judgeQueued{g.judgeCallOf(g.ctx, judgeParams(g.pool, g.assign(t, g.contributors[0], first)), cancelSecond),
		g.judgeCallOf(g.ctx, judgeParams(g.pool, g.assign(t, g.contributors[1], second)), look)}
	g.s.judgeSend(g.ctx, calls)
	for i, c := range calls {
		require.Equal(t, groupAnswer[struct{}]{alone: true}, <-c.done, "judgment %d", i)
	}
	require.Zero(t, looked, "the later fn did not run on a unit canceled under it")
	judgments, _, _, _, _ := g.judgeCounts(t)
	require.Zero(t, judgments)
}

// TestJudgeGroupTxPerFn: a Tx a fn keeps is finished once that fn
// returns, though the batch's later fns run on the same transaction.
func TestJudgeGroupTxPerFn(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 1, 2, 3)
	u0 := g.units[0].ID
	var (
		kept    store.Tx
		keptErr error
		fns     int
	)
	fn := func(ctx context.Context, tx store.Tx, _ *store.JudgmentBegun) error {
		fns++
		if kept == nil {
			kept = tx
			return nil
		}
		_, keptErr = kept.UnitGet(ctx, u0)
		return nil
	}
	calls := []*judgeQueued{g.judgeCallOf(g.ctx, judgeParams(g.pool, g.assign(t, g.contributors[0], u0)), fn),
		g.judgeCallOf(g.ctx, judgeParams(g.pool, g.assign(t, g.contributors[1], u0)), fn)}
	g.s.judgeSend(g.ctx, calls)
	for i, c := range calls {
		require.Equal(t, groupAnswer[struct{}]{}, <-c.done, "judgment %d", i)
	}
	require.Equal(t, 2, fns)
	require.ErrorIs(t, keptErr, errTxDone)
}

// TestJudgeAnswer: a batch's outcome as each judgment's answer — only a
// PostgreSQL ERROR at COMMIT (or a roll back before it) sends the
// judgments to run alone; a FATAL at COMMIT, like a broken connection,
// leaves the outcome unknown and is their answer.
func TestJudgeAnswer(t *testing.T) {
	t.Parallel()
	own := errors.New("own")
	pgErr := func(severity string) error {
		return fmt.Errorf("commit transaction: %w", &pgconn.PgError{Severity: severity, Code: "57P01"})
	}
	fatal, broken := pgErr("FATAL"), fmt.Errorf("commit transaction: %w", io.ErrUnexpectedEOF)
	require.Equal(t, groupAnswer[struct{}]{}, judgeAnswer(nil, nil))
	require.Equal(t, groupAnswer[struct{}]{err: own}, judgeAnswer(own, fatal))
	require.Equal(t, groupAnswer[struct{}]{alone: true}, judgeAnswer(nil, rollBack(own)))
	require.Equal(t, groupAnswer[struct{}]{alone: true}, judgeAnswer(nil, pgErr("ERROR")))
	require.Equal(t, groupAnswer[struct{}]{err: fatal}, judgeAnswer(nil, fatal))
	require.Equal(t, groupAnswer[struct{}]{err: broken}, judgeAnswer(nil, broken))
}

// TestJudgeGroupCanceledAtRandom: many judgments of one pool at once
// through JudgmentInTx, three of each unit, each canceled at a random
// moment or not at all: afterwards every queue is gone, the judgments
// went in batches, every judgment either was stored or left nothing, a
// unit judged three times was finalized exactly once, and the counter,
// the units' counts, the events and the assignments agree.
func TestJudgeGroupCanceledAtRandom(t *testing.T) {
	t.Parallel()
	const units = 60
	g := setupJudge(t, units, 3*units, 3)
	as := make([]*crowd.Assignment, 0, 3*units)
	for i, c := range g.contributors {
		as = append(as, g.assign(t, c, g.units[i%units].ID))
	}
	before := g.s.judges.batched.Load()
	var (
		wg                 sync.WaitGroup
		stored, finalized  atomic.Int64
		finalizedUnitsSeen sync.Map
	)
	start := make(chan struct{})
	for i, a := range as {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(g.ctx, time.Duration(i%11)*time.Millisecond)
			if i%3 != 0 {
				ctx, cancel = context.WithCancel(g.ctx)
			}
			defer cancel()
			j := &judged{}
			<-start
			err := g.s.JudgmentInTx(ctx, judgeParams(g.pool, a), finalizing(j, nil))
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					t.Errorf("judgment: %v", err)
				}
				return
			}
			stored.Add(1)
			if j.finalized {
				finalized.Add(1)
				if _, dup := finalizedUnitsSeen.LoadOrStore(a.UnitID, true); dup {
					t.Errorf("unit %s finalized twice", a.UnitID)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	g.s.judges.mu.Lock()
	left := len(g.s.judges.pools)
	g.s.judges.mu.Unlock()
	require.Zero(t, left, "every lead ended")
	require.Positive(t, g.s.judges.batched.Load()-before, "no judgment went in a batch of two or more")
	judgments, unitCounts, counter, active, events := g.judgeCounts(t)
	require.Equal(t, int(stored.Load()), judgments)
	require.Equal(t, judgments, unitCounts)
	require.Equal(t, judgments, counter)
	require.Equal(t, judgments, events)
	require.Equal(t, 3*units-judgments, active)
	require.Equal(t, judgments, g.count(t, `SELECT count(*) FROM docket_assignments WHERE pool_id = $1 AND state = 'SUBMITTED'`, g.pool))
	full := g.count(t, `SELECT count(*) FROM docket_units WHERE pool_id = $1 AND judgment_count = 3`, g.pool)
	require.Equal(t, full, g.count(t, `SELECT count(*) FROM docket_units WHERE pool_id = $1 AND state = 'FINALIZED'`, g.pool))
	require.Equal(t, int64(full), finalized.Load(), "each full unit finalized by exactly one committed judgment")
	require.Positive(t, full)
}

// TestJudgeGroupPanic: a fn that panics on the leader's goroutine rolls
// its batch back; its judgment is answered the panic, the batch's others
// run alone (not left waiting); the leader does not panic.
func TestJudgeGroupPanic(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 1, 2, 3)
	u0 := g.units[0].ID
	as := []*crowd.Assignment{g.assign(t, g.contributors[0], u0), g.assign(t, g.contributors[1], u0)}
	calls := []*judgeQueued{g.judgeCallOf(g.ctx, judgeParams(g.pool, as[0]), finalizing(&judged{}, nil)),
		g.judgeCallOf(g.ctx, judgeParams(g.pool, as[1]), func(context.Context, store.Tx, *store.JudgmentBegun) error { panic("fn") })}
	require.NotPanics(t, func() { g.s.judgeSend(g.ctx, calls) })
	require.Equal(t, groupAnswer[struct{}]{alone: true}, <-calls[0].done)
	require.Equal(t, groupAnswer[struct{}]{panicked: "fn"}, <-calls[1].done)
	judgments, _, _, _, _ := g.judgeCounts(t)
	require.Zero(t, judgments)
}

// TestJudgeGroupPanicLeftOutLeader: through the queue, a leader whose own
// judgment is not in the batch it sends (an older judgment of its
// contributor is) and a fn of that batch that panics: the leader does not
// panic, its judgment is then sent and gets its true answer; the
// panicking judgment panics on its own goroutine (do), the other runs
// alone; the pool's queue is gone and it still takes judgments.
func TestJudgeGroupPanicLeftOutLeader(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 2, 2, 3)
	u0, u1 := g.units[0].ID, g.units[1].ID
	older := g.judgeCallOf(g.ctx, judgeParams(g.pool, g.assign(t, g.contributors[0], u0)), finalizing(&judged{}, nil))
	panicking := g.judgeCallOf(g.ctx, judgeParams(g.pool, g.assign(t, g.contributors[1], u0)),
		func(context.Context, store.Tx, *store.JudgmentBegun) error { panic("fn") })
	g.s.judges.pools = map[uuid.UUID]*groupQueue[judgeCall, struct{}]{g.pool: {calls: []*judgeQueued{older, panicking}}}
	// The leader: contributor 0's second judgment, which may not join the
	// batch of its first.
	leader := &judged{}
	var err error
	require.NotPanics(t, func() {
		_, err = g.s.judges.do(g.s, judgeSpec, g.ctx, &judgeQueued{pool: g.pool,
			c: judgeCall{p: judgeParams(g.pool, g.assign(t, g.contributors[0], u1)), fn: finalizing(leader, nil)}})
	})
	require.NoError(t, err)
	require.Equal(t, 1, leader.tries)
	require.Equal(t, groupAnswer[struct{}]{alone: true}, <-older.done)
	require.Equal(t, groupAnswer[struct{}]{panicked: "fn"}, <-panicking.done)
	g.s.judges.mu.Lock()
	left := len(g.s.judges.pools)
	g.s.judges.mu.Unlock()
	require.Zero(t, left, "every lead ended, the queue dropped")
	judgments, _, _, _, _ := g.judgeCounts(t)
	require.Equal(t, 1, judgments, "the leader's judgment, committed and answered")
	// The panic goes on on the judgment's own goroutine.
	require.PanicsWithValue(t, "fn", func() {
		_, _ = g.s.judges.do(g.s, judgeSpec, g.ctx, &judgeQueued{pool: g.pool, c: panicking.c})
	})
	// The pool still takes judgments.
	require.NoError(t, g.s.JudgmentInTx(g.ctx, older.c.p, older.c.fn))
	judgments, _, _, _, _ = g.judgeCounts(t)
	require.Equal(t, 2, judgments)
	g.s.judges.mu.Lock()
	left = len(g.s.judges.pools)
	g.s.judges.mu.Unlock()
	require.Zero(t, left)
}

// TestJudgeGroupUnitJudgments: in a batch, the judgment that brings its
// unit to its target gets the unit's judgments read with the batch's
// statements (the three of it, as its fn lists them), the others none,
// though a fn of another unit (of no run) ran a statement before it. When
// an earlier fn of the same unit ran one (here: tainted its judgment),
// they are dropped, and the fn lists them itself (it would finalize with
// a judgment tainted under it otherwise).
func TestJudgeGroupUnitJudgments(t *testing.T) {
	t.Parallel()
	type seen struct {
		begun  *store.JudgmentBegun
		listed []*crowd.Judgment
	}
	// judge sends one batch: a judgment of other (whose fn runs a
	// statement), then three of unit (the first of which, in the batch's
	// order, taints its own judgment when taint is set); it returns what
	// unit's three fns saw.
	judge := func(t *testing.T, taint bool) []*seen {
		g := setupJudge(t, 2, 4, 3)
		other, unit := g.units[0].ID, g.units[1].ID
		if bytes.Compare(other[:], unit[:]) > 0 {
			other, unit = unit, other // other's fn runs first
		}
		ss := []*seen{{}, {}, {}}
		calls := []*judgeQueued{g.judgeCallOf(g.ctx, judgeParams(g.pool, g.assign(t, g.contributors[3], other)),
			func(ctx context.Context, tx store.Tx, _ *store.JudgmentBegun) error {
				_, err := tx.UnitGet(ctx, other)
				return err
			})}
		for i, s := range ss {
			calls = append(calls, g.judgeCallOf(g.ctx, judgeParams(g.pool, g.assign(t, g.contributors[i], unit)),
				func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error {
					s.begun = begun
					if taint && begun.Inserted.Unit.JudgmentCount == 1 {
						if _, err := tx.(*storeTx).tx.Exec(ctx, `UPDATE docket_judgments SET tainted = true WHERE id = $1`,
							begun.Inserted.Judgment.ID); err != nil {
							return err
						}
					}
					if !begun.Inserted.Unit.TargetReached() {
						return nil // (listing would be a statement of the unit's too)
					}
					var err error
					s.listed, err = tx.JudgmentList(ctx, &store.JudgmentListParams{UnitID: unit})
					return err
				}))
		}
		g.s.judgeSend(g.ctx, calls)
		for i, c := range calls {
			require.Equal(t, groupAnswer[struct{}]{}, <-c.done, "judgment %d", i)
		}
		return ss
	}
	for _, taint := range []bool{false, true} {
		t.Run(fmt.Sprintf("taint=%v", taint), func(t *testing.T) {
			t.Parallel()
			reached := 0
			for _, s := range judge(t, taint) {
				if !s.begun.Inserted.Unit.TargetReached() {
					require.Nil(t, s.begun.UnitJudgments, "count %d", s.begun.Inserted.Unit.JudgmentCount)
					continue
				}
				reached++
				require.Len(t, s.listed, 3)
				require.Equal(t, taint, slices.ContainsFunc(s.listed, func(j *crowd.Judgment) bool { return j.Tainted }))
				if taint {
					require.Nil(t, s.begun.UnitJudgments, "an earlier fn of the unit ran a statement")
				} else {
					require.Equal(t, s.listed, s.begun.UnitJudgments)
				}
			}
			require.Equal(t, 1, reached)
		})
	}
}

// TestJudgeGroupFinalizeLater: fns that finalize their units later
// (UnitFinalizeLater) in a batch: queued, sent together before the
// batch's next statement — a later fn reading an earlier one's unit sees
// it FINALIZED — and before COMMIT; each done gets its unit. A queued
// finalization that fails rolls the whole batch back and every judgment
// runs alone, where it is told why at once.
func TestJudgeGroupFinalizeLater(t *testing.T) {
	t.Parallel()
	// send sends one batch of a judgment of each of three units of
	// target 1, each finalizing its unit later (the first, with bad set,
	// a unit that does not exist), the last reading the first's unit
	// before; it returns the units done got, the state the last read,
	// and the answers.
	send := func(t *testing.T, g *crowdPool, bad bool) (got []*crowd.Unit, read crowd.UnitState, answers []groupAnswer[struct{}]) {
		units := []uuid.UUID{g.units[0].ID, g.units[1].ID, g.units[2].ID}
		slices.SortFunc(units, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }) // the batch's order
		got = make([]*crowd.Unit, len(units))
		var calls []*judgeQueued
		for i, u := range units {
			calls = append(calls, g.judgeCallOf(g.ctx, judgeParams(g.pool, g.assign(t, g.contributors[i], u)),
				func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error {
					got[i] = nil
					if i == len(units)-1 {
						first, err := tx.UnitGet(ctx, units[0])
						if err != nil {
							return err
						}
						read = first.State
					}
					id := begun.Inserted.Unit.ID
					if bad && i == 0 {
						id = uuid.Must(uuid.NewV7())
					}
					return tx.UnitFinalizeLater(ctx, &store.UnitFinalizeParams{ID: id, Result: json.RawMessage(`{}`),
						Now: testBase.Add(time.Second)}, func(u *crowd.Unit) { got[i] = u })
				}))
		}
		g.s.judgeSend(g.ctx, calls)
		for _, c := range calls {
			answers = append(answers, <-c.done)
		}
		return got, read, answers
	}
	t.Run("sent", func(t *testing.T) {
		t.Parallel()
		g := setupJudge(t, 3, 3, 1)
		got, read, answers := send(t, g, false)
		for i, a := range answers {
			require.Equal(t, groupAnswer[struct{}]{}, a, "judgment %d", i)
			require.NotNil(t, got[i], "judgment %d: done got its unit", i)
			require.Equal(t, crowd.UnitFinalized, got[i].State)
		}
		require.Equal(t, crowd.UnitFinalized, read, "a later fn sees an earlier queued finalization")
		require.Equal(t, 3, g.count(t, `SELECT count(*) FROM docket_units WHERE pool_id = $1 AND state = 'FINALIZED'`, g.pool))
		require.Equal(t, 3, g.count(t, `SELECT count(*) FROM docket_outbox WHERE event_type = 'unit.finalized' AND data->>'poolId' = $1`, g.pool.String()))
	})
	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		g := setupJudge(t, 3, 3, 1)
		_, _, answers := send(t, g, true)
		for i, a := range answers {
			require.True(t, a.alone, "judgment %d: %+v", i, a)
		}
		judgments, unitCounts, counter, _, events := g.judgeCounts(t)
		require.Zero(t, judgments+unitCounts+counter+events, "nothing of the batch stays")
		require.Zero(t, g.count(t, `SELECT count(*) FROM docket_units WHERE pool_id = $1 AND state = 'FINALIZED'`, g.pool))
		// Alone, the finalization is not queued: its error is the fn's.
		err := g.s.InTx(g.ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.UnitFinalizeLater(ctx, &store.UnitFinalizeParams{ID: uuid.Must(uuid.NewV7()), Result: json.RawMessage(`{}`),
				Now: testBase.Add(time.Second)}, func(*crowd.Unit) { panic("done of a failed finalization") })
		})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
