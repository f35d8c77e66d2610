package events_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/events"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// readAll reads the history after cur to its end.
func readAll(t *testing.T, h *events.History, cur events.Cursor, f events.Filter) ([]string, events.Cursor) {
	t.Helper()
	var ids []string
	for {
		evs, next, err := h.Read(t.Context(), cur, f, 2)
		require.NoError(t, err)
		for _, ev := range evs {
			ids = append(ids, ev.ID)
		}
		if next == cur {
			return ids, cur
		}
		cur = next
	}
}

func TestHistory(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			st := relayStore(t, backend)
			ctx := t.Context()
			h := events.NewHistory(st)
			start, err := h.Tail(ctx)
			require.NoError(t, err)

			var ps []*store.JobInsertParams
			for range 3 {
				ps = append(ps, &store.JobInsertParams{
					ID: uuid.Must(uuid.NewV7()), Type: "h", Queue: "h", Payload: json.RawMessage(`{}`),
					State: job.StateQueued, MaxAttempts: 1,
				})
			}
			res, err := st.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: ps[:2], Now: time.Now()}) // one row, two events
			require.NoError(t, err)
			require.Len(t, res, 2)
			_, err = st.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: ps[2:], Now: time.Now()})
			require.NoError(t, err)
			rows, err := st.OutboxListUnpublished(ctx, &store.OutboxListUnpublishedParams{})
			require.NoError(t, err)
			require.Len(t, rows, 2)
			a, b := rows[0].ID, rows[1].ID

			_, err = h.After(ctx, events.EventID(a, 0))
			require.ErrorIs(t, err, events.ErrNotInHistory, "not published yet")
			_, err = h.After(ctx, "x-1")
			require.Error(t, err)
			ids, _ := readAll(t, h, start, events.Filter{})
			require.Empty(t, ids, "nothing published")

			// Published late row first: the history is in publish order.
			_, err = st.OutboxMarkPublished(ctx, &store.OutboxMarkPublishedParams{IDs: []int64{b, a}, Now: time.Now()})
			require.NoError(t, err)
			ids, end := readAll(t, h, start, events.Filter{})
			require.Equal(t, []string{events.EventID(b, 0), events.EventID(a, 0), events.EventID(a, 1)}, ids)
			tail, err := h.Tail(ctx)
			require.NoError(t, err)
			require.Equal(t, tail.Seq, end.Seq)
			require.Equal(t, math.MaxInt, end.Index)

			// Resume inside row a, and filters.
			mid, err := h.After(ctx, events.EventID(a, 0))
			require.NoError(t, err)
			ids, _ = readAll(t, h, mid, events.Filter{})
			require.Equal(t, []string{events.EventID(a, 1)}, ids)
			ids, _ = readAll(t, h, events.Cursor{}, events.Filter{JobID: ps[1].ID})
			require.Equal(t, []string{events.EventID(a, 1)}, ids, "one job of a row of two")
			ids, _ = readAll(t, h, events.Cursor{}, events.Filter{Types: []string{job.EventProgress}})
			require.Empty(t, ids)
			ids, _ = readAll(t, h, tail, events.Filter{})
			require.Empty(t, ids, "at the end")
		})
	}
}
