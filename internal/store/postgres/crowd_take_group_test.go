package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// call is the first try of contributor c's take of the first of
// candidates, as AssignmentTake queues it.
func (g *crowdPool) call(ctx context.Context, c uuid.UUID, candidates ...uuid.UUID) *takeCall {
	id := uuid.Must(uuid.NewV7())
	stmt := takeStatements[takeKind{takeBatchSQL[takeCandidatesSQL], openUnit}]
	return &takeCall{ctx: ctx, pool: g.pool, done: make(chan takeAnswer, 2), c: takeStmt{id: id, sql: stmt.sql,
		args: stmt.args(pgx.NamedArgs{"id": id, "pool": g.pool, "contributor": c, "now": dbTime(testBase),
			"expires": dbTime(testBase.Add(time.Minute)), "candidates": candidates})}}
}

// TestTakeGroupAnswers: in one batch each take gets its own answer — a
// unit, or "no row" for the one whose candidate is full — and the batch
// counts exactly the takes that took. A take whose context ended while
// queued is answered with its context's error and left out; the batch of
// a leader whose own request ended is sent all the same.
func TestTakeGroupAnswers(t *testing.T) {
	t.Parallel()
	g := setupCrowdPool(t, crowdPoolParams{Units: 3, Slots: 2, Contributors: 4})
	u0, u1, full := g.units[0].ID, g.units[1].ID, g.units[2].ID
	_, err := g.s.Pool().Exec(g.ctx, `UPDATE docket_units SET slots_taken = judgments_per_unit WHERE id = $1`, full)
	require.NoError(t, err)

	canceled, cancel := context.WithCancel(g.ctx)
	cancel()
	calls := []*takeCall{
		g.call(g.ctx, g.contributors[0], u0),
		g.call(canceled, g.contributors[1], u0),
		g.call(g.ctx, g.contributors[2], full),
		g.call(g.ctx, g.contributors[3], u1),
		g.call(g.ctx, g.contributors[0], u0, u1), // the same contributor: sees its own first take
	}
	g.s.takes.pools = map[uuid.UUID]*takeQueue{g.pool: {calls: slices.Clone(calls), leaders: 1}}
	g.s.takeLead(canceled, calls[1])

	answers := make([]takeAnswer, len(calls))
	for i, c := range calls {
		answers[i] = <-c.done
		require.False(t, answers[i].alone || answers[i].lead, "take %d: %+v", i, answers[i])
	}
	require.NoError(t, answers[0].err)
	require.Equal(t, u0, answers[0].r.ID)
	require.ErrorIs(t, answers[1].err, context.Canceled)
	require.ErrorIs(t, answers[2].err, pgx.ErrNoRows)
	require.NoError(t, answers[3].err)
	require.Equal(t, u1, answers[3].r.ID)
	require.NoError(t, answers[4].err)
	require.Equal(t, u1, answers[4].r.ID, "u0 is the contributor's already, in the batch's own transaction")
	require.Empty(t, g.s.takes.pools, "the lead ended and the empty queue was dropped")

	a, slots, counter := g.counts(t)
	require.Equal(t, 3, a)
	require.Equal(t, 3+2, slots, "three taken, and the full unit's two")
	require.Equal(t, 3, counter)
	require.Equal(t, 1, g.count(t, `SELECT count(*) FROM docket_pool_counters WHERE pool_id = $1 AND active_assignments <> 0`, g.pool),
		"one counter shard per batch")
}

