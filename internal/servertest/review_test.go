package servertest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/remote"
)

// TestReviewStepEndToEnd: label → review → ship through the real binary
// and HTTP only. Two labellers disagree, so the review (routed by
// label's confidence) gets a unit carrying label's input and answer; the
// reviewer rejects it; label's unit is redone by two others (the first
// two are refused it), and ship's payload, the run's label output and
// the review's output all carry the redo's answer.
func TestReviewStepEndToEnd(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		srv := servertest.Start(t, servertest.Options{DatabaseURL: backend.URL(t), Env: servertest.FastEnv()})
		e := &e2e{t: t, srv: srv, key: srv.AdminKey}
		ctx := context.Background()
		r := srv.Do(t, e.key, "PUT", "/v1/tasks/same-product", `{"title": "Same product?",
		  "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
		  "judgmentsPerUnit": {"min": 2}}`)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		r = srv.Do(t, e.key, "PUT", "/v1/tasks/qa-review", `{"title": "Check the answer",
		  "display": [{"kind": "text", "from": "unit.review.input.input.sku"}, {"kind": "text", "from": "unit.review.output.same"}],
		  "fields": [{"name": "verdict", "kind": "choice", "required": true,
		              "options": [{"value": "approve"}, {"value": "correct"}, {"value": "reject"}]},
		             {"name": "same", "kind": "choice", "options": [{"value": "yes"}, {"value": "no"}]}],
		  "judgmentsPerUnit": {"min": 1}}`)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		r = srv.Do(t, e.key, "PUT", "/v1/workflows/checked", `{"steps": [
		  {"name": "label", "human": {"task": "same-product"}},
		  {"name": "review", "after": ["label"], "if": "steps.label.confidence < 0.8 || sample(0.01)",
		   "human": {"task": "qa-review", "review": "label"}},
		  {"name": "ship", "after": ["label", "review"], "job": {"type": "rv.ship"}}]}`)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))

		id := e.start("checked", map[string]any{"input": map[string]any{"sku": "A1"}})
		pools := map[string]string{}
		var list struct {
			Items []struct {
				PoolID string `json:"poolId"`
				Step   string `json:"step"`
			} `json:"items"`
		}
		pool := func(step string) string {
			if pools[step] == "" {
				srv.Do(t, e.key, "GET", "/v1/pools?workflow=checked", nil).JSON(t, &list)
				for _, p := range list.Items {
					pools[p.Step] = p.PoolID
				}
			}
			require.NotEmpty(t, pools[step], "pool of %s", step)
			return pools[step]
		}
		contributor := func() string {
			r := srv.Do(t, e.key, "POST", "/v1/contributors", map[string]any{"externalId": uuid.NewString()})
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			var who struct {
				ContributorID string `json:"contributorId"`
			}
			r.JSON(t, &who)
			r = srv.Do(t, e.key, "POST", "/v1/contributors/"+who.ContributorID+"/keys", nil)
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			var key struct {
				Secret string `json:"secret"`
			}
			r.JSON(t, &key)
			return key.Secret
		}
		type taken struct {
			AssignmentID string `json:"assignmentId"`
			Unit         struct {
				ID    string          `json:"id"`
				Input json.RawMessage `json:"input"`
			} `json:"unit"`
		}
		take := func(key, step string) *taken {
			r := srv.Do(t, key, "POST", "/v1/assignments", map[string]any{"poolId": pool(step)})
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			var tk taken
			r.JSON(t, &tk)
			return &tk
		}
		judge := func(key string, tk *taken, data string) {
			r := srv.Do(t, key, "POST", "/v1/judgments", map[string]any{"assignmentId": tk.AssignmentID, "data": json.RawMessage(data)})
			require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		}

		first := []string{contributor(), contributor()}
		for i, answer := range []string{`{"same":"yes"}`, `{"same":"no"}`} {
			judge(first[i], take(first[i], "label"), answer)
		}
		run := e.get(id)
		require.Equal(t, "RUNNING", reviewStep(t, run, "review").Status, "%+v", run.stepStates())

		reviewer := contributor()
		tk := take(reviewer, "review")
		var in struct {
			Review struct {
				Step   string          `json:"step"`
				Input  json.RawMessage `json:"input"`
				Output json.RawMessage `json:"output"`
			} `json:"review"`
		}
		require.NoError(t, json.Unmarshal(tk.Unit.Input, &in))
		require.Equal(t, "label", in.Review.Step)
		require.JSONEq(t, `{"input": {"sku": "A1"}, "steps": {}}`, string(in.Review.Input))
		require.JSONEq(t, string(reviewStep(t, run, "label").Output), string(in.Review.Output))
		judge(reviewer, tk, `{"verdict": "reject"}`)

		for _, key := range first {
			r := srv.Do(t, key, "POST", "/v1/assignments", map[string]any{"poolId": pool("label")})
			require.Equal(t, http.StatusNotFound, r.Status, "a first labeller may not redo it: %s", r.Body)
		}
		require.Equal(t, "RUNNING", reviewStep(t, e.get(id), "review").Status)
		for range 2 {
			key := contributor()
			judge(key, take(key, "label"), `{"same":"no"}`)
		}

		ship := e.leaseOne("rv.ship")
		var payload struct {
			Steps map[string]struct {
				Output json.RawMessage `json:"output"`
			} `json:"steps"`
		}
		require.NoError(t, json.Unmarshal(ship.Payload, &payload))
		require.JSONEq(t, `{"same": "no"}`, string(payload.Steps["label"].Output))
		require.JSONEq(t, `{"verdict": "reject", "output": {"same": "no"}}`, string(payload.Steps["review"].Output))
		worker, err := remote.NewClient(srv.URL, e.key, nil)
		require.NoError(t, err)
		require.NoError(t, worker.Complete(ctx, ship.LeaseID, json.RawMessage(`{"shipped": true}`)))
		run = e.wait(id, "SUCCEEDED")
		require.JSONEq(t, `{"same": "no"}`, string(reviewStep(t, run, "label").Output))
		require.JSONEq(t, `{"verdict": "reject", "output": {"same": "no"}}`, string(reviewStep(t, run, "review").Output))
	})
}

// e2eStep is one step of an e2eRun.
type e2eStep struct {
	Status string
	Output json.RawMessage
}

// reviewStep returns instance 0 of step name of run.
func reviewStep(t *testing.T, run *e2eRun, name string) e2eStep {
	t.Helper()
	for _, s := range run.Steps {
		if s.Name == name && s.Index == 0 {
			return e2eStep{Status: s.Status, Output: s.Output}
		}
	}
	t.Fatalf("run %s has no step %q", run.RunID, name)
	return e2eStep{}
}
