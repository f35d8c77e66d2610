package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestPageTiming measures the server time of every operator page on
// PostgreSQL with 1,000,000 jobs and 100,000 units: it reports, it does
// not assert (docs/benchmarks.md, "Web pages at 1,000,000 jobs"). It runs
// only with DOCKET_WEB_TIMING=1; DOCKET_WEB_TIMING_JOBS, _UNITS and _N
// change the sizes and the requests per page.
//
// The jobs go in through Client.InsertMany (COPY, 10,000 a batch), the
// units through Client.UnitsAdd; the jobs are then spread over the states
// with one UPDATE per state (what a day of work would leave, without
// working a million jobs), and 1,000 judgments come through the
// contributor calls, so the pool has rates, finalized units and
// contributors to show.
func TestPageTiming(t *testing.T) {
	if os.Getenv("DOCKET_WEB_TIMING") != "1" {
		t.Skip("set DOCKET_WEB_TIMING=1 to measure the pages (slow: seeds 1,000,000 jobs)")
	}
	envInt := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	nJobs, nUnits, n := envInt("DOCKET_WEB_TIMING_JOBS", 1_000_000), envInt("DOCKET_WEB_TIMING_UNITS", 100_000), envInt("DOCKET_WEB_TIMING_N", 100)
	ctx := context.Background()
	dbURL := testdb.PostgresURL(t)
	b := setup(t, testdb.Backend{Name: "postgres", URL: func(testing.TB) string { return dbURL }})
	c := b.client
	// As docket serve wires it; the overview and the queues page read
	// Client.Overview's bounded figures, each request anew (the cache of a
	// second is forgotten before each: the time is the read's).
	var err error
	b.handler, err = New(Config{Client: c, Now: b.clock.Now})
	require.NoError(t, err)
	b.server = httptest.NewServer(b.handler)
	t.Cleanup(b.server.Close)

	start := time.Now()
	queues := []string{"default", "mail", "images", "reports", "webhooks"}
	types := []string{"email", "resize", "render", "sync", "notify", "index", "export", "bill", "crawl"}
	const batch = 10_000
	for done := 0; done < nJobs; done += batch {
		jobs := make([]docket.InsertParams, min(batch, nJobs-done))
		for i := range jobs {
			k := done + i
			typ := types[k%len(types)]
			if k%10_000 == 0 {
				typ = "rare" // 100 of a million: the worst filter by type
			}
			jobs[i] = docket.InsertParams{Args: docket.RawArgs{Type: typ, Payload: json.RawMessage(`{"user":` + strconv.Itoa(k%5000) + `,"path":"/data/` + strconv.Itoa(k) + `.bin"}`)},
				Opts: &docket.InsertOpts{Queue: queues[k%len(queues)], MaxAttempts: 3}}
		}
		_, err := c.InsertMany(ctx, jobs)
		require.NoError(t, err)
	}
	t.Logf("inserted %d jobs in %s", nJobs, time.Since(start).Round(time.Second))

	// Spread the jobs over the states by their position in id order:
	// 70% SUCCESS, 8% DEAD, 4% CANCELED, 3% RETRY, 1% RUNNING, the rest
	// (14%) QUEUED.
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	start = time.Now()
	_, err = conn.Exec(ctx, `CREATE TEMP TABLE pct AS SELECT id, ntile(100) OVER (ORDER BY id) AS p FROM docket_jobs`)
	require.NoError(t, err)
	for _, s := range []struct {
		from, to int // per cent, of the ids in order
		set      string
	}{
		{0, 70, `state = 'SUCCESS', attempt = 1, finished_at = created_at + interval '1 second', result = '{"ok":true}'`},
		{70, 78, `state = 'DEAD', attempt = 3, finished_at = created_at + interval '1 minute', last_error = 'boom: the disk is full'`},
		{78, 82, `state = 'CANCELED', finished_at = created_at + interval '1 second'`},
		{82, 85, `state = 'RETRY', attempt = 1, run_at = now() + interval '1 hour', last_error = 'try again'`},
		{85, 86, `state = 'RUNNING', attempt = 1, lease_owner = 'node-1', lease_expires_at = now() + interval '1 hour', attempted_at = now()`},
	} {
		_, err := conn.Exec(ctx, `UPDATE docket_jobs j SET `+s.set+` FROM pct r WHERE j.id = r.id AND r.p > $1 AND r.p <= $2`, s.from, s.to)
		require.NoError(t, err)
	}
	_, err = conn.Exec(ctx, `VACUUM ANALYZE docket_jobs`)
	require.NoError(t, err)
	t.Logf("spread the jobs over the states in %s", time.Since(start).Round(time.Second))

	// Workflow runs (each releases a job), a pool of nUnits units, judged.
	putWorkflow(t, c, `{"name": "chain", "steps": [{"name": "a", "job": {"type": "t"}}, {"name": "b", "job": {"type": "t"}, "after": ["a"]}]}`)
	runs := make([]docket.RunStartParams, 1000)
	for i := range runs {
		runs[i] = docket.RunStartParams{Workflow: "chain", Input: map[string]int{"i": i}}
	}
	started, err := c.RunStartMany(ctx, runs)
	require.NoError(t, err)
	tmpl, err := docket.ParseTask([]byte(labelTask))
	require.NoError(t, err)
	_, _, err = c.TaskPut(ctx, "same", tmpl)
	require.NoError(t, err)
	putWorkflow(t, c, `{"name": "review", "steps": [{"name": "label", "human": {"task": "same"}}]}`)
	pool, _, err := c.PoolEnsure(ctx, "review", 1, "label", "same")
	require.NoError(t, err)
	start = time.Now()
	for done := 0; done < nUnits; done += batch {
		inputs := make([]json.RawMessage, min(batch, nUnits-done))
		for i := range inputs {
			inputs[i] = json.RawMessage(`{"photo":"https://img.example/` + strconv.Itoa(done+i) + `.png"}`)
		}
		_, err := c.UnitsAdd(ctx, pool.ID, inputs)
		require.NoError(t, err)
	}
	var workers []uuid.UUID
	for i := range 10 {
		w, err := c.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: fmt.Sprintf("w%d", i), Name: fmt.Sprintf("Worker %d", i)})
		require.NoError(t, err)
		workers = append(workers, w.ID)
	}
	var unit uuid.UUID
	for i := range 1000 {
		s := judge(t, c, pool.ID, workers[i%len(workers)], []string{"yes", "yes", "no"}[i%3])
		if s.Finalized != nil {
			unit = s.Finalized.ID
		}
	}
	require.NotEqual(t, uuid.Nil, unit)
	_, err = conn.Exec(ctx, `VACUUM ANALYZE`)
	require.NoError(t, err)
	t.Logf("added %d units, 1,000 judgments, 1,000 runs in %s", nUnits, time.Since(start).Round(time.Second))

	var job, deadJob uuid.UUID
	require.NoError(t, conn.QueryRow(ctx, `SELECT id FROM docket_jobs WHERE state = 'SUCCESS' ORDER BY id LIMIT 1 OFFSET 1000`).Scan(&job))
	require.NoError(t, conn.QueryRow(ctx, `SELECT id FROM docket_jobs WHERE state = 'DEAD' ORDER BY id DESC LIMIT 1`).Scan(&deadJob))

	viewer := b.signIn(t, docket.RoleAdmin)
	u, err := url.Parse(b.server.URL)
	require.NoError(t, err)
	cookies := viewer.http.Jar.Cookies(u)
	pages := []string{
		"/", "/overview/panel", "/queues",
		"/jobs", "/jobs?state=DEAD", "/jobs?state=QUEUED", "/jobs?state=RUNNING", "/jobs?queue=mail", "/jobs?type=resize",
		"/jobs?type=rare", "/jobs?state=SUCCESS&queue=images&type=render",
		"/jobs/" + job.String(), "/jobs/" + deadJob.String(),
		"/dead", "/dead?queue=mail",
		"/runs", "/runs?state=RUNNING", "/runs/" + started[0].Run.ID.String(),
		"/workflows", "/workflows/chain",
		"/pools", "/pools/" + pool.ID.String(), "/units/" + unit.String(),
		"/pools/" + pool.ID.String() + "/contributors/" + workers[0].String(),
	}
	var rows []string
	for _, p := range pages {
		var ds []time.Duration
		for range n {
			req := httptest.NewRequest("GET", p, nil)
			for _, ck := range cookies {
				req.AddCookie(ck)
			}
			rec := httptest.NewRecorder()
			b.handler.ov.forget()
			t0 := time.Now()
			b.handler.ServeHTTP(rec, req)
			ds = append(ds, time.Since(t0))
			require.Equal(t, http.StatusOK, rec.Code, "%s: %s", p, rec.Body.String())
		}
		slices.Sort(ds)
		p50, p99 := ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)]
		rows = append(rows, fmt.Sprintf("| `%s` | %.1f | %.1f | %.1f |", p, ms(p50), ms(p99), ms(ds[len(ds)-1])))
	}
	// The exact grouped count (Client.Queues, behind nothing served now)
	// and the capped one behind /metrics' jobs gauge and GET /v1/queues.
	var ds []time.Duration
	for _, q := range []struct {
		name  string
		count func() error
	}{
		{"the count by queue and state, exact (Client.Queues", func() error { _, err := c.Queues(ctx); return err }},
		{"the count by queue and state, capped at 10,000 (Client.QueueCounts", func() error { _, err := c.QueueCounts(ctx, 10_000); return err }},
	} {
		ds = ds[:0]
		for range 5 {
			t0 := time.Now()
			require.NoError(t, q.count())
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		rows = append(rows, fmt.Sprintf("| %s, uncached, 5 times) | %.1f | %.1f | %.1f |", q.name, ms(ds[2]), ms(ds[4]), ms(ds[4])))
	}
	// The overview's read split: its counts alone (one finished job read)
	// and its finished jobs alone (counts capped at 1).
	for _, o := range []struct {
		name string
		p    docket.OverviewParams
	}{
		{"Client.Overview, counts only", docket.OverviewParams{Cap: overviewCap, Since: b.clock.Now().Add(-overviewWindow), FinishedCap: 1}},
		{"Client.Overview, finished jobs only", docket.OverviewParams{Cap: 1, Since: b.clock.Now().Add(-overviewWindow), FinishedCap: overviewFinishedCap, LatencyOf: overviewLatencyOf}},
	} {
		ds = ds[:0]
		for range 5 {
			t0 := time.Now()
			_, err := c.Overview(ctx, &o.p)
			require.NoError(t, err)
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		rows = append(rows, fmt.Sprintf("| %s (5 times) | %.1f | %.1f | %.1f |", o.name, ms(ds[2]), ms(ds[4]), ms(ds[4])))
	}
	t.Logf("server time per page, %d requests each (ms):\n| page | p50 | p99 | max |\n|---|---:|---:|---:|\n%s", n, strings.Join(rows, "\n"))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
