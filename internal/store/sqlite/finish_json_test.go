package sqlite

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
)

// reflectFinishElems is the element array as encoding/json writes it from
// boxed values, the encoding appendFinishElems replaced.
func reflectFinishElems(es []finishElem) []byte {
	out := make([][]any, len(es))
	for i, e := range es {
		var result, runAt, lastError, rowid any
		if e.hasResult {
			result = e.result
		}
		if e.hasRunAt {
			runAt = e.runAt
		}
		if e.hasLastError {
			lastError = e.lastError
		}
		if e.rowid != 0 {
			rowid = e.rowid
		}
		out[i] = []any{e.id, e.attempt, e.state, result, runAt, lastError, e.finishedAt, e.refund, rowid}
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(err)
	}
	return b
}

func FuzzAppendFinishElems(f *testing.F) {
	f.Add("019a0000-0000-7000-8000-000000000001", 3, "RETRY", `{"a":"b"}`, true, "boom \"quoted\" \\ \n\t\x00 é 😀 <&>", true, int64(-5), int64(1764000000000000), 1, int64(42))
	f.Add("id", 0, "SUCCESS", "", false, "", false, int64(0), int64(0), 0, int64(0))
	f.Add("\xff\xfe", 1, "DEAD", "\u2028", true, "\x7f", true, int64(1)<<62, int64(-1), 0, int64(-7))
	f.Fuzz(func(t *testing.T, id string, attempt int, state, result string, hasResult bool, lastError string, hasLastError bool, runAt, finishedAt int64, refund int, rowid int64) {
		e := finishElem{id: id, attempt: attempt, state: job.State(state), result: result, hasResult: hasResult,
			lastError: lastError, hasLastError: hasLastError, runAt: runAt, hasRunAt: runAt != 0,
			finishedAt: finishedAt, refund: refund, rowid: rowid}
		es := []finishElem{e, {id: "x", state: job.StateSuccess}, e}
		got := appendFinishElems(nil, es)
		require.True(t, json.Valid(got), "%s", got)
		var a, b any
		require.NoError(t, json.Unmarshal(got, &a))
		require.NoError(t, json.Unmarshal(reflectFinishElems(es), &b))
		require.Equal(t, b, a)
	})
}
