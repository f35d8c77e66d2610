package servertest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/remote"
)

// TestHumanStepEndToEnd: job → human → job through the real binary and
// HTTP only. A remote worker completes the first job; the run reaching
// the human step makes its pool and a unit holding the job's output;
// three contributors, each with their own key, take the unit and judge it
// (2 × yes, 1 × no); the third judgment completes the step, and the last
// job's payload carries the human step's output and confidence; the run
// SUCCEEDED.
func TestHumanStepEndToEnd(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		srv := servertest.Start(t, servertest.Options{DatabaseURL: backend.URL(t), Env: servertest.FastEnv()})
		e := &e2e{t: t, srv: srv, key: srv.AdminKey}
		ctx := context.Background()

		r := srv.Do(t, e.key, "PUT", "/v1/tasks/same-product", `{"title": "Same product?",
		  "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
		  "judgmentsPerUnit": {"min": 3}}`)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		r = srv.Do(t, e.key, "PUT", "/v1/workflows/match", `{"steps": [
		  {"name": "fetch", "job": {"type": "hs.fetch"}},
		  {"name": "label", "after": ["fetch"], "human": {"task": "same-product"}},
		  {"name": "ship", "after": ["label"], "if": "steps.label.confidence > 0.5", "job": {"type": "hs.ship"}}]}`)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))

		id := e.start("match", map[string]any{"input": map[string]any{"sku": "A1"}})
		worker, err := remote.NewClient(srv.URL, e.key, nil)
		require.NoError(t, err)
		fetch := e.leaseOne("hs.fetch")
		require.NoError(t, worker.Complete(ctx, fetch.LeaseID, json.RawMessage(`{"left": "Acme anvil", "right": "ACME Anvil"}`)))

		// The human step is RUNNING with its unit, in the step's pool.
		var run struct {
			Status string `json:"status"`
			Output json.RawMessage
			Steps  []struct {
				Name       string          `json:"name"`
				Status     string          `json:"status"`
				UnitID     string          `json:"unitId"`
				Output     json.RawMessage `json:"output"`
				Confidence *float64        `json:"confidence"`
			} `json:"steps"`
		}
		srv.Do(t, e.key, "GET", "/v1/runs/"+id, nil).JSON(t, &run)
		require.Equal(t, "label", run.Steps[1].Name)
		require.Equal(t, "RUNNING", run.Steps[1].Status, "released when fetch ended")
		require.NotEmpty(t, run.Steps[1].UnitID)
		var pools struct {
			Items []struct {
				PoolID string `json:"poolId"`
				Step   string `json:"step"`
				Task   string `json:"task"`
			} `json:"items"`
		}
		r = srv.Do(t, e.key, "GET", "/v1/pools?workflow=match", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &pools)
		require.Len(t, pools.Items, 1)
		require.Equal(t, "label", pools.Items[0].Step)
		pool := pools.Items[0].PoolID

		for i, answer := range []string{"yes", "no", "yes"} {
			r := srv.Do(t, e.key, "POST", "/v1/contributors", map[string]any{"externalId": uuid.NewString(), "name": fmt.Sprintf("c%d", i)})
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

			r = srv.Do(t, key.Secret, "POST", "/v1/assignments", map[string]any{"poolId": pool})
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			var taken struct {
				AssignmentID string `json:"assignmentId"`
				Unit         struct {
					ID    string          `json:"id"`
					Input json.RawMessage `json:"input"`
				} `json:"unit"`
			}
			r.JSON(t, &taken)
			require.Equal(t, run.Steps[1].UnitID, taken.Unit.ID)
			require.JSONEq(t, `{"input": {"sku": "A1"}, "steps": {"fetch": {"state": "SUCCEEDED", "output": {"left": "Acme anvil", "right": "ACME Anvil"}, "confidence": null}}}`, string(taken.Unit.Input))
			r = srv.Do(t, key.Secret, "POST", "/v1/judgments", map[string]any{"assignmentId": taken.AssignmentID, "data": map[string]any{"same": answer}})
			require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		}

		ship := e.leaseOne("hs.ship")
		var payload struct {
			Steps map[string]struct {
				Output     json.RawMessage `json:"output"`
				Confidence *float64        `json:"confidence"`
			} `json:"steps"`
		}
		require.NoError(t, json.Unmarshal(ship.Payload, &payload))
		require.JSONEq(t, `{"same": "yes"}`, string(payload.Steps["label"].Output))
		require.NotNil(t, payload.Steps["label"].Confidence)
		require.Greater(t, *payload.Steps["label"].Confidence, 0.5)
		require.NoError(t, worker.Complete(ctx, ship.LeaseID, json.RawMessage(`{"shipped": true}`)))

		e.wait(id, "SUCCEEDED")
		srv.Do(t, e.key, "GET", "/v1/runs/"+id, nil).JSON(t, &run)
		require.Equal(t, "SUCCEEDED", run.Steps[1].Status)
		require.JSONEq(t, `{"same": "yes"}`, string(run.Steps[1].Output))
		require.NotNil(t, run.Steps[1].Confidence)
		require.InDelta(t, *payload.Steps["label"].Confidence, *run.Steps[1].Confidence, 1e-9)
		require.JSONEq(t, `{"ship": {"shipped": true}}`, string(run.Output))
	})
}
