package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// TestJudgeGroupFinalizeLaterEdges: a batch's queued finalizations where
// no later statement sends them (only the flush before COMMIT does), and
// a fn that queues one and then fails or panics: the batch rolls back,
// every judgment runs alone (the panicking one answered its panic), no
// done is called for what did not run, and nothing of the batch stays.
func TestJudgeGroupFinalizeLaterEdges(t *testing.T) {
	t.Parallel()
	type edge int
	const (
		badLast    edge = iota // the last fn queues a finalization that fails (no rows), sent only before COMMIT
		errAfter               // the first fn queues a good one, then returns an error
		panicAfter             // the first fn queues a good one, then panics
	)
	for name, e := range map[string]edge{"bad last": badLast, "error after": errAfter, "panic after": panicAfter} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := setupJudge(t, 3, 3, 1)
			units := []uuid.UUID{g.units[0].ID, g.units[1].ID, g.units[2].ID}
			slices.SortFunc(units, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
			doneCalls := 0
			var calls []*judgeQueued
			for i, u := range units {
				calls = append(calls, g.judgeCallOf(g.ctx, judgeParams(g.pool, g.assign(t, g.contributors[i], u)),
					func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error {
						id := begun.Inserted.Unit.ID
						if e == badLast && i == len(units)-1 {
							id = uuid.Must(uuid.NewV7())
						}
						err := tx.UnitFinalizeLater(ctx, &store.UnitFinalizeParams{ID: id, Result: json.RawMessage(`{}`),
							Now: testBase.Add(time.Second)}, func(*crowd.Unit) { doneCalls++ })
						if err != nil || i != 0 {
							return err
						}
						switch e {
						case errAfter:
							return errors.New("fn")
						case panicAfter:
							panic("fn")
						}
						return nil
					}))
			}
			require.NotPanics(t, func() { g.s.judgeSend(g.ctx, calls) })
			for i, c := range calls {
				a := <-c.done
				if e == panicAfter && i == 0 {
					require.Equal(t, groupAnswer[struct{}]{panicked: "fn"}, a)
					continue
				}
				require.Equal(t, groupAnswer[struct{}]{alone: true}, a, "judgment %d", i)
			}
			require.Zero(t, doneCalls, "no done for a finalization that did not stay")
			judgments, unitCounts, counter, _, events := g.judgeCounts(t)
			require.Zero(t, judgments+unitCounts+counter+events, "nothing of the batch stays")
			require.Zero(t, g.count(t, `SELECT count(*) FROM docket_units WHERE pool_id = $1 AND state = 'FINALIZED'`, g.pool))
			require.Zero(t, g.count(t, `SELECT count(*) FROM docket_outbox WHERE event_type = 'unit.finalized' AND data->>'poolId' = $1`, g.pool.String()))
		})
	}
}
