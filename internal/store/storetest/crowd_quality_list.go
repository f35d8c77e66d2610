package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// testQualityList: QualityStateList (the dashboard's contributors panel)
// and the judgments of one contributor in a pool (JudgmentList by
// ContributorID).
func testQualityList(t *testing.T, open opener) {
	t.Run("StateList", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p, other := b.pool(t, 3), b.pool(t, 3)
		us := b.units(t, p.ID, 3, crowd.UnitJudgable)
		flagged, low, fresh, high, elsewhere := b.contributor(t), b.contributor(t), b.contributor(t), b.contributor(t), b.contributor(t)
		put := func(poolID, c uuid.UUID, correct, answered int, value float64, st quality.Standing, reason string) {
			b.inTx(t, func(ctx context.Context, tx store.Tx) error {
				if _, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: poolID, ContributorID: c, Now: base}); err != nil {
					return err
				}
				_, err := tx.QualityStatePut(ctx, &store.QualityStatePutParams{PoolID: poolID, ContributorID: c,
					Trust:    quality.Trust{TestsCorrect: correct, TestsAnswered: answered, Value: value},
					Standing: st, FlagReason: reason, Counts: quality.Counts{Taken: answered, TestsTaken: answered}, TooFast: correct, Now: at(time.Minute)})
				return err
			})
		}
		put(p.ID, flagged.ID, 7, 8, 0.9, quality.Standing{Flagged: true, Check: quality.CheckTooFast}, "too fast")
		put(p.ID, low.ID, 1, 8, 0.2, quality.Standing{}, "")
		put(p.ID, high.ID, 6, 8, 0.7, quality.Standing{}, "")
		_, err := b.lockState(t, p.ID, fresh.ID, base) // no evidence: trust NULL, sorted as the prior 0.5
		require.NoError(t, err)
		put(other.ID, elsewhere.ID, 0, 8, 0.0, quality.Standing{}, "")
		// low judged two units, high one; a judgment in the other pool
		// is not counted.
		b.judgeUnit(t, p.ID, us[0].ID, low.ID, false)
		b.judgeUnit(t, p.ID, us[1].ID, low.ID, false)
		b.judgeUnit(t, p.ID, us[0].ID, high.ID, false)

		page, err := b.s.QualityStateList(b.ctx, &store.QualityStateListParams{PoolID: p.ID, Limit: 10, JudgmentCap: 100, CountCap: 100})
		require.NoError(t, err)
		ids := func(page *store.QualityStatePage) []uuid.UUID {
			out := []uuid.UUID{}
			for _, s := range page.States {
				out = append(out, s.ContributorID)
			}
			return out
		}
		require.Equal(t, []uuid.UUID{flagged.ID, low.ID, fresh.ID, high.ID}, ids(page), "flagged first, then trust ascending")
		require.Equal(t, 4, page.Contributors)
		require.False(t, page.ContributorsCapped)
		got := page.States[0]
		require.Equal(t, p.ID, got.PoolID)
		require.Equal(t, quality.Trust{TestsCorrect: 7, TestsAnswered: 8, Value: 0.9}, got.Trust)
		require.Equal(t, quality.Standing{Flagged: true, Check: quality.CheckTooFast}, got.Standing)
		require.Equal(t, "too fast", got.FlagReason)
		require.Equal(t, at(time.Minute), got.FlaggedAt)
		require.Equal(t, 7, got.TooFast)
		require.Equal(t, quality.Counts{Taken: 8, TestsTaken: 8}, got.Counts)
		require.Equal(t, quality.TrustPrior, page.States[2].Trust.Value, "no evidence reads as the prior")
		one, err := b.s.QualityStateGet(b.ctx, p.ID, low.ID)
		require.NoError(t, err)
		require.Equal(t, one, page.States[1].QualityState, "a listed state is what QualityStateGet reads")
		require.Equal(t, []int{0, 2, 0, 1}, []int{page.States[0].Judgments, page.States[1].Judgments, page.States[2].Judgments, page.States[3].Judgments})
		for _, s := range page.States {
			require.False(t, s.JudgmentsCapped)
		}

		// Capped: the first two, one judgment counted of low's two, three
		// contributors counted of four.
		page, err = b.s.QualityStateList(b.ctx, &store.QualityStateListParams{PoolID: p.ID, Limit: 2, JudgmentCap: 1, CountCap: 3})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{flagged.ID, low.ID}, ids(page))
		require.Equal(t, 1, page.States[1].Judgments)
		require.True(t, page.States[1].JudgmentsCapped)
		require.Equal(t, 3, page.Contributors)
		require.True(t, page.ContributorsCapped)
		// Caps of 0 count nothing; a cap equal to the count is not cut.
		page, err = b.s.QualityStateList(b.ctx, &store.QualityStateListParams{PoolID: p.ID, Limit: 4, JudgmentCap: 2})
		require.NoError(t, err)
		require.Equal(t, 0, page.Contributors)
		require.False(t, page.ContributorsCapped)
		require.Equal(t, 2, page.States[1].Judgments)
		require.False(t, page.States[1].JudgmentsCapped)
		page, err = b.s.QualityStateList(b.ctx, &store.QualityStateListParams{PoolID: p.ID, Limit: 4, CountCap: 4})
		require.NoError(t, err)
		require.Equal(t, 0, page.States[1].Judgments)
		require.Equal(t, 4, page.Contributors)
		require.False(t, page.ContributorsCapped)

		page, err = b.s.QualityStateList(b.ctx, &store.QualityStateListParams{PoolID: newID(), Limit: 5, CountCap: 5})
		require.NoError(t, err)
		require.Empty(t, page.States, "an unknown pool has no contributors")
		require.Equal(t, 0, page.Contributors)

		_, err = b.s.QualityStateList(b.ctx, &store.QualityStateListParams{})
		requireFields(t, err, "poolId", "limit")
		_, err = b.s.QualityStateList(b.ctx, &store.QualityStateListParams{PoolID: p.ID, Limit: store.QualityStateListMax + 1,
			JudgmentCap: -1, CountCap: store.QualityStateCapMax + 1})
		requireFields(t, err, "limit", "judgmentCap", "countCap")
	})

	t.Run("JudgmentsOfContributor", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p, other := b.pool(t, 3), b.pool(t, 3)
		us := b.units(t, p.ID, 2, crowd.UnitJudgable)
		os := b.units(t, other.ID, 1, crowd.UnitJudgable)
		ada, bob := b.contributor(t), b.contributor(t)
		j1 := b.judgeUnit(t, p.ID, us[0].ID, ada.ID, false)
		b.judgeUnit(t, p.ID, us[0].ID, bob.ID, false)
		j2 := b.judgeUnit(t, p.ID, us[1].ID, ada.ID, false)
		b.judgeUnit(t, other.ID, os[0].ID, ada.ID, false)
		list := func(p *store.JudgmentListParams) []uuid.UUID {
			js, err := b.s.JudgmentList(b.ctx, p)
			require.NoError(t, err)
			out := []uuid.UUID{}
			for _, j := range js {
				out = append(out, j.ID)
			}
			return out
		}
		require.Equal(t, []uuid.UUID{j2.ID, j1.ID}, list(&store.JudgmentListParams{PoolID: p.ID, ContributorID: ada.ID}), "newest first, this pool only")
		require.Equal(t, []uuid.UUID{j2.ID}, list(&store.JudgmentListParams{PoolID: p.ID, ContributorID: ada.ID, Limit: 1}))
		require.Equal(t, []uuid.UUID{j1.ID}, list(&store.JudgmentListParams{PoolID: p.ID, ContributorID: ada.ID, BeforeID: j2.ID}))
		require.Empty(t, list(&store.JudgmentListParams{PoolID: p.ID, ContributorID: newID()}))
		_, err := b.s.JudgmentList(b.ctx, &store.JudgmentListParams{UnitID: us[0].ID, ContributorID: ada.ID})
		requireFields(t, err, "contributorId")
	})
}
