package docket_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestQualityReviewLockOrder: a flag's repair and an admin's
// forgiveness race QA review rejects and judgments on the same units
// (docs/quality.md, "Lock order"). A round: a spammer answers the label
// step of every run with the first option, next to an honest "no"; the
// label units finalize unsure and are reviewed. The spammer's last label
// judgment (its review flags them: their answers are all the first
// option) races a reject of every other run's review, each a
// transaction that holds its run and redoes the label unit — tainting
// the judgments the flag taints too. Then the forgiveness races the
// judgments that redo those units. Before the one lock order (the
// flag's repair tainted the judgments before it locked the runs),
// PostgreSQL answered some of these "deadlock detected" (SQLSTATE
// 40P01). Every call must succeed; the spammer is flagged after the
// first race and not after the second.
//
// Not raced here: a judgment that finalizes a label unit (it moves a
// label pool counter row, then releases a review unit and moves a review
// pool counter row) against a reject (review pool row, then the label
// pool's, to redo the unit). When both draw the same counter shard they
// can deadlock — the order of two pools' counter rows is not fixed yet
// (docs/quality.md, "Lock order").
func TestQualityReviewLockOrder(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		runs, rounds := 24, 4
		if backend.Name == "sqlite" {
			runs, rounds = 4, 2
		}
		labelQC := fmt.Sprintf(`{"title": "Same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": 2},
 "quality": {"quizSize": 0, "testEvery": 0, "patternWindow": %d, "patternFirstOption": true}}`, runs)
		b := reviewSetup(t, backend, reviewTask)
		ctx := context.Background()
		tmpl, err := docket.ParseTask([]byte(labelQC))
		require.NoError(t, err)
		_, _, err = b.client.TaskPut(ctx, "label2", tmpl)
		require.NoError(t, err)

		var (
			mu   sync.Mutex
			errs []string
		)
		fail := func(what string, err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, fmt.Sprintf("%s: %v", what, err))
		}
		take := func(unitID, who uuid.UUID) *docket.TakenAssignment {
			unit, err := b.client.UnitGet(ctx, unitID)
			require.NoError(t, err)
			tk, err := b.client.AssignmentTake(ctx, unit.PoolID, who)
			require.NoError(t, err)
			require.Equal(t, unitID, tk.Unit.ID)
			return tk
		}
		// drain has fresh contributors answer the pool until one finds
		// nothing left, so that the next round's takes get its units.
		drain := func(pool uuid.UUID, answer string) {
			for range 1000 {
				tk, err := b.client.AssignmentTake(ctx, pool, b.contributor())
				if docket.IsNoUnit(err) {
					return
				}
				require.NoError(t, err)
				_, err = b.client.JudgmentSubmit(ctx, tk.Assignment.ID, tk.Assignment.ContributorID, json.RawMessage(answer))
				require.NoError(t, err)
			}
			t.Fatalf("pool %s never drained", pool)
		}
		var labelPool, reviewPool uuid.UUID
		for round := range rounds {
			spammer := b.contributor()
			// Every run but the last: labelled yes (the spammer) and no,
			// finalized at 0.5, so reviewed; its review taken. One run at
			// a time, so that each take gets the unit it means to.
			rejects := make([]*docket.TakenAssignment, runs-1)
			reviewers := make([]uuid.UUID, runs-1)
			for i := range runs - 1 {
				id := b.start(0)
				b.labelBy(id, []uuid.UUID{spammer, b.contributor()}, "yes", "no")
				reviewers[i] = b.contributor()
				rejects[i] = take(stepNamed(t, b.run(id), "review").UnitID, reviewers[i])
				reviewPool = rejects[i].Unit.PoolID
			}
			label := stepNamed(t, b.run(b.start(0)), "label").UnitID
			unit, err := b.client.UnitGet(ctx, label)
			require.NoError(t, err)
			labelPool = unit.PoolID
			// The last run's label unit: the spammer's judgment is its
			// first, so it finalizes nothing (see the note above).
			last := take(label, spammer)

			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := b.client.JudgmentSubmit(ctx, last.Assignment.ID, spammer, json.RawMessage(`{"same":"yes"}`)); err != nil {
					fail("the spammer's last judgment", err)
				}
			}()
			// The rejects in a few goroutines, the last runs first: the
			// flag's repair locks the runs in id order, so the last are
			// the ones it reaches last.
			const rejecters = 3
			for g := range rejecters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := len(rejects) - 1 - g; i >= 0; i -= rejecters {
						if _, err := b.client.JudgmentSubmit(ctx, rejects[i].Assignment.ID, reviewers[i], json.RawMessage(`{"verdict":"reject"}`)); err != nil {
							fail("reject", err)
						}
					}
				}()
			}
			wg.Wait()
			require.Empty(t, errs, "round %d", round)
			st, err := b.client.ContributorQualityGet(ctx, labelPool, spammer)
			require.NoError(t, err)
			require.True(t, st.Standing.Flagged, "round %d: the spammer is flagged", round)

			// The forgiveness races the judgments that redo the units the
			// rejects and the flag reopened.
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := b.client.ContributorForgive(ctx, labelPool, spammer, "admin"); err != nil {
					fail("forgive", err)
				}
			}()
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: uuid.NewString()})
					if err != nil {
						fail("contributor", err)
						return
					}
					for range runs {
						tk, err := b.client.AssignmentTake(ctx, labelPool, c.ID)
						var ne *docket.NotEligibleError
						switch {
						case docket.IsNoUnit(err), errors.As(err, &ne):
							return
						case err != nil:
							fail("take", err)
							return
						}
						if _, err := b.client.JudgmentSubmit(ctx, tk.Assignment.ID, c.ID, json.RawMessage(`{"same":"no"}`)); err != nil {
							fail("redo judgment", err)
						}
					}
				}()
			}
			wg.Wait()
			require.Empty(t, errs, "round %d", round)
			drain(labelPool, `{"same":"no"}`)
			drain(reviewPool, `{"verdict":"approve"}`)
			st, err = b.client.ContributorQualityGet(ctx, labelPool, spammer)
			require.NoError(t, err)
			require.False(t, st.Standing.Flagged, "round %d: the spammer is forgiven", round)
		}

	})
}
