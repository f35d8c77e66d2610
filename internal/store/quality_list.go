package store

import (
	"context"

	"github.com/google/uuid"
)

// QualityListStore lists what a pool knows of its contributors, for the
// dashboard's contributors panel: bounded, never a count over the pool's
// judgments.
type QualityListStore interface {
	// QualityStateList lists the quality states of a pool's contributors
	// (one per contributor the pool met), flagged first, then by trust
	// ascending (a contributor with no evidence at quality.TrustPrior),
	// then by contributor id; at most p.Limit. Each listed contributor's
	// judgments in the pool are counted up to p.JudgmentCap (through the
	// judgments' (pool_id, contributor_id) index), and the pool's
	// contributors up to p.CountCap (through the primary key). The sort
	// reads the pool's rows of docket_pool_contributors: one per
	// contributor, not per judgment.
	QualityStateList(ctx context.Context, p *QualityStateListParams) (*QualityStatePage, error)
}

// Bounds of QualityStateListParams.
const (
	QualityStateListMax = 1000
	QualityStateCapMax  = 100_000
)

// QualityStateListParams lists a pool's contributors' quality states.
type QualityStateListParams struct {
	PoolID uuid.UUID
	// Limit is how many states to list: 1 … QualityStateListMax.
	Limit int
	// JudgmentCap counts each listed contributor's judgments in the pool
	// up to it (0 … QualityStateCapMax; 0 counts none).
	JudgmentCap int
	// CountCap counts the pool's contributors up to it (0 …
	// QualityStateCapMax; 0 counts none).
	CountCap int
}

// Validate names every invalid field.
func (p *QualityStateListParams) Validate() error {
	pr := problemsOf("list quality states")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.Limit < 1 || p.Limit > QualityStateListMax, "limit", "must be between 1 and %d", QualityStateListMax)
	pr.Check(p.JudgmentCap < 0 || p.JudgmentCap > QualityStateCapMax, "judgmentCap", "must be between 0 and %d", QualityStateCapMax)
	pr.Check(p.CountCap < 0 || p.CountCap > QualityStateCapMax, "countCap", "must be between 0 and %d", QualityStateCapMax)
	return pr.Err()
}

// CapLimit is the LIMIT of a count capped at c: one more row than the cap,
// so that a count above it shows (0 when nothing is counted).
func CapLimit(c int) int {
	if c <= 0 {
		return 0
	}
	return c + 1
}

// Capped is a count read with CapLimit(c): the count, at most c, and
// whether there were more.
func Capped(n, c int) (int, bool) {
	if n > c {
		return c, true
	}
	return n, false
}

// QualityStatePage is a page of QualityStateList.
type QualityStatePage struct {
	States []*ListedQualityState
	// Contributors is how many contributors the pool has a state of, at
	// most CountCap; ContributorsCapped says there are more.
	Contributors       int
	ContributorsCapped bool
}

// ListedQualityState is one contributor's quality state with their
// judgments in the pool, counted up to the cap.
type ListedQualityState struct {
	*QualityState
	Judgments       int
	JudgmentsCapped bool // more than JudgmentCap
}
