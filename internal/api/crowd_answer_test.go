package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
)

// answerTemplates are templates a take's answer carries: every field and
// display kind, text with HTML characters, escapes and other scripts.
var answerTemplates = []string{sameProduct, `{"title": "Boxes <b>& \"logos\"</b>",
 "instructions": "Draw a box round each logo — <i>not</i> the barcode. Ünïcödé, 日本語, \u2028 and \\ are kept.",
 "display": [{"kind": "text", "from": "unit.left"}, {"kind": "image", "from": "unit.photo"}, {"kind": "link", "from": "unit.url"}],
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "a<b", "label": "A & B"}, {"value": "no"}]},
            {"name": "tags", "kind": "multi_choice", "options": [{"value": "x"}, {"value": "y"}]},
            {"name": "note", "kind": "text", "maxLength": 200},
            {"name": "weight", "kind": "number", "min": -1.5, "max": 1e6},
            {"name": "stars", "kind": "rating", "scale": 5},
            {"name": "boxes", "kind": "bbox", "image": "unit.photo", "labels": ["logo", "barcode"], "max": 10}],
 "judgmentsPerUnit": {"min": 3, "max": 5, "targetConfidence": 0.9}, "assignmentSeconds": 900}`}

// answerInputs are units' inputs as the stores return them (PostgreSQL's
// jsonb spaces its text).
var answerInputs = []string{`{"left": "Acme anvil 10kg", "right": "ACME Anvil, 10 kg"}`, `{}`, `[1, 2.50, -3e10, true, null]`,
	"{\"a\":\t{\"b\" : [ \"<&>\", \"\\u003c\\u2028\\\"\" ]},\n \"c\": \"日本\"}", `"just a string"`, `12`}

// encodeStd is v as encoding/json writes an answer (writeJSON without
// jsonAppender).
func encodeStd(t testing.TB, v any) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return buf.Bytes(), err
}

func compileTemplate(t testing.TB, text string) *docket.CompiledTask {
	t.Helper()
	tmpl, err := task.Parse([]byte(text))
	require.NoError(t, err)
	ct, err := task.Compile(tmpl)
	require.NoError(t, err)
	return ct
}

// A take's answer, written with its task's JSON made once per version, is
// byte for byte what encoding/json writes for the same answer, for every
// kind of template and input; the second take of a version reuses the
// first's JSON; and an input encoding/json refuses goes through
// encoding/json, which says so.
func TestTakeAnswerEncoding(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	expires := time.Date(2026, 11, 26, 7, 30, 1, 123456789, time.UTC)
	for i, text := range answerTemplates {
		ct := compileTemplate(t, text)
		for _, input := range answerInputs {
			resp := s.takeResponseOf(&docket.TakenAssignment{
				Assignment: &docket.Assignment{ID: uuid.New(), ExpiresAt: expires.In(time.FixedZone("x", 3600))},
				Unit:       &docket.Unit{ID: uuid.New(), Input: json.RawMessage(input)},
				Task:       ct, TaskName: "t", TaskVer: i + 1,
			})
			require.NotNil(t, resp.task, "the task's JSON is made")
			want, err := encodeStd(t, resp)
			require.NoError(t, err)
			w := httptest.NewRecorder()
			writeJSON(w, http.StatusCreated, resp)
			require.Equal(t, string(want), w.Body.String(), "template %d, input %s", i, input)
			require.Equal(t, http.StatusCreated, w.Code)
			require.Equal(t, "application/json", w.Header().Get("Content-Type"))
			got, err := resp.appendJSON(nil)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		}
		a, _ := s.taskView("t", i+1, ct)
		_, j1 := s.taskView("t", i+1, ct)
		_, j2 := s.taskView("t", i+1, ct)
		require.Same(t, &j1[0], &j2[0], "one encoding per task version")
		std, err := encodeStd(t, a)
		require.NoError(t, err)
		require.Equal(t, string(bytes.TrimSuffix(std, []byte("\n"))), string(j1))
	}

	// An input that is not JSON (no store returns one) fails as before.
	resp := s.takeResponseOf(&docket.TakenAssignment{Assignment: &docket.Assignment{}, Unit: &docket.Unit{Input: json.RawMessage(`{"a":`)},
		Task: compileTemplate(t, sameProduct), TaskName: "t", TaskVer: 1})
	_, err := resp.appendJSON(nil)
	require.ErrorIs(t, err, errNoAppend)
	_, stdErr := encodeStd(t, resp)
	require.Error(t, stdErr)
}

// FuzzTakeAnswer: for any input and expiry, a take's answer written by
// appendJSON is what encoding/json writes, or appendJSON declines and
// encoding/json fails too.
func FuzzTakeAnswer(f *testing.F) {
	for _, in := range answerInputs {
		f.Add([]byte(in), int64(1_800_000_000_123_456_789), 0)
	}
	f.Add([]byte(`{"a": "\xff\xfe"}`), int64(-70_000_000_000_000_000), 1)
	f.Add([]byte(``), int64(0), 1)
	s := New(Config{})
	var cts []*docket.CompiledTask
	for _, text := range answerTemplates {
		cts = append(cts, compileTemplate(f, text))
	}
	f.Fuzz(func(t *testing.T, input []byte, nanos int64, tmpl int) {
		ct := cts[uint(tmpl)%uint(len(cts))]
		var in json.RawMessage
		if input != nil {
			in = json.RawMessage(input)
		}
		resp := s.takeResponseOf(&docket.TakenAssignment{
			Assignment: &docket.Assignment{ID: uuid.New(), ExpiresAt: time.Unix(0, nanos).Add(time.Duration(nanos) * 1000)},
			Unit:       &docket.Unit{ID: uuid.New(), Input: in},
			Task:       ct, TaskName: "fuzz", TaskVer: 1,
		})
		got, err := resp.appendJSON(nil)
		want, stdErr := encodeStd(t, resp)
		if err != nil {
			require.Error(t, stdErr, "appendJSON declined %q, encoding/json took it", input)
			return
		}
		require.NoError(t, stdErr)
		require.Equal(t, string(want), string(got))
	})
}

// A judgment's answer is byte for byte what encoding/json writes: without
// a test result through appendJSON, with one through encoding/json.
func TestJudgmentAnswerEncoding(t *testing.T) {
	t.Parallel()
	for _, resp := range []*judgmentResponse{
		{JudgmentID: uuid.New(), AssignmentID: uuid.New(), UnitID: uuid.New(), Finalized: true},
		{JudgmentID: uuid.New(), AssignmentID: uuid.New(), UnitID: uuid.New()},
		{},
		{JudgmentID: uuid.New(), Test: &testResultView{Correct: true, Fields: []docket.TestFieldScore{}, Feedback: "<b>ok</b>"}},
	} {
		want, err := encodeStd(t, resp)
		require.NoError(t, err)
		w := httptest.NewRecorder()
		writeJSON(w, http.StatusAccepted, resp)
		require.Equal(t, string(want), w.Body.String())
		require.Equal(t, http.StatusAccepted, w.Code)
		got, err := resp.appendJSON(nil)
		if resp.Test != nil {
			require.ErrorIs(t, err, errNoAppend)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}
