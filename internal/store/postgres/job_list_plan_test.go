package postgres

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// TestFinishedListPlan: behind a backlog of waiting jobs (the newest
// ids), a page of finished jobs by state — alone, or with a queue and a
// type, one state or several — reads its ids by an index-only scan of
// docket_jobs_state_id backwards, never by walking the primary key past the
// backlog, in custom and generic plans (docs/benchmarks.md, "Web pages at
// 1,000,000 jobs"). Several states are one limited walk each, merged: with
// state = ANY(…) the planner walked the primary key.
func TestFinishedListPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 40k jobs")
	}
	t.Parallel()
	b := setup(t)
	queues := []string{"default", "mail", "images", "reports"}
	for i := range 8 {
		ps := newJobs(queues[i%len(queues)], 5_000)
		for j, p := range ps {
			p.Type = []string{"email", "resize", "render"}[j%3]
		}
		_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: testBase})
		require.NoError(t, err)
	}
	// Oldest 70 % SUCCESS, then 10 % DEAD, the newest 20 % QUEUED.
	_, err := b.s.Pool().Exec(b.ctx, `WITH r AS (SELECT id, ntile(10) OVER (ORDER BY id) AS p FROM docket_jobs)
		UPDATE docket_jobs j SET state = CASE WHEN r.p <= 7 THEN 'SUCCESS' ELSE 'DEAD' END, finished_at = j.created_at
		FROM r WHERE j.id = r.id AND r.p <= 8`)
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(b.ctx, `VACUUM ANALYZE docket_jobs`)
	require.NoError(t, err)

	for _, p := range []*store.JobListParams{
		{States: []job.State{job.StateDead}, Limit: 51},
		{States: []job.State{job.StateSuccess}, Queues: []string{"images"}, Types: []string{"render"}, Limit: 51},
		{States: []job.State{job.StateDead}, Queues: []string{"mail"}, Limit: 51},
		{States: []job.State{job.StateSuccess, job.StateDead}, Types: []string{"render"}, Limit: 51},
		{States: []job.State{job.StateDead, job.StateCanceled, job.StateSuccess, job.StateDead}, Queues: []string{"mail"}, Limit: 51},
	} {
		query, args := jobListSQL(p)
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			tx, err := b.s.Pool().Begin(b.ctx)
			require.NoError(t, err)
			lines := func() []string {
				defer func() {
					_, _ = tx.Exec(b.ctx, "DEALLOCATE list_plan")
					_ = tx.Rollback(b.ctx)
				}()
				_, err = tx.Exec(b.ctx, "SET LOCAL plan_cache_mode = "+mode)
				require.NoError(t, err)
				_, err = tx.Exec(b.ctx, "PREPARE list_plan AS "+query)
				require.NoError(t, err)
				rs, err := tx.Query(b.ctx, "EXPLAIN EXECUTE list_plan("+literals(t, args)+")")
				require.NoError(t, err)
				defer rs.Close()
				var lines []string
				for rs.Next() {
					var line string
					require.NoError(t, rs.Scan(&line))
					lines = append(lines, line)
				}
				require.NoError(t, rs.Err())
				return lines
			}()
			plan := strings.Join(lines, "\n")
			t.Logf("%+v (%s):\n%s", *p, mode, plan)
			require.Contains(t, plan, "Index Only Scan Backward using docket_jobs_state_id")
			require.NotContains(t, plan, "Scan Backward using docket_jobs_pkey")
			require.NotContains(t, plan, "Seq Scan on docket_jobs")
			require.NotContains(t, plan, "Bitmap", "a bitmap scan reads every entry of the states")
		}

		rows, err := b.s.JobList(b.ctx, p)
		require.NoError(t, err)
		require.Len(t, rows, 51)
		for i, r := range rows {
			require.Contains(t, p.States, r.State)
			if len(p.Types) > 0 {
				require.Equal(t, p.Types[0], r.Type)
			}
			if len(p.Queues) > 0 {
				require.Equal(t, p.Queues[0], r.Queue)
			}
			if i > 0 {
				require.Negative(t, bytes.Compare(r.ID[:], rows[i-1].ID[:]), "newest first")
			}
		}
	}
}

