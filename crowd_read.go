package docket

import (
	"context"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/store"
)

// JudgmentPageParams pages through the judgments of a unit or of a pool:
// give one of UnitID and PoolID.
type JudgmentPageParams struct {
	UnitID uuid.UUID
	PoolID uuid.UUID
	// ContributorID, with PoolID, lists that contributor's judgments in
	// the pool only (by the judgments' (pool_id, contributor_id) index).
	ContributorID uuid.UUID
	Before        uuid.UUID // cursor: ids strictly less
	Limit         int       // default 100, at most 1000
}

// JudgmentPage lists judgments of a unit or of a pool newest first (id
// descending, so submission order), at most p.Limit: what the dashboard's
// pool page samples its rates, speeds and agreement from. Giving neither
// or both of UnitID and PoolID, or a ContributorID without a PoolID, is a
// *CrowdValidationError.
func (c *Client) JudgmentPage(ctx context.Context, p JudgmentPageParams) ([]*Judgment, error) {
	return c.store.JudgmentList(ctx, &store.JudgmentListParams{UnitID: p.UnitID, PoolID: p.PoolID, ContributorID: p.ContributorID,
		BeforeID: p.Before, Limit: listLimit(p.Limit)})
}
