package job

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// reflected is StateChangedData without its MarshalJSON: what encoding/json
// makes of the fields.
type reflected struct {
	Transitions []Transition `json:"transitions"`
}

func TestStateChangedDataJSONIsEncodingJSON(t *testing.T) {
	for _, d := range []StateChangedData{
		{},
		{Transitions: []Transition{}},
		{Transitions: []Transition{{JobID: uuid.New(), JobType: "email.send", Queue: "default", To: StateQueued}}},
		{Transitions: []Transition{
			{JobID: uuid.Must(uuid.NewV7()), JobType: "a", Queue: "q", From: StateRunning, To: StateSuccess, Attempt: 3},
			{JobID: uuid.Nil, JobType: "tag<&>\"\\ \u00e9\u2028\x01", Queue: "é", From: StateQueued, To: StateRunning, Attempt: -1},
		}},
	} {
		requireSameJSON(t, d)
	}
}

func FuzzStateChangedDataJSON(f *testing.F) {
	f.Add([]byte{1, 2, 3}, "email.send", "default", "QUEUED", 1)
	f.Add([]byte{}, "<script>", "\xff\xfe", "\u2028", -7)
	f.Fuzz(func(t *testing.T, id []byte, typ, queue, state string, attempt int) {
		var u uuid.UUID
		copy(u[:], id)
		requireSameJSON(t, StateChangedData{Transitions: []Transition{
			{JobID: u, JobType: typ, Queue: queue, From: State(state), To: StateDead, Attempt: attempt},
			{JobID: u, JobType: queue, Queue: typ, To: State(state)},
		}})
	})
}

func requireSameJSON(t *testing.T, d StateChangedData) {
	t.Helper()
	want, err := json.Marshal(reflected(d))
	require.NoError(t, err)
	got, err := json.Marshal(d)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
	require.Equal(t, string(want), string(d.AppendJSON(nil)))
}

// The encoding's buffer is sized once: one allocation, and for plain
// strings and attempts below 100 the hint is at least the length and at
// most a byte per transition and one more.
func TestStateChangedDataSizeHint(t *testing.T) {
	for _, d := range []StateChangedData{
		{},
		{Transitions: []Transition{{JobID: uuid.New(), JobType: "email.send", Queue: "default", To: StateQueued}}},
		{Transitions: []Transition{
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
