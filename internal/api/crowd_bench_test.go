package api

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
)

// The crowd's hot path in the API layer, without the database: what a
// take's answer and a judgment's request cost to encode and decode
// (docs/benchmarks.md, "Fourth round: the server's HTTP path").
//
//	go test -run '^$' -bench 'Crowd' -benchmem ./internal/api/

// benchTaken is a take's answer for the template sameProduct.
func benchTaken(b *testing.B) (*Server, *takeResponse) {
	b.Helper()
	tmpl, err := task.Parse([]byte(sameProduct))
	require.NoError(b, err)
	ct, err := task.Compile(tmpl)
	require.NoError(b, err)
	s := New(Config{})
	return s, s.takeResponseOf(&docket.TakenAssignment{
		Assignment: &docket.Assignment{ID: uuid.New(), ExpiresAt: time.Now()},
		Unit:       &docket.Unit{ID: uuid.New(), Input: []byte(`{"left": "Acme anvil 10kg", "right": "ACME Anvil, 10 kg"}`)},
		Task:       ct, TaskName: "same-product", TaskVer: 1,
	})
}

// BenchmarkCrowdTakeAnswer: the 201 of POST /v1/assignments.
func BenchmarkCrowdTakeAnswer(b *testing.B) {
	_, resp := benchTaken(b)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		w.Body.Reset()
		clear(w.Header())
		writeJSON(w, http.StatusCreated, resp)
	}
}

// BenchmarkCrowdJudgmentRequest: POST /v1/judgments' body decoded and
// validated.
func BenchmarkCrowdJudgmentRequest(b *testing.B) {
	body := []byte(`{"assignmentId": "` + uuid.NewString() + `", "data": {"same": "yes"}}`)
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/v1/judgments", nil)
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = int64(len(body))
	rd := bytes.NewReader(body)
	r.Body = io.NopCloser(rd)
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		var req judgmentRequest
		if err := decodeBody(w, r, MaxBodyBytesDefault, false, &req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCrowdJudgmentAnswer: the 202 of POST /v1/judgments.
func BenchmarkCrowdJudgmentAnswer(b *testing.B) {
	resp := &judgmentResponse{JudgmentID: uuid.New(), AssignmentID: uuid.New(), UnitID: uuid.New(), Finalized: true}
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		w.Body.Reset()
		clear(w.Header())
		writeJSON(w, http.StatusAccepted, resp)
	}
}
