package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// TestJobIndexEntries: the indexes each row version of a job on the hot
// path enters. A state change is never a HOT update (state is in the
// partial indexes' predicates), so every version — inserted QUEUED,
// acquired RUNNING, finished SUCCESS — gets an entry in every index whose
// predicate it matches: eight entries a job (docs/benchmarks.md, "Index
// entries per job"). An index added to docket_jobs, or a predicate widened,
// shows here with its cost.
func TestJobIndexEntries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: newJobs("default", 1), Now: testBase})
	require.NoError(t, err)
	// matched: the indexes of docket_jobs whose predicate the job's row
	// matches now (an index without one matches every row).
	matched := func() []string {
		rs, err := b.s.Pool().Query(b.ctx, `SELECT c.relname, coalesce(pg_get_expr(i.indpred, i.indrelid), 'true')
			FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE i.indrelid = 'docket_jobs'::regclass ORDER BY c.relname`)
		require.NoError(t, err)
		type index struct{ name, pred string }
		var all []index
		for rs.Next() {
			var ix index
			require.NoError(t, rs.Scan(&ix.name, &ix.pred))
			all = append(all, ix)
		}
		require.NoError(t, rs.Err())
		var out []string
		for _, ix := range all {
			if b.count(t, "SELECT count(*) FROM docket_jobs WHERE "+ix.pred) == 1 {
				out = append(out, ix.name)
			}
		}
		return out
	}
	require.Equal(t, []string{"docket_jobs_acquire", "docket_jobs_pkey"}, matched(), "QUEUED")

	rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "default", Max: 1, Owner: "n", LeaseDuration: time.Minute, Now: testBase})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, []string{"docket_jobs_lease_expiry", "docket_jobs_pkey"}, matched(), "RUNNING")

	ok, err := b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{Jobs: []*store.JobFinishParams{{
		ID: rows[0].ID, Attempt: rows[0].Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess,
	}}, Now: testBase})
	require.NoError(t, err)
	require.Len(t, ok, 1)
	require.Equal(t, []string{"docket_jobs_finished", "docket_jobs_pkey", "docket_jobs_state_id", "docket_jobs_type_id"}, matched(), "SUCCESS")
}

// TestJobColumnStatistics: ANALYZE of docket_jobs gathers statistics for
// the columns plans read and skips the others (migration 0023: their
// statistics target is 0, and sampling them cost about 40 % of a full
// ANALYZE). A statement that starts filtering, joining, grouping or
// sorting on a skipped column needs its statistics back; a column added
// to docket_jobs is analyzed unless it is added to the skipped ones.
func TestJobColumnStatistics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: newJobs("default", 50), Now: testBase})
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(b.ctx, `ANALYZE docket_jobs`)
	require.NoError(t, err)
	rs, err := b.s.Pool().Query(b.ctx, `SELECT attname FROM pg_stats
		WHERE schemaname = current_schema() AND tablename = 'docket_jobs' ORDER BY attname`)
	require.NoError(t, err)
	var analyzed []string
	for rs.Next() {
		var c string
		require.NoError(t, rs.Scan(&c))
		analyzed = append(analyzed, c)
	}
	require.NoError(t, rs.Err())
	require.Equal(t, []string{"attempt", "finished_at", "id", "idempotency_key", "job_type", "lease_expires_at",
		"priority", "queue", "run_at", "sort_at", "state"}, analyzed)
}

// TestFinishEventGrouped: the finishing statement writes its
// job.state_changed row in the grouped form (one group per type, queue,
// from, to and attempt; round six of issue 16), not the per-transition
// form, which decodes alike but costs the server twice as much to build.
// Conformance (Jobs/Finish/EventOfManyKinds) checks what the row says;
// this checks its form.
func TestFinishEventGrouped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: newJobs("default", 3), Now: testBase})
	require.NoError(t, err)
	rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "default", Max: 3, Owner: "n", LeaseDuration: time.Minute, Now: testBase})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	fs := make([]*store.JobFinishParams, len(rows))
	for i, r := range rows {
		fs[i] = &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess}
	}
	_, err = b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{Jobs: fs, Now: testBase})
	require.NoError(t, err)
	var groups, transitions bool
	var ids int
	require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT data::jsonb ? 'groups', data::jsonb ? 'transitions',
			coalesce(jsonb_array_length(data::jsonb #> '{groups,0,jobIds}'), 0)
		FROM docket_outbox WHERE event_type = 'job.state_changed' AND data::text LIKE '%RUNNING%SUCCESS%'
		ORDER BY id DESC LIMIT 1`).Scan(&groups, &transitions, &ids))
	require.True(t, groups, "the finish's event has groups")
	require.False(t, transitions, "the finish's event is not per transition")
	require.Equal(t, 3, ids, "one group of the three jobs")
}
