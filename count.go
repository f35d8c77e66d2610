package docket

import (
	"context"

	"github.com/docket-run/docket/internal/store"
)

// JobCount is the number of jobs of one queue in one state.
type JobCount = store.JobCount

// CountByQueue counts jobs per queue and state in one query. Pairs with no
// jobs are absent.
func (c *Client) CountByQueue(ctx context.Context) ([]*JobCount, error) {
	return c.store.JobCount(ctx)
}
