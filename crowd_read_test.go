package docket_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestJudgmentPage: a pool's judgments newest first, paged by cursor; a
// unit's only; one contributor's in the pool; neither or both of unit and
// pool is refused, naming them, as is a contributor without a pool.
func TestJudgmentPage(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		humanFlow(t, b.client)
		pool, _, err := b.client.PoolEnsure(ctx, "review", 1, "label", "same")
		require.NoError(t, err)
		_, err = b.client.UnitsAdd(ctx, pool.ID, []json.RawMessage{json.RawMessage(`{"n":1}`), json.RawMessage(`{"n":2}`)})
		require.NoError(t, err)
		var submitted []*docket.Judgment
		var who0 *docket.Contributor
		for _, name := range []string{"ada", "bob", "cyd"} {
			who, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: name})
			require.NoError(t, err)
			if who0 == nil {
				who0 = who
			}
			taken, err := b.client.AssignmentTake(ctx, pool.ID, who.ID)
			require.NoError(t, err)
			s, err := b.client.JudgmentSubmit(ctx, taken.Assignment.ID, who.ID, json.RawMessage(`{"same":"yes"}`))
			require.NoError(t, err)
			submitted = append(submitted, s.Judgment)
		}

		first, err := b.client.JudgmentPage(ctx, docket.JudgmentPageParams{PoolID: pool.ID, Limit: 2})
		require.NoError(t, err)
		require.Len(t, first, 2)
		rest, err := b.client.JudgmentPage(ctx, docket.JudgmentPageParams{PoolID: pool.ID, Before: first[1].ID})
		require.NoError(t, err)
		require.Len(t, rest, 1)
		all := append(first, rest...)
		for i, j := range all {
			require.Equal(t, submitted[len(submitted)-1-i].ID, j.ID, "newest first")
			if i > 0 {
				require.Negative(t, bytes.Compare(j.ID[:], all[i-1].ID[:]))
			}
		}

		unit := submitted[0].UnitID
		of, err := b.client.JudgmentPage(ctx, docket.JudgmentPageParams{UnitID: unit})
		require.NoError(t, err)
		require.NotEmpty(t, of)
		n := 0
		for _, j := range submitted {
			if j.UnitID == unit {
				n++
			}
		}
		require.Len(t, of, n)
		for _, j := range of {
			require.Equal(t, unit, j.UnitID)
		}

		mine, err := b.client.JudgmentPage(ctx, docket.JudgmentPageParams{PoolID: pool.ID, ContributorID: who0.ID})
		require.NoError(t, err)
		require.Len(t, mine, 1)
		require.Equal(t, submitted[0].ID, mine[0].ID, "the contributor's only")

		var ve *docket.CrowdValidationError
		_, err = b.client.JudgmentPage(ctx, docket.JudgmentPageParams{UnitID: unit, ContributorID: who0.ID})
		require.ErrorAs(t, err, &ve)
		require.ErrorContains(t, err, "contributorId")
		_, err = b.client.JudgmentPage(ctx, docket.JudgmentPageParams{})
		require.ErrorAs(t, err, &ve)
		require.ErrorContains(t, err, "unitId")
		require.ErrorContains(t, err, "poolId")
		_, err = b.client.JudgmentPage(ctx, docket.JudgmentPageParams{UnitID: unit, PoolID: pool.ID})
		require.ErrorAs(t, err, &ve)
	})
}

// TestPoolContributors: the defaults apply (a pool met by nobody lists
// nobody, counted), and a bad parameter is refused naming each.
func TestPoolContributors(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		humanFlow(t, b.client)
		pool, _, err := b.client.PoolEnsure(ctx, "review", 1, "label", "same")
		require.NoError(t, err)
		page, err := b.client.PoolContributors(ctx, pool.ID, docket.PoolContributorsParams{})
		require.NoError(t, err)
		require.Empty(t, page.States)
		require.Equal(t, 0, page.Contributors)
		require.False(t, page.ContributorsCapped)
		var ve *docket.CrowdValidationError
		_, err = b.client.PoolContributors(ctx, pool.ID, docket.PoolContributorsParams{Limit: 1001, JudgmentCap: -1, CountCap: 100_001})
		require.ErrorAs(t, err, &ve)
		for _, f := range []string{"limit", "judgmentCap", "countCap"} {
			require.ErrorContains(t, err, f)
		}
	})
}

// TestContributorTokens: a contributor's skills and channels follow the
// rule of a template's (flow.CheckToken) from Go as over HTTP: "en " or
// "fr/CA" was stored by ContributorCreate and ContributorUpdate and then
// matched no pool. Every bad one is named.
func TestContributorTokens(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		var ve *docket.CrowdValidationError
		_, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "tok", Skills: []string{"en", "en "}, Channels: []string{"fr/CA"}})
		require.ErrorAs(t, err, &ve)
		require.ErrorContains(t, err, "skills[1]")
		require.ErrorContains(t, err, "channels[0]")
		require.NotContains(t, err.Error(), "skills[0]")
		who, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "tok", Skills: []string{"en", "fr-CA"}})
		require.NoError(t, err)
		bad := []string{"a b"}
		_, err = b.client.ContributorUpdate(ctx, who.ID, docket.ContributorUpdateParams{Skills: &bad})
		require.ErrorAs(t, err, &ve)
		require.ErrorContains(t, err, "skills[0]")
	})
}

// TestContributorFlaggedRefused: "flagged" is no contributor's state
// (quality control flags a contributor in one pool). HTTP refused it in
// PATCH and GET /v1/contributors; ContributorUpdate stored it, and
// ContributorList filtered by it. Both are a *CrowdValidationError naming
// the field now, and the contributor is left as it was.
func TestContributorFlaggedRefused(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		who, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "fl"})
		require.NoError(t, err)
		flagged := docket.ContributorFlagged
		var ve *docket.CrowdValidationError
		_, err = b.client.ContributorUpdate(ctx, who.ID, docket.ContributorUpdateParams{State: &flagged})
		require.ErrorAs(t, err, &ve)
		require.Len(t, ve.Errors, 1)
		require.Equal(t, "state", ve.Errors[0].Field)
		require.Contains(t, ve.Errors[0].Message, "one pool")
		got, err := b.client.ContributorGet(ctx, who.ID)
		require.NoError(t, err)
		require.Equal(t, docket.ContributorActive, got.State)
		_, err = b.client.ContributorList(ctx, docket.ContributorListParams{States: []docket.ContributorState{flagged}})
		require.ErrorAs(t, err, &ve)
		require.Equal(t, "state[0]", ve.Errors[0].Field)
	})
}
