package quality

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/task"
)

func conf(v float64) *float64 { return &v }

func TestDecideOverlap(t *testing.T) {
	t.Parallel()
	jpu := task.JudgmentsPerUnit{Min: 3, Max: 5, TargetConfidence: 0.9}
	for _, c := range []struct {
		clean int
		conf  *float64
		want  OverlapAction
	}{
		{0, nil, OverlapWait},
		{2, conf(1), OverlapWait},
		{3, conf(0.9), OverlapFinalize}, // exactly the target
		{3, conf(0.8999), OverlapOneMore},
		{4, conf(0.5), OverlapOneMore},
		{5, conf(0.5), OverlapFinalizeLow},
		{6, conf(0.5), OverlapFinalizeLow}, // past the maximum (late submissions)
		{5, conf(0.95), OverlapFinalize},
		{3, nil, OverlapFinalize}, // no categorical field
	} {
		o := DecideOverlap(c.clean, jpu, c.conf)
		require.Equal(t, c.want, o.Action, "%d judgments, %v", c.clean, c.conf)
		require.Equal(t, c.want == OverlapFinalizeLow, o.LowConfidence)
		require.NotEmpty(t, o.Reason)
	}
	require.Equal(t, OverlapFinalize, DecideOverlap(3, task.JudgmentsPerUnit{Min: 3, Max: 5}, conf(0.1)).Action, "no target")
	o := DecideOverlap(5, jpu, conf(0.6))
	require.Equal(t, "5 judgments, the maximum 5, confidence 0.600 still under the target 0.900", o.Reason)
}

// Property: a unit judged one at a time until the decision is not "wait"
// or "one more" ends with between Min and Max judgments, at Min when its
// confidence reaches the target there, and low confidence only at Max.
func TestDecideOverlapProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		lo := 1 + rng.IntN(5)
		jpu := task.JudgmentsPerUnit{Min: lo, Max: lo + rng.IntN(5), TargetConfidence: rng.Float64()}
		confs := make([]float64, jpu.Max+1)
		for i := range confs {
			confs[i] = rng.Float64()
		}
		n := 0
		var o Overlap
		for {
			o = DecideOverlap(n, jpu, conf(confs[n]))
			if o.Action != OverlapWait && o.Action != OverlapOneMore {
				break
			}
			n++
		}
		require.GreaterOrEqual(t, n, jpu.Min)
		require.LessOrEqual(t, n, jpu.Max)
		if confs[jpu.Min] >= jpu.TargetConfidence {
			require.Equal(t, jpu.Min, n)
		}
		if o.LowConfidence {
			require.Equal(t, jpu.Max, n)
			require.Less(t, confs[n], jpu.TargetConfidence)
		}
	}
}

func compile(t *testing.T, src string) *task.Compiled {
	t.Helper()
	tpl, err := task.Parse([]byte(src))
	require.NoError(t, err)
	c, err := task.Compile(tpl)
	require.NoError(t, err)
	return c
}

func TestAgreements(t *testing.T) {
	t.Parallel()
	ct := compile(t, `{"title": "t", "fields": [
		{"name": "same", "kind": "choice", "options": [{"value": "yes"}, {"value": "no"}]},
		{"name": "price", "kind": "number", "tolerance": 1},
		{"name": "note", "kind": "text"}]}`)
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New()}
	got, err := Agreements(ct, json.RawMessage(`{"same": "yes", "price": 10, "note": ["a", "b"]}`), []Judged{
		{ID: ids[0], Data: json.RawMessage(`{"same": "yes", "price": 10.5, "note": "a"}`)},
		{ID: ids[1], Data: json.RawMessage(`{"same": "no", "price": 10}`)},
		{ID: ids[2], Data: json.RawMessage(`{"same": "yes", "price": 11.5}`)},
		{ID: ids[3], Data: json.RawMessage(`{"same": "yes"}`)},
	})
	require.NoError(t, err)
	require.Equal(t, []Agreement{{ids[0], true}, {ids[1], false}, {ids[2], false}, {ids[3], false}}, got)

	got, err = Agreements(ct, json.RawMessage(`{"same": null, "note": []}`), []Judged{{ID: ids[0], Data: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	require.Nil(t, got, "the result decides nothing")

	_, err = Agreements(ct, json.RawMessage(`{"same": "yes"}`), []Judged{{ID: ids[0], Data: json.RawMessage(`{"same": 1}`)}})
	require.Error(t, err)
	_, err = Agreements(ct, json.RawMessage(`[`), nil)
	require.Error(t, err)
}
