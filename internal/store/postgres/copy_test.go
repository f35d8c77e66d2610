package postgres

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// TestCopyEdgeCases: copyReader with times before 2000 and before 1970 with
// sub-microsecond parts, non-ASCII text, a payload larger than a chunk, the
// highest priority; the stored row must equal the returned (planned) row,
// through COPY and through unnest alike.
func TestCopyEdgeCases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := `{"s":"` + strings.Repeat("é\\u00e9x", 40000) + `"}`
	mk := func(q string, n int) []*store.JobInsertParams {
		ps := newJobs(q, n)
		ps[0].RunAt = time.Date(1960, 3, 4, 5, 6, 7, 123456789, time.UTC)
		ps[1].RunAt = time.Date(1999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("x", -7*3600))
		ps[2].Type, ps[2].Queue = "tÿpe-型", q
		ps[3].Payload = json.RawMessage(big)
		ps[4].Priority, ps[4].MaxAttempts, ps[4].Timeout = 9, 1000, 1234567*time.Microsecond
		ps[5].RunAt = time.Date(2300, 1, 1, 0, 0, 0, 1, time.UTC)
		return ps
	}
	now := testBase.Add(987654321 * time.Nanosecond)
	for _, n := range []int{copyMinJobs + 10, 8} {
		ps := mk("edge"+string(rune('a'+n%26)), n)
		res, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: now})
		require.NoError(t, err)
		for i := range 6 {
			got, err := b.s.JobGet(b.ctx, ps[i].ID)
			require.NoError(t, err)
			require.JSONEq(t, string(got.Payload), string(res[i].Job.Payload))
			got.Payload, res[i].Job.Payload = nil, nil
			require.Equal(t, res[i].Job, got, "n=%d row %d", n, i)
			var sortAt time.Time
			require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT sort_at FROM docket_jobs WHERE id=$1`, ps[i].ID).Scan(&sortAt))
			require.True(t, got.RunAt.Add(time.Duration(got.Priority)*store.PriorityAgingDefault).Equal(sortAt), "n=%d row %d sort_at %v", n, i, sortAt)
		}
	}
}
