package postgres

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

func TestTmpVariant(t *testing.T) {
	variant := os.Getenv("VARIANT")
	b := setup(t)
	switch variant {
	case "nofk":
		_, err := b.s.Pool().Exec(b.ctx, `ALTER TABLE docket_job_attempts DROP CONSTRAINT docket_job_attempts_job_id_fkey`)
		require.NoError(t, err)
	case "noidx":
		_, err := b.s.Pool().Exec(b.ctx, `DROP INDEX docket_jobs_type_id; DROP INDEX docket_jobs_queue_state`)
		require.NoError(t, err)
	}
	q := finishAnySQL
	if variant == "nojson" {
		q = strings.Replace(q, "json_build_object('transitions', json_agg(json_build_object(\n\t\t\t\t'jobId', id, 'jobType', job_type, 'queue', queue,\n\t\t\t\t'from', 'RUNNING'::text, 'to', state, 'attempt', attempt)))", "'{}'::json", 1)
		require.NotEqual(t, q, finishAnySQL)
	}
	if variant == "noattempts" {
		i := strings.Index(q, "attempts AS (")
		j := strings.Index(q, "outbox AS (")
		q = q[:i] + q[j:]
	}
	for range 20 {
		_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: newJobs("default", 5000), Now: testBase})
		require.NoError(t, err)
	}
	_, err := b.s.Pool().Exec(b.ctx, `VACUUM ANALYZE docket_jobs`)
	require.NoError(t, err)
	var acq, fin time.Duration
	for range 40 {
		t0 := time.Now()
		rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "default", Max: 2000, Owner: "n", LeaseDuration: time.Minute, Now: testBase})
		require.NoError(t, err)
		t1 := time.Now()
		n := len(rows)
		ids := make([]string, n)
		att := make([]int, n)
		st := make([]string, n)
		out := make([]string, n)
		res := make([]*string, n)
		errs := make([]string, n)
		ts := make([]time.Time, n)
		for i, r := range rows {
			ids[i], att[i], st[i], out[i], ts[i] = r.ID.String(), r.Attempt, string(job.StateSuccess), "success", testBase
		}
		_, err = b.s.Pool().Exec(b.ctx, q, ids, att, st, out, res, errs, ts, ts, testBase)
		require.NoError(t, err)
		acq += t1.Sub(t0)
		fin += time.Since(t1)
	}
	fmt.Printf("VARIANT %s acquire %v finish %v\n", variant, acq/40, fin/40)
}
