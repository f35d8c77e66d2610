package workflow

import (
	"bytes"
	"context"
	"slices"

	"github.com/google/uuid"
)

// AdvanceTogether is AdvanceRuns without its fallback: the runs are
// advanced in one transaction or not at all, so that a test sees an error
// of the batched path instead of its recovery.
func (a *Advancer) AdvanceTogether(ctx context.Context, st Store, ids []uuid.UUID) error {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
	return a.advanceTogether(ctx, st, slices.Compact(ids))
}
