package job

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// perTransition is StateChangedData without its methods: encoding/json
// makes the per-transition form of it, as the finishing statement's SQL
// writes it.
type perTransition struct {
	Transitions []Transition `json:"transitions"`
}

func TestStateChangedDataJSON(t *testing.T) {
	id := func() uuid.UUID { return uuid.Must(uuid.NewV7()) }
	for _, d := range []StateChangedData{
		{},
		{Transitions: []Transition{}},
		{Transitions: []Transition{{JobID: uuid.New(), JobType: "email.send", Queue: "default", To: StateQueued}}},
		{Transitions: []Transition{
			{JobID: id(), JobType: "a", Queue: "q", From: StateRunning, To: StateSuccess, Attempt: 3},
			{JobID: uuid.Nil, JobType: "tag<&>\"\\ \u00e9\u2028\x01", Queue: "é", From: StateQueued, To: StateRunning, Attempt: -1},
		}},
		{Transitions: []Transition{ // groups: 3, then 1, then 2, then 1 (the first group again, later)
			{JobID: id(), JobType: "a", Queue: "q", To: StateQueued},
			{JobID: id(), JobType: "a", Queue: "q", To: StateQueued},
			{JobID: id(), JobType: "a", Queue: "q", To: StateQueued},
			{JobID: id(), JobType: "a", Queue: "q", To: StateQueued, Attempt: 1},
			{JobID: id(), JobType: "a", Queue: "r", To: StateQueued},
			{JobID: id(), JobType: "a", Queue: "r", To: StateQueued},
			{JobID: id(), JobType: "a", Queue: "q", To: StateQueued},
		}},
	} {
		requireSameTransitions(t, d)
	}
}

// A row with neither form is an error, not an event of no transitions
// (which the relay would publish as nothing, and mark published).
func TestStateChangedDataJSONNeither(t *testing.T) {
	for _, b := range []string{`{}`, `{"transition":[]}`, `{"jobIds":[]}`} {
		var d StateChangedData
		require.Error(t, json.Unmarshal([]byte(b), &d), b)
	}
	for _, b := range []string{`{"transitions":null}`, `{"transitions":[]}`, `{"groups":[]}`, `{"groups":null}`} {
		var d StateChangedData
		require.NoError(t, json.Unmarshal([]byte(b), &d), b)
		require.Empty(t, d.Transitions, b)
	}
}

// A batch of one type and queue is one group: about a third of the bytes
// of the per-transition form.
func TestStateChangedDataJSONGroups(t *testing.T) {
	var d StateChangedData
	for range 1000 {
		d.Transitions = append(d.Transitions, Transition{JobID: uuid.Must(uuid.NewV7()), JobType: "bench.noop", Queue: "bench.noop", To: StateQueued})
	}
	got := d.AppendJSON(nil)
	require.Equal(t, 1, strings.Count(string(got), `"jobType"`), "one group")
	old, err := json.Marshal(perTransition(d))
	require.NoError(t, err)
	require.Less(t, 3*len(got), len(old)+len(old)/10, "grouped %d bytes, per transition %d", len(got), len(old))
	requireSameTransitions(t, d)
}

// An object with both forms decodes the transitions, then the groups'.
func TestStateChangedDataBothForms(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	var d StateChangedData
	require.NoError(t, json.Unmarshal([]byte(`{"transitions":[{"jobId":"`+a.String()+`","jobType":"t","queue":"q","from":"","to":"QUEUED","attempt":0}],`+
		`"groups":[{"jobType":"u","queue":"r","from":"QUEUED","to":"RUNNING","attempt":2,"jobIds":["`+b.String()+`","`+c.String()+`"]}]}`), &d))
	require.Equal(t, []Transition{
		{JobID: a, JobType: "t", Queue: "q", To: StateQueued},
		{JobID: b, JobType: "u", Queue: "r", From: StateQueued, To: StateRunning, Attempt: 2},
		{JobID: c, JobType: "u", Queue: "r", From: StateQueued, To: StateRunning, Attempt: 2},
	}, d.Transitions)
	require.Error(t, json.Unmarshal([]byte(`{"groups":[{"jobIds":["not a uuid"]}]}`), &d))
}

func FuzzStateChangedDataJSON(f *testing.F) {
	f.Add([]byte{1, 2, 3}, "email.send", "default", "QUEUED", 1, uint8(5))
	f.Add([]byte{}, "<script>", "\xff\xfe", "\u2028", -7, uint8(0xff))
	f.Fuzz(func(t *testing.T, id []byte, typ, queue, state string, attempt int, shape uint8) {
		var u uuid.UUID
		copy(u[:], id)
		// shape's bits choose, for each of eight transitions, whether it
		// changes the group of the one before it.
		var ts []Transition
		for i := range 8 {
			tr := Transition{JobID: u, JobType: typ, Queue: queue, From: State(state), To: StateDead, Attempt: attempt}
			u[15]++
			if shape&(1<<i) != 0 {
				tr.JobType, tr.Queue, tr.To, tr.Attempt = queue, typ, State(state), attempt+i
			}
			ts = append(ts, tr)
		}
		requireSameTransitions(t, StateChangedData{Transitions: ts})
	})
}

// requireSameTransitions: d's grouped encoding is valid JSON and decodes
// to exactly what its per-transition form (encoding/json's) decodes to.
func requireSameTransitions(t *testing.T, d StateChangedData) {
	t.Helper()
	grouped, err := json.Marshal(d)
	require.NoError(t, err)
	require.True(t, json.Valid(grouped), "%s", grouped)
	require.Equal(t, string(grouped), string(d.AppendJSON(nil)))
	old, err := json.Marshal(perTransition(d))
	require.NoError(t, err)
	var want, got StateChangedData
	require.NoError(t, json.Unmarshal(old, &want))
	require.NoError(t, json.Unmarshal(grouped, &got))
	require.Len(t, got.Transitions, len(d.Transitions))
	if len(d.Transitions) > 0 {
		require.Equal(t, want, got)
	}
	// The encoder, a transition at a time, makes the same bytes.
	var e StateChangedEncoder
	for i := range d.Transitions {
		if i == 0 {
			e.Grow(len(d.Transitions), &d.Transitions[0])
		}
		e.Add(&d.Transitions[i])
	}
	require.Equal(t, string(grouped), string(e.JSON()))
}

// The encoding's buffer is sized once: one allocation, and for plain
// strings and attempts below 100 the hint is at least the length and at
// most a byte per group and one more.
func TestStateChangedDataSizeHint(t *testing.T) {
	for _, d := range []StateChangedData{
		{},
		{Transitions: []Transition{{JobID: uuid.New(), JobType: "email.send", Queue: "default", To: StateQueued}}},
		{Transitions: []Transition{
			{JobID: uuid.New(), JobType: "bench.noop", Queue: "bench.noop", From: StateQueued, To: StateRunning, Attempt: 1},
			{JobID: uuid.New(), JobType: "bench.noop", Queue: "bench.noop", From: StateQueued, To: StateRunning, Attempt: 1},
			{JobID: uuid.New(), JobType: "a", Queue: "q", From: StateRunning, To: StateSuccess, Attempt: 99},
		}},
	} {
		got := len(d.AppendJSON(nil))
		hint := d.sizeHint()
		require.GreaterOrEqual(t, hint, got)
		require.LessOrEqual(t, hint-got, len(d.Transitions)+1)
		if !raceEnabled { // the race detector's instrumentation allocates on its own
			require.EqualValues(t, 1, testing.AllocsPerRun(10, func() { _ = d.AppendJSON(nil) }), "one buffer")
		}
	}
}
