package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJudgeBatchStatementError: the batch's one statement failing
// (a judgment id already stored) rolls the batch back: nothing of it is
// written and every judgment is told to run alone.
func TestJudgeBatchStatementError(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 2, 4, 3)
	var first judged
	p0 := judgeParams(g.pool, g.assign(t, g.contributors[3], g.units[0].ID))
	require.NoError(t, g.s.JudgmentInTx(g.ctx, p0, looking(&first)))
	ps := []*judged{{}, {}, {}}
	var calls []*judgeQueued
	for i := range ps {
		p := judgeParams(g.pool, g.assign(t, g.contributors[i], g.units[i%2].ID))
		if i == 1 {
			p.Insert.ID = p0.Insert.ID // a duplicate primary key
		}
		calls = append(calls, g.judgeCallOf(g.ctx, p, looking(ps[i])))
	}
	g.s.judgeSend(g.ctx, calls)
	for i, c := range calls {
		a := <-c.done
		require.True(t, a.alone, "judgment %d: %+v", i, a)
		require.Zero(t, ps[i].tries)
	}
	judgments, unitCounts, counter, active, events := g.judgeCounts(t)
	require.Equal(t, []int{1, 1, 1, 3, 1}, []int{judgments, unitCounts, counter, active, events})
}