// TestTakeGroupRollsBackWhole: a statement of a batch that PostgreSQL
// refuses — here the UNIQUE (unit, contributor) rule — rolls the whole
// batch back, the takes before it too: every take is told to run alone,
// and nothing of the batch stays (no assignment, slot or count).
func TestTakeGroupRollsBackWhole(t *testing.T) {
	t.Parallel()
	g := setupCrowdPool(t, crowdPoolParams{Units: 2, Slots: 2, Contributors: 2})
	u0, u1 := g.units[0].ID, g.units[1].ID
	// The second: the first's contributor and unit again, inserted
	// without the take's check, which the rule refuses.
	clash := &takeCall{ctx: g.ctx, pool: g.pool, done: make(chan takeAnswer, 2), c: takeStmt{id: uuid.Must(uuid.NewV7()),
		sql: `INSERT INTO docket_assignments (id, unit_id, pool_id, contributor_id, state, started_at, expires_at, heartbeat_at, golden)
			VALUES ($1, $2, $3, $4, 'ACTIVE', $5, $5, $5, false) RETURNING NULL`}}
	clash.c.args = []any{clash.c.id, u0, g.pool, g.contributors[0], dbTime(testBase)}
	calls := []*takeCall{g.call(g.ctx, g.contributors[0], u0), clash, g.call(g.ctx, g.contributors[1], u1)}
	g.s.takeSend(g.ctx, calls)
	for i, c := range calls {
		a := <-c.done
		require.True(t, a.alone, "take %d: %+v", i, a)
	}
	a, slots, counter := g.counts(t)
	require.Zero(t, a)
	require.Zero(t, slots)
	require.Zero(t, counter)
}

// TestTakeGroupLeadsBalance: a pool's leaders come back to zero however
// leads and cancellations fall. A leader whose batch filled with older
// takes stays queued and is handed the next lead; leaving the queue then
// passes that lead on, and a lead it took up already is not passed twice
// (it was: the pool ended with a leader too few, and the cap drifted).
func TestTakeGroupLeadsBalance(t *testing.T) {
	t.Parallel()
	for _, leave := range []bool{true, false} {
		t.Run(fmt.Sprintf("leave=%v", leave), func(t *testing.T) {
			g := setupCrowdPool(t, crowdPoolParams{Units: takeGroupMax + 1, Slots: 2, Contributors: takeGroupMax + 1})
			calls := make([]*takeCall, takeGroupMax+1)
			for i := range calls {
				calls[i] = g.call(g.ctx, g.contributors[i], g.units[i].ID)
			}
			last := calls[takeGroupMax]
			g.s.takes.pools = map[uuid.UUID]*takeQueue{g.pool: {calls: slices.Clone(calls), leaders: 1}}
			// last was handed the lead, and takes it up as takeBatched does
			last.led = true
			last.done <- takeAnswer{lead: true}
			require.True(t, (<-last.done).lead)
			g.s.takeLead(g.ctx, last) // sends the oldest takeGroupMax, not last
			for _, c := range calls[:takeGroupMax] {
				a := <-c.done
				require.NoError(t, a.err)
			}
			require.True(t, last.led, "the lead went to the take still queued")
			require.Len(t, last.done, 1, "the lead waits in its channel")
			if leave {
				require.True(t, g.s.takes.leave(last))
				require.False(t, g.s.takes.leave(last), "gone already")
			} else {
				a := <-last.done
				require.True(t, a.lead)
				g.s.takeLead(g.ctx, last)
				a = <-last.done
				require.False(t, a.lead || a.alone, "%+v", a)
				require.False(t, g.s.takes.leave(last), "sent")
			}
			require.Empty(t, g.s.takes.pools, "every lead ended")
		})
	}
}

// TestTakeGroupCanceledAtRandom: many takes of two pools at once, each
// canceled at a random moment or not at all, through AssignmentTake:
// afterwards every queue is gone (no take left waiting, no leader
// counted that does not run) and every take either took or did not.
func TestTakeGroupCanceledAtRandom(t *testing.T) {
	t.Parallel()
	g := setupCrowdPool(t, crowdPoolParams{Units: 400, Slots: 2, Contributors: 200})
	var wg sync.WaitGroup
	for i, c := range g.contributors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(g.ctx, time.Duration(i%7)*time.Millisecond)
			if i%3 == 0 {
				ctx, cancel = context.WithCancel(g.ctx)
			}
			defer cancel()
			for range 2 {
				_, err := g.s.AssignmentTake(ctx, &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: g.pool,
					ContributorID: c, Strategy: crowd.StrategyRandom, Duration: time.Minute, Now: testBase})
				if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					t.Errorf("take: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	g.s.takes.mu.Lock()
	left := len(g.s.takes.pools)
	g.s.takes.mu.Unlock()
	require.Zero(t, left, "every lead ended")
	a, slots, counter := g.counts(t)
	require.Equal(t, a, slots, "slots taken are the ACTIVE assignments")
	require.Equal(t, a, counter, "the counter counts the ACTIVE assignments")
}
