package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// testListPayload: JobList with a PayloadMatch keeps the jobs whose
// payload holds the value at the path, by JSON type (the string "42" is
// not the number 42 unless both are asked for; numbers compare as
// numbers), never through an array, and only among the newest Within
// rows the other filters select; the cursor and the limit apply to what
// matched.
func testListPayload(t *testing.T, open opener) {
	b := setup(t, open)
	q1, q2 := newQueue(), newQueue()
	payloads := []struct {
		queue, payload string
	}{
		{q1, `{"user": {"id": 42}, "tag": "x"}`}, // 0
		{q1, `{"user": {"id": "42"}}`},           // 1
		{q1, `{"user": {"id": 42.0}}`},           // 2
		{q1, `{"user": {"id": true}}`},           // 3
		{q1, `{"user": [{"id": 42}]}`},           // 4: an array is not a key's object
		{q1, `{"user": {"id": null}}`},           // 5
		{q1, `{"tag": "x y: z\"'%_"}`},           // 6
		{q2, `{"user": {"id": "ada"}}`},          // 7
		{q2, `{"user": {"id": 42}}`},             // 8
	}
	var idsIn []uuid.UUID
	for _, p := range payloads {
		j := newJob(p.queue)
		j.Payload = json.RawMessage(p.payload)
		b.insert(t, j) // one insert each: ids ascending in this order
		idsIn = append(idsIn, j.ID)
	}
	for _, i := range []int{0, 8} { // finished, for the window of finished states
		_, err := b.s.JobCancel(b.ctx, &store.JobCancelParams{ID: idsIn[i], Now: at(time.Second)})
		require.NoError(t, err)
	}
	pick := func(idx ...int) []uuid.UUID {
		out := []uuid.UUID{}
		for _, i := range idx {
			out = append(out, idsIn[i])
		}
		return out
	}
	userID := []string{"user", "id"}
	for _, tc := range []struct {
		name string
		p    store.JobListParams
		want []int
	}{
		{"StringOrNumber", store.JobListParams{Payload: &store.PayloadMatch{Path: userID, Text: "42", Number: "42", Within: 100}}, []int{8, 2, 1, 0}},
		{"NumberWrittenOtherwise", store.JobListParams{Payload: &store.PayloadMatch{Path: userID, Text: "4.2e1", Number: "4.2e1", Within: 100}}, []int{8, 2, 0}},
		{"StringOnly", store.JobListParams{Payload: &store.PayloadMatch{Path: userID, Text: "42", Within: 100}}, []int{1}},
		{"True", store.JobListParams{Payload: &store.PayloadMatch{Path: userID, Text: "true", Literal: "true", Within: 100}}, []int{3}},
		{"Null", store.JobListParams{Payload: &store.PayloadMatch{Path: userID, Text: "null", Literal: "null", Within: 100}}, []int{5}},
		{"Text", store.JobListParams{Payload: &store.PayloadMatch{Path: userID, Text: "ada", Within: 100}}, []int{7}},
		{"Quotes", store.JobListParams{Payload: &store.PayloadMatch{Path: []string{"tag"}, Text: `x y: z"'%_`, Within: 100}}, []int{6}},
		{"TopLevel", store.JobListParams{Payload: &store.PayloadMatch{Path: []string{"tag"}, Text: "x", Within: 100}}, []int{0}},
		{"NoSuchPath", store.JobListParams{Payload: &store.PayloadMatch{Path: []string{"nope", "id"}, Text: "42", Number: "42", Within: 100}}, []int{}},
		{"Window", store.JobListParams{Payload: &store.PayloadMatch{Path: userID, Text: "42", Number: "42", Within: 7}}, []int{8, 2}},
		{"WindowAfterFilters", store.JobListParams{Queues: []string{q1}, Payload: &store.PayloadMatch{Path: userID, Text: "42", Number: "42", Within: 6}}, []int{2, 1}},
		{"CursorInWindow", store.JobListParams{BeforeID: idsIn[2], Payload: &store.PayloadMatch{Path: userID, Text: "42", Number: "42", Within: 100}}, []int{1, 0}},
		{"CursorAfterWindow", store.JobListParams{BeforeID: idsIn[2], Payload: &store.PayloadMatch{Path: userID, Text: "42", Number: "42", Within: 8}}, []int{1}},
		{"FinishedStates", store.JobListParams{States: []job.State{job.StateCanceled}, Payload: &store.PayloadMatch{Path: userID, Text: "42", Number: "42", Within: 100}}, []int{8, 0}},
		{"FinishedWindow", store.JobListParams{States: []job.State{job.StateCanceled}, Payload: &store.PayloadMatch{Path: userID, Text: "42", Number: "42", Within: 1}}, []int{8}},
		{"WaitingStates", store.JobListParams{States: []job.State{job.StateQueued}, Payload: &store.PayloadMatch{Path: userID, Text: "42", Number: "42", Within: 100}}, []int{2, 1}},
		{"Limit", store.JobListParams{Limit: 2, Payload: &store.PayloadMatch{Path: userID, Text: "42", Number: "42", Within: 100}}, []int{8, 2}},
	} {
		p := tc.p
		if p.Limit == 0 {
			p.Limit = 100
		}
		rows, err := b.s.JobList(b.ctx, &p)
		require.NoError(t, err, tc.name)
		require.Equal(t, pick(tc.want...), append([]uuid.UUID{}, ids(rows)...), tc.name)
	}
}

// testListPayloadDeep: a payload nested deeper than SQLite's JSON
// functions read (1,000) does not fail a search that reaches it; it is
// only not matched there. The API refuses such payloads, but a workflow
// step's payload wraps the run's input and its parents' outputs two
// levels deeper, so one can reach the table; before, every search over it
// failed on SQLite ("malformed JSON").
func testListPayloadDeep(t *testing.T, open opener) {
	b := setup(t, open)
	q := newQueue()
	deep := newJob(q)
	deep.Payload = json.RawMessage(`{"tag": "x", "d": ` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`)
	b.insert(t, deep)
	flat := newJob(q)
	flat.Payload = json.RawMessage(`{"tag": "x"}`)
	b.insert(t, flat)
	rows, err := b.s.JobList(b.ctx, &store.JobListParams{Queues: []string{q},
		Payload: &store.PayloadMatch{Path: []string{"tag"}, Text: "x", Within: 100}})
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	require.Equal(t, flat.ID, rows[0].ID)
}
