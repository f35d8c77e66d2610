package storetest

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// testListPayloadNumber: a number search compares exactly, on both
// backends: a 64-bit id (beyond a double's 53 bits of mantissa, as
// snowflake ids are) finds its job and not its neighbour, and written
// otherwise (4.2e1, 42.0) a number still matches.
func testListPayloadNumber(t *testing.T, open opener) {
	b := setup(t, open)
	q := newQueue()
	var idsIn []uuid.UUID
	for _, p := range []string{
		`{"order": 1234567890123456789}`, // 0
		`{"order": 1234567890123456790}`, // 1: the same double as 0
		`{"order": 9007199254740993}`,    // 2: 2^53 + 1
		`{"order": 9007199254740992}`,    // 3: 2^53
		`{"order": 42.0}`,                // 4
	} {
		j := newJob(q)
		j.Payload = json.RawMessage(p)
		b.insert(t, j)
		idsIn = append(idsIn, j.ID)
	}
	for _, tc := range []struct {
		number string
		want   []int
	}{
		{"1234567890123456789", []int{0}},
		{"1234567890123456790", []int{1}},
		{"9007199254740993", []int{2}},
		{"9007199254740992", []int{3}},
		{"42", []int{4}},
		{"4.2e1", []int{4}},
	} {
		rows, err := b.s.JobList(b.ctx, &store.JobListParams{Queues: []string{q}, Limit: 100,
			Payload: &store.PayloadMatch{Path: []string{"order"}, Text: tc.number, Number: tc.number, Within: 100}})
		require.NoError(t, err, tc.number)
		want := []uuid.UUID{}
		for _, i := range tc.want {
			want = append(want, idsIn[i])
		}
		require.Equal(t, want, append([]uuid.UUID{}, ids(rows)...), tc.number)
	}
}
