package servertest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/postgres"
	"github.com/docket-run/docket/internal/store/sqlite"
	"github.com/docket-run/docket/internal/testdb"
)

// TestQualityFlagSurvivesSIGKILL: a spammer judged every unit of a pool,
// each finalized with two honest judgments; their one test question,
// answered wrong, flags them, which reopens all those units. The server
// is SIGKILLed while that judgment and its repair run (at a random
// moment); after a restart the contributor resubmits (idempotent) and
// the flag and its repair are there exactly once (certainty 0.8: one
// wrong answer puts the accuracy under 0.6 with probability 0.88, enough
// here): one contributor.flagged,
// one audit and one unit.result_changed per unit, every unit reopened,
// and the runs that used the old results not rewound.
func TestQualityFlagSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		const units = 30
		dbURL := backend.URL(t)
		srv := servertest.Start(t, servertest.Options{DatabaseURL: dbURL, Env: servertest.FastEnv()})
		e := &e2e{t: t, srv: srv, key: srv.AdminKey}
		r := srv.Do(t, e.key, "PUT", "/v1/tasks/qk", fmt.Sprintf(`{"title": "Same?",
		  "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
		  "judgmentsPerUnit": {"min": 3}, "quality": {"quizSize": 0, "testEvery": %d, "minTests": 1, "minTrust": 0.6, "certainty": 0.8}}`, units+1))
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		r = srv.Do(t, e.key, "PUT", "/v1/workflows/qkw", `{"steps": [{"name": "label", "human": {"task": "qk"}}]}`)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		var runs []string
		for i := range units {
			runs = append(runs, e.start("qkw", map[string]any{"input": map[string]any{"i": i}}))
		}
		var pool string
		servertest.Eventually(t, 30*time.Second, "the pool with every unit", func() bool {
			var pools struct {
				Items []struct {
					PoolID string `json:"poolId"`
					Counts struct {
						Judgable int `json:"judgable"`
					} `json:"counts"`
				} `json:"items"`
			}
			srv.Do(t, e.key, "GET", "/v1/pools?workflow=qkw", nil).JSON(t, &pools)
			if len(pools.Items) == 1 {
				pool = pools.Items[0].PoolID
			}
			return len(pools.Items) == 1 && pools.Items[0].Counts.Judgable == units
		})
		r = srv.Do(t, e.key, "POST", "/v1/pools/"+pool+"/golden", map[string]any{"units": []any{
			map[string]any{"input": map[string]any{"i": -1}, "answer": map[string]any{"same": "yes"}}}})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))

		contributor := func() (id, key string) {
			r := srv.Do(t, e.key, "POST", "/v1/contributors", map[string]any{"externalId": uuid.NewString()})
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			var who struct {
				ContributorID string `json:"contributorId"`
			}
			r.JSON(t, &who)
			r = srv.Do(t, e.key, "POST", "/v1/contributors/"+who.ContributorID+"/keys", nil)
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			var k struct {
				Secret string `json:"secret"`
			}
			r.JSON(t, &k)
			return who.ContributorID, k.Secret
		}
		type taken struct {
			AssignmentID string `json:"assignmentId"`
			Unit         struct {
				ID string `json:"id"`
			} `json:"unit"`
		}
		take := func(key string) taken {
			r := srv.Do(t, key, "POST", "/v1/assignments", map[string]any{"poolId": pool})
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			var tk taken
			r.JSON(t, &tk)
			return tk
		}
		judge := func(key string, tk taken, answer string) {
			r := srv.Do(t, key, "POST", "/v1/judgments", map[string]any{"assignmentId": tk.AssignmentID, "data": map[string]any{"same": answer}})
			require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		}
		spammer, spamKey := contributor()
		for range units {
			judge(spamKey, take(spamKey), "no")
		}
		for range 2 {
			_, key := contributor()
			for range units {
				judge(key, take(key), "yes")
			}
		}
		for _, id := range runs {
			e.wait(id, "SUCCEEDED")
		}
		test := take(spamKey) // assignment units+1: the test question

		// Judge it wrong, and kill the server at a random moment after
		// sending it (the judgment, its review and repair take a few ms).
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = srv.Try(spamKey, "POST", "/v1/judgments", map[string]any{"assignmentId": test.AssignmentID, "data": map[string]any{"same": "no"}})
		}()
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		srv.Kill(t)
		<-done
		srv = srv.Restart(t)
		e.srv = srv

		// Where the kill landed: before the judgment's commit (not
		// answered), between it and the flag's (answered, not flagged), or
		// after both.
		var before struct {
			Flagged       bool `json:"flagged"`
			TestsAnswered int  `json:"testsAnswered"`
		}
		srv.Do(t, e.key, "GET", "/v1/pools/"+pool+"/contributors/"+spammer, nil).JSON(t, &before)
		t.Logf("after the restart: test questions answered %d, flagged %v", before.TestsAnswered, before.Flagged)

		// The same judgment again: stored now if it was not; its review
		// flags them if that was lost.
		r = srv.Do(t, spamKey, "POST", "/v1/judgments", map[string]any{"assignmentId": test.AssignmentID, "data": map[string]any{"same": "no"}})
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, r.Status, string(r.Body))
		t.Logf("after the restart the judgment answered %d (200: it had been stored before the kill)", r.Status)
		r = srv.Do(t, spamKey, "POST", "/v1/assignments", map[string]any{"poolId": pool})
		require.Equal(t, http.StatusForbidden, r.Status, string(r.Body))
		var q struct {
			Flagged       bool   `json:"flagged"`
			FlagCheck     string `json:"flagCheck"`
			TestsAnswered int    `json:"testsAnswered"`
		}
		srv.Do(t, e.key, "GET", "/v1/pools/"+pool+"/contributors/"+spammer, nil).JSON(t, &q)
		require.True(t, q.Flagged)
		require.Equal(t, "trust", q.FlagCheck)
		require.Equal(t, 1, q.TestsAnswered)

		var list struct {
			Items []struct {
				UnitID string          `json:"unitId"`
				State  string          `json:"state"`
				Result json.RawMessage `json:"result"`
			} `json:"items"`
		}
		srv.Do(t, e.key, "GET", "/v1/pools/"+pool+"/units?golden=false&limit=100", nil).JSON(t, &list)
		require.Len(t, list.Items, units)
		for _, u := range list.Items {
			require.Equal(t, "JUDGABLE", u.State, "unit %s reopened: 2 clean judgments of 3", u.UnitID)
			var audits struct {
				Items []struct {
					Action        string `json:"action"`
					ContributorID string `json:"contributorId"`
				} `json:"items"`
			}
			srv.Do(t, e.key, "GET", "/v1/units/"+u.UnitID+"/audits", nil).JSON(t, &audits)
			require.Len(t, audits.Items, 1, "unit %s: one audit", u.UnitID)
			require.Equal(t, "reopen", audits.Items[0].Action)
			require.Equal(t, spammer, audits.Items[0].ContributorID)
		}
		for _, id := range runs {
			require.Equal(t, "SUCCEEDED", e.get(id).Status, "run %s is not rewound", id)
		}
		srv.Stop(t)

		// The outbox: each event of the flag once.
		ctx := context.Background()
		var st store.Store
		if path, ok := strings.CutPrefix(dbURL, "sqlite:"); ok {
			s, err := sqlite.Open(ctx, strings.TrimPrefix(path, "//"), store.Options{}.WithDefaults())
			require.NoError(t, err)
			st = s
		} else {
			s, err := postgres.Open(ctx, dbURL, store.Options{}.WithDefaults())
			require.NoError(t, err)
			st = s
		}
		defer st.Close()
		rows, err := st.OutboxList(ctx, &store.OutboxListParams{Limit: 1000000})
		require.NoError(t, err)
		count := map[string]int{}
		for _, row := range rows {
			count[row.Type]++
		}
		require.Equal(t, 1, count[quality.EventContributorFlagged])
		require.Equal(t, 1, count[quality.EventTestJudgmentEvaluated])
		require.Equal(t, units, count[quality.EventUnitResultChanged])
	})
}
