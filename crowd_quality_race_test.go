package docket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// TestQualityRace: honest contributors and spammers work one pool at
// once, each in their own goroutine, until nothing is left; the spammers
// are flagged mid-way, while the others' judgments finalize units the
// spammers judged. Afterwards: exactly the spammers are flagged, exactly
// their judgments tainted, every unit finalized on clean judgments only
// (so its result is the honest answer), the targets and counters add up,
// and each flag, test score and result change was written once.
func TestQualityRace(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newQualityFixture(t, backend, "label")
			const units, golden, honest, spammers = 40, 30, 6, 2
			pool, unitIDs := f.pool(t, "label", `{"quizSize": 2, "testEvery": 3, "minTests": 3, "minTrust": 0.6}`, golden, units)
			var who []uuid.UUID
			isSpammer := map[uuid.UUID]bool{}
			for i := range honest + spammers {
				c := f.contributor(t)
				who = append(who, c)
				isSpammer[c] = i >= honest
			}
			var (
				mu         sync.Mutex
				unexpected []string
			)
			work := func(c uuid.UUID) (bool, error) {
				taken, err := f.c.AssignmentTake(ctx, pool.ID, c)
				var ne *NotEligibleError
				switch {
				case IsNoUnit(err), errors.As(err, &ne):
					return false, nil
				case err != nil:
					return false, fmt.Errorf("take: %w", err)
				}
				answer := `{"same": "yes"}`
				if isSpammer[c] {
					answer = `{"same": "no"}`
				}
				_, err = f.c.JudgmentSubmit(ctx, taken.Assignment.ID, c, json.RawMessage(answer))
				return true, err
			}
			var wg sync.WaitGroup
			for _, c := range who {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						more, err := work(c)
						if err != nil {
							mu.Lock()
							unexpected = append(unexpected, err.Error())
							mu.Unlock()
						}
						if !more {
							return
						}
					}
				}()
			}
			wg.Wait()
			require.Empty(t, unexpected)
			// A unit reopened after an honest contributor was told "none
			// left" waits for them: drain until a whole pass takes nothing.
			for more := true; more; {
				more = false
				for _, c := range who[:honest] {
					took, err := work(c)
					require.NoError(t, err)
					more = more || took
				}
			}

			for _, c := range who {
				st, err := f.c.ContributorQualityGet(ctx, pool.ID, c)
				require.NoError(t, err)
				require.Equal(t, isSpammer[c], st.Standing.Flagged, "contributor %s (spammer %v): %+v", c, isSpammer[c], st)
				if isSpammer[c] {
					require.Equal(t, 3, st.Trust.TestsAnswered, "flagged at the third test question")
				}
			}
			js, err := f.c.store.JudgmentList(ctx, &store.JudgmentListParams{PoolID: pool.ID})
			require.NoError(t, err)
			goldenJudgments := 0
			byUnit := map[uuid.UUID][]*Judgment{}
			for _, j := range js {
				require.Equal(t, isSpammer[j.ContributorID], j.Tainted, "judgment %s", j.ID)
				if j.Golden {
					goldenJudgments++
				}
				byUnit[j.UnitID] = append(byUnit[j.UnitID], j)
			}
			audits, changedSpam := 0, 0
			for _, id := range unitIDs {
				u, err := f.c.UnitGet(ctx, id)
				require.NoError(t, err)
				require.Equal(t, UnitFinalized, u.State, "unit %s", id)
				require.JSONEq(t, `{"same": "yes"}`, string(u.Result), "unit %s decided on clean judgments only", id)
				require.InDelta(t, 1.0, *u.Confidence, 1e-9)
				clean, tainted := 0, 0
				for _, j := range byUnit[id] {
					if j.Tainted {
						tainted++
					} else {
						clean++
					}
				}
				require.Equal(t, 3, clean, "unit %s", id)
				require.Equal(t, clean+tainted, u.JudgmentCount, "unit %s", id)
				require.Equal(t, u.JudgmentCount, u.JudgmentsPerUnit, "unit %s: its target counts the tainted judgments", id)
				require.Equal(t, u.JudgmentCount, u.SlotsTaken, "unit %s", id)
				as, err := f.c.UnitAudits(ctx, id)
				require.NoError(t, err)
				for _, a := range as {
					require.True(t, isSpammer[a.Cause.ContributorID])
					require.Equal(t, quality.RepairReopen, a.Action)
					changedSpam++
				}
				audits += len(as)
			}
			p, err := f.c.PoolGet(ctx, pool.ID)
			require.NoError(t, err)
			require.Equal(t, crowd.PoolCounts{Finalized: units, Golden: golden, Judgments: len(js)}, p.Counts)

			ev := f.events(t)
			require.Len(t, ev[quality.EventContributorFlagged], spammers)
			flaggedOnce := map[uuid.UUID]int{}
			for _, e := range ev[quality.EventContributorFlagged] {
				var d quality.ContributorFlaggedData
				require.NoError(t, json.Unmarshal(e, &d))
				flaggedOnce[d.ContributorID]++
			}
			for c, n := range flaggedOnce {
				require.True(t, isSpammer[c])
				require.Equal(t, 1, n)
			}
			require.Len(t, ev[quality.EventTestJudgmentEvaluated], goldenJudgments)
			require.Len(t, ev[quality.EventUnitResultChanged], audits)
			t.Logf("%d judgments (%d on test questions); %d finalized results reopened by a flag", len(js), goldenJudgments, changedSpam)
		})
	}
}
