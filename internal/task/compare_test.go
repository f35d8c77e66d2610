package task

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompare(t *testing.T) {
	t.Parallel()
	choice := &Field{Kind: KindChoice}
	rating := &Field{Kind: KindRating}
	multi := &Field{Kind: KindMultiChoice}
	exact := &Field{Kind: KindNumber}
	loose := &Field{Kind: KindNumber, Tolerance: 0.5}
	text := &Field{Kind: KindText}
	boxes := &Field{Kind: KindBBox}
	strict := &Field{Kind: KindBBox, IoU: ptr(0.9)}
	car := Box{"car", 0.1, 0.1, 0.4, 0.4}
	for _, tc := range []struct {
		name             string
		f                *Field
		answer, judgment any
		correct          bool
	}{
		{"choice same", choice, "yes", "yes", true},
		{"choice other", choice, "yes", "no", false},
		{"choice case matters", choice, "yes", "Yes", false},
		{"rating same", rating, 3, 3, true},
		{"rating near is wrong", rating, 3, 4, false},
		{"multi same set", multi, []string{"a", "b"}, []string{"b", "a"}, true},
		{"multi subset", multi, []string{"a", "b"}, []string{"a"}, false},
		{"multi superset", multi, []string{"a"}, []string{"a", "c"}, false},
		{"multi both empty", multi, []string{}, []string{}, true},
		{"number exact", exact, 2.5, 2.5, true},
		{"number off", exact, 2.5, 2.50001, false},
		{"number within tolerance", loose, 10.0, 10.5, true},
		{"number within tolerance below", loose, 10.0, 9.5, true},
		{"number past tolerance", loose, 10.0, 10.51, false},
		{"text trim, fold, collapse", text, "New York", "  new   YORK\n", true},
		{"text unicode fold", text, "STRASSE Ärger", "strasse ärger", true},
		{"text differs", text, "New York", "NewYork", false},
		{"boxes same", boxes, []Box{car}, []Box{{"car", 0.12, 0.1, 0.4, 0.4}}, true},
		{"boxes label differs", boxes, []Box{car}, []Box{{"truck", 0.1, 0.1, 0.4, 0.4}}, false},
		{"boxes too little overlap", boxes, []Box{car}, []Box{{"car", 0.3, 0.3, 0.4, 0.4}}, false},
		{"boxes count differs", boxes, []Box{car}, []Box{car, car}, false},
		{"boxes missing", boxes, []Box{car, car}, []Box{car}, false},
		{"boxes none and none", boxes, []Box{}, []Box{}, true},
		{"boxes threshold per field", strict, []Box{car}, []Box{{"car", 0.15, 0.1, 0.4, 0.4}}, false},
		{"boxes threshold per field met", strict, []Box{car}, []Box{{"car", 0.12, 0.1, 0.4, 0.4}}, true},
		{"boxes order does not matter", boxes,
			[]Box{{"car", 0, 0, 0.2, 0.2}, {"person", 0.5, 0.5, 0.2, 0.2}},
			[]Box{{"person", 0.5, 0.5, 0.2, 0.2}, {"car", 0, 0, 0.2, 0.2}}, true},
		{"wrong Go type", choice, "yes", 1, false},
		{"absent", choice, "yes", nil, false},
	} {
		require.Equal(t, tc.correct, Compare(tc.f, tc.answer, tc.judgment), tc.name)
	}
}

// A greedy matching (take the best-overlapping pair first) would pair the
// judgment's middle box with the first golden box and leave the second
// golden box unmatched; the exact matching finds the pairing where both
// reach the threshold.
func TestCompareBoxesNotGreedy(t *testing.T) {
	t.Parallel()
	f := &Field{Kind: KindBBox, IoU: ptr(0.4)}
	answer := []Box{{"x", 0.0, 0, 0.4, 1}, {"x", 0.2, 0, 0.4, 1}}
	judgment := []Box{{"x", 0.05, 0, 0.4, 1}, {"x", 0.0, 0, 0.3, 1}}
	// judgment[0] overlaps both golden boxes enough, answer[0] best of all
	// pairs; judgment[1] only overlaps answer[0] enough.
	require.GreaterOrEqual(t, IoU(answer[0], judgment[0]), 0.4)
	require.GreaterOrEqual(t, IoU(answer[1], judgment[0]), 0.4)
	require.Greater(t, IoU(answer[0], judgment[0]), IoU(answer[0], judgment[1]))
	require.Less(t, IoU(answer[1], judgment[1]), 0.4)
	require.True(t, Compare(f, answer, judgment))
	require.True(t, Compare(f, answer, []Box{judgment[1], judgment[0]}))
}

func TestIoU(t *testing.T) {
	t.Parallel()
	a := Box{"", 0, 0, 0.5, 0.5}
	require.Equal(t, 1.0, IoU(a, a))
	require.Equal(t, 0.0, IoU(a, Box{"", 0.5, 0, 0.5, 0.5})) // touching
	require.InDelta(t, 1.0/7, IoU(a, Box{"", 0.25, 0.25, 0.5, 0.5}), 1e-12)
	require.InDelta(t, 0.25, IoU(a, Box{"", 0, 0, 1, 1}), 1e-12)
	require.False(t, math.IsNaN(IoU(Box{}, Box{})))
}

func TestScore(t *testing.T) {
	t.Parallel()
	c := compileString(t, allKinds)
	answer, err := c.ParseAnswer([]byte(`{"same":"yes","price":40,"boxes":[{"label":"car","x":0.1,"y":0.1,"w":0.5,"h":0.5}]}`))
	require.NoError(t, err)
	j, err := c.ParseJudgment([]byte(`{"same":"yes","comment":"x","price":40.4,"stars":2,"boxes":[{"label":"car","x":0.1,"y":0.15,"w":0.5,"h":0.5}]}`))
	require.NoError(t, err)
	require.Equal(t, Score{Correct: true, Fields: []FieldScore{
		{"same", true}, {"price", true}, {"boxes", true},
	}}, c.Score(answer, j))

	j, err = c.ParseJudgment([]byte(`{"same":"no","comment":"x","price":41}`))
	require.NoError(t, err)
	require.Equal(t, Score{Correct: false, Fields: []FieldScore{
		{"same", false}, {"price", false}, {"boxes", false}, // boxes not given
	}}, c.Score(answer, j))
}