// TestTypeListPlan: behind the same backlog, a listing by a type over
// every state (or over QUEUED) reads its finished jobs backwards through
// docket_jobs_type_id and its waiting jobs through docket_jobs_acquire and
// docket_jobs_lease_expiry, never walking the primary key from the newest
// job or scanning the table (it used to walk the primary key until it
// had a page: the whole table for a rare type).
func TestTypeListPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 20k jobs")
	}
	t.Parallel()
	b := setup(t)
	for i := range 4 {
		ps := newJobs([]string{"default", "mail"}[i%2], 5_000)
		for j, p := range ps {
			p.Type = []string{"email", "resize", "render"}[j%3]
			if (i*5_000+j)%1_000 == 0 {
				p.Type = "rare"
			}
		}
		_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: testBase})
		require.NoError(t, err)
	}
	// Oldest 80 % finished, 5 % running, the newest 15 % QUEUED.
	_, err := b.s.Pool().Exec(b.ctx, `WITH r AS (SELECT id, ntile(20) OVER (ORDER BY id) AS p FROM docket_jobs)
		UPDATE docket_jobs j SET state = CASE WHEN r.p <= 16 THEN 'SUCCESS' ELSE 'RUNNING' END,
			finished_at = CASE WHEN r.p <= 16 THEN j.created_at END,
			lease_expires_at = CASE WHEN r.p > 16 THEN j.created_at END, attempt = 1
		FROM r WHERE j.id = r.id AND r.p <= 17`)
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(b.ctx, `VACUUM ANALYZE docket_jobs`)
	require.NoError(t, err)

	for _, tc := range []struct {
		p    *store.JobListParams
		uses []string
	}{
		{&store.JobListParams{Types: []string{"rare"}, Limit: 51}, []string{"docket_jobs_type_id", "docket_jobs_acquire", "docket_jobs_lease_expiry"}},
		{&store.JobListParams{Types: []string{"resize"}, Queues: []string{"mail"}, Limit: 51}, []string{"docket_jobs_type_id", "docket_jobs_acquire", "docket_jobs_lease_expiry"}},
		{&store.JobListParams{Types: []string{"rare"}, States: []job.State{job.StateQueued}, Limit: 51}, []string{"docket_jobs_acquire"}},
	} {
		plan := typeListPlan(t, b, tc.p)
		t.Logf("%+v:\n%s", *tc.p, plan)
		for _, index := range tc.uses {
			require.Contains(t, plan, index)
		}
		require.NotContains(t, plan, "using docket_jobs_pkey on docket_jobs docket_jobs_", "only the page's rows are read by primary key")
		require.NotContains(t, plan, "Scan Backward using docket_jobs_pkey")
		require.NotContains(t, plan, "Seq Scan on docket_jobs")

		rows, err := b.s.JobList(b.ctx, tc.p)
		require.NoError(t, err)
		require.NotEmpty(t, rows)
		for i, r := range rows {
			require.Equal(t, tc.p.Types[0], r.Type)
			if i > 0 {
				require.Negative(t, bytes.Compare(r.ID[:], rows[i-1].ID[:]), "newest first")
			}
		}
	}
}

// typeListPlan is the plan of a listing by type over waiting states as
// JobList runs it (sequential scans off, jobListByType).
func typeListPlan(t *testing.T, b *bundle, p *store.JobListParams) string {
	t.Helper()
	query, args := jobListByTypeSQL(p)
	tx, err := b.s.Pool().Begin(b.ctx)
	require.NoError(t, err)
	defer func() {
		_, _ = tx.Exec(b.ctx, "DEALLOCATE type_plan")
		_ = tx.Rollback(b.ctx)
	}()
	_, err = tx.Exec(b.ctx, "SET LOCAL enable_seqscan = off")
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, "PREPARE type_plan AS "+query)
	require.NoError(t, err)
	rs, err := tx.Query(b.ctx, "EXPLAIN EXECUTE type_plan("+literals(t, args)+")")
	require.NoError(t, err)
	defer rs.Close()
	var lines []string
	for rs.Next() {
		var line string
		require.NoError(t, rs.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(t, rs.Err())
	return strings.Join(lines, "\n")
}

// literals spells JobList's arguments as SQL literals, for EXECUTE.
func literals(t *testing.T, args []any) string {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case []string:
			out[i] = "'{" + strings.Join(v, ",") + "}'"
		case *int:
			out[i] = "NULL"
			if v != nil {
				out[i] = strconv.Itoa(*v)
			}
		default:
			t.Fatalf("literal of %T", a)
		}
	}
	return strings.Join(out, ", ")
}
