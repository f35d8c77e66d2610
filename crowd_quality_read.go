package docket

import (
	"context"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// The reads of quality control (docs/quality.md) that the dashboard shows:
// what a pool knows of its contributors, their trust history, and the
// audit of the results a repair changed.
// What writes them — the take, the judgment, a flag and its repair, an
// admin's forgiveness — is in crowd_quality.go.

// UnitAudit is the record of a change of a finalized unit's result by a
// repair: old and new result, the action, the cause and why.
type UnitAudit = store.UnitAudit

// ContributorQuality is what a pool knows of one contributor for quality
// control: trust, the flag, the counts of the scheduling and the checks.
type ContributorQuality = store.QualityState

// ContributorQualityGet reads what the pool knows of the contributor for
// quality control (a contributor it has not met reads as new).
func (c *Client) ContributorQualityGet(ctx context.Context, poolID, contributorID uuid.UUID) (*ContributorQuality, error) {
	return c.store.QualityStateGet(ctx, poolID, contributorID)
}

// TrustHistory lists the changes of a contributor's trust in a pool,
// oldest first (the last quality.MaxTrustHistory).
func (c *Client) TrustHistory(ctx context.Context, poolID, contributorID uuid.UUID) ([]quality.TrustEntry, error) {
	return c.store.TrustHistoryList(ctx, poolID, contributorID)
}

// UnitAudits lists the audit records of a unit's changed results, oldest
// first.
func (c *Client) UnitAudits(ctx context.Context, unitID uuid.UUID) ([]*UnitAudit, error) {
	return c.store.UnitAuditList(ctx, unitID)
}

// PoolContributorsParams lists a pool's contributors for quality control.
type PoolContributorsParams struct {
	// Limit is how many to list: default 20, at most 1000.
	Limit int
	// JudgmentCap counts each listed contributor's judgments in the pool
	// up to it: default 1000, at most 100,000.
	JudgmentCap int
	// CountCap counts the pool's contributors up to it: default 10,000,
	// at most 100,000.
	CountCap int
}

// Defaults of PoolContributorsParams.
const (
	PoolContributorsLimitDefault       = 20
	PoolContributorsJudgmentCapDefault = 1000
	PoolContributorsCountCapDefault    = 10_000
)

// PoolContributorPage is what PoolContributors lists.
type PoolContributorPage = store.QualityStatePage

// PoolContributor is one contributor of a PoolContributorPage: their
// quality state with their judgments in the pool (counted up to the cap).
type PoolContributor = store.ListedQualityState

// PoolContributors lists what a pool knows of its contributors, the ones
// to look at first: flagged first, then by trust ascending (a contributor
// with no test question yet at quality.TrustPrior), each with their
// judgments in the pool counted up to p.JudgmentCap, and the pool's
// contributors counted up to p.CountCap — bounded reads, never a count
// over the pool's judgments. A contributor appears once the pool keeps a
// quality state of them (from their first judgment there). A bad
// parameter is a *CrowdValidationError naming each.
func (c *Client) PoolContributors(ctx context.Context, poolID uuid.UUID, p PoolContributorsParams) (*PoolContributorPage, error) {
	if p.Limit == 0 {
		p.Limit = PoolContributorsLimitDefault
	}
	if p.JudgmentCap == 0 {
		p.JudgmentCap = PoolContributorsJudgmentCapDefault
	}
	if p.CountCap == 0 {
		p.CountCap = PoolContributorsCountCapDefault
	}
	return c.store.QualityStateList(ctx, &store.QualityStateListParams{PoolID: poolID, Limit: p.Limit, JudgmentCap: p.JudgmentCap, CountCap: p.CountCap})
}
