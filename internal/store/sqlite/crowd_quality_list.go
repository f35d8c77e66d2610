package sqlite

import (
	"context"
	"fmt"

	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// qualityOrder sorts a pool's contributors for the dashboard, as the
// PostgreSQL store does.
var qualityOrder = fmt.Sprintf(`flagged DESC, coalesce(trust, %g), contributor_id`, quality.TrustPrior)

// QualityStateList implements store.Store (see the PostgreSQL store).
func (s *Store) QualityStateList(ctx context.Context, p *store.QualityStateListParams) (*store.QualityStatePage, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rs, err := s.reader.QueryContext(ctx, `SELECT `+qualityStateColumns+`,
			(SELECT count(*) FROM (SELECT 1 FROM docket_judgments j
				WHERE j.pool_id = pc.pool_id AND j.contributor_id = pc.contributor_id LIMIT ?))
		FROM (SELECT * FROM docket_pool_contributors WHERE pool_id = ? ORDER BY `+qualityOrder+` LIMIT ?) pc
		ORDER BY `+qualityOrder, store.CapLimit(p.JudgmentCap), p.PoolID.String(), p.Limit)
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
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM docket_pool_contributors WHERE pool_id = ? LIMIT ?)`,
		p.PoolID.String(), store.CapLimit(p.CountCap)).Scan(&n); err != nil {
		return nil, fmt.Errorf("count the contributors of pool %s: %w", p.PoolID, err)
	}
	page.Contributors, page.ContributorsCapped = store.Capped(n, p.CountCap)
	return page, nil
}

// extraScan scans a row of a scanner's columns followed by more.
type extraScan struct {
	r    scanner
	more any
}

func (e extraScan) Scan(dest ...any) error { return e.r.Scan(append(dest, e.more)...) }
