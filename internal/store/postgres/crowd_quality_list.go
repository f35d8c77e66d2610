package postgres

import (
	"context"
	"fmt"

	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// qualityOrder sorts a pool's contributors for the dashboard: flagged
// first, then the lowest trust (no evidence reads as the prior).
var qualityOrder = fmt.Sprintf(`flagged DESC, coalesce(trust, %g), contributor_id`, quality.TrustPrior)

// QualityStateList implements store.Store: the pool's rows through the
// primary key's pool_id prefix, sorted (one row per contributor), the
// first p.Limit kept; then each kept contributor's judgments counted
// through docket_judgments_pool_contributor, at most JudgmentCap + 1 rows
// each.
func (s *Store) QualityStateList(ctx context.Context, p *store.QualityStateListParams) (*store.QualityStatePage, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rs, err := s.pool.Query(ctx, `SELECT `+qualityStateColumns+`,
			(SELECT count(*) FROM (SELECT 1 FROM docket_judgments j
				WHERE j.pool_id = pc.pool_id AND j.contributor_id = pc.contributor_id LIMIT $3) x)
		FROM (SELECT * FROM docket_pool_contributors WHERE pool_id = $1 ORDER BY `+qualityOrder+` LIMIT $2) pc
		ORDER BY `+qualityOrder, p.PoolID, p.Limit, store.CapLimit(p.JudgmentCap))
	if err != nil {
		return nil, fmt.Errorf("list quality states of pool %s: %w", p.PoolID, err)
	}
	defer rs.Close()
	page := &store.QualityStatePage{States: []*store.ListedQualityState{}}
	for rs.Next() {
		var n int
		st, err := scanQualityState(extraScan{rs, &n})
		if err != nil {
			return nil, fmt.Errorf("list quality states of pool %s: %w", p.PoolID, err)
		}
		l := &store.ListedQualityState{QualityState: st}
		l.Judgments, l.JudgmentsCapped = store.Capped(n, p.JudgmentCap)
		page.States = append(page.States, l)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list quality states of pool %s: %w", p.PoolID, err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM docket_pool_contributors WHERE pool_id = $1 LIMIT $2) x`,
		p.PoolID, store.CapLimit(p.CountCap)).Scan(&n); err != nil {
		return nil, fmt.Errorf("count the contributors of pool %s: %w", p.PoolID, err)
	}
	page.Contributors, page.ContributorsCapped = store.Capped(n, p.CountCap)
	return page, nil
}

// extraScan scans a row of a scanner's columns followed by more.
type extraScan struct {
	r    rowScanner
	more any
}

func (e extraScan) Scan(dest ...any) error { return e.r.Scan(append(dest, e.more)...) }
