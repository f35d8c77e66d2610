// Command acquireprobe measures an acquiring statement alone, per job:
// the CPU of the PostgreSQL backend that runs it (from
// /proc/PID/schedstat: run it on the cluster's machine), split by
// statement (BEGIN, the acquiring UPDATE, the outbox INSERT, COMMIT), and
// the WAL the transaction writes.
//
// Each run makes a database (`docket migrate up`, then --jobs no-op jobs
// by InsertMany, as `docket bench --mode burn` inserts them, then ANALYZE
// as the maintenance leader would) and acquires every job in batches of
// --batch on one connection, as JobAcquire does (BEGIN, the UPDATE, the
// outbox row, COMMIT). A second connection finishes each batch after it
// is acquired (the rows go SUCCESS as the finishing statement leaves
// them), so the pages and indexes the next acquisitions touch hold what
// they hold in a burn; its work is not counted. The variant "floor" runs
// the floor's statement (../shared/bench/floor) on the floor's table
// instead, to compare on the same terms.
//
//	go run ./bench/acquireprobe --database-url postgres://postgres@127.0.0.1:54343/postgres \
//	  --reps 3 --variants docket,docket,floor --prep 'SELECT 1|DROP INDEX docket_jobs_lease_expiry|SELECT 1'
//
// --variants picks acquiring statements by name (see variants: "docket"
// is a copy of acquireSQL, internal/store/postgres/job_acquire.go);
// --prep runs SQL in each database before it is measured (e.g. to price
// an index), one for all or one per variant separated by "|". The
// variants alternate, in reverse order every other rep.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/bench"
	"github.com/docket-run/docket/internal/job"
)

type noop struct{}

func (noop) JobType() string { return "bench.noop" }

const setList = `
	state            = 'RUNNING',
	attempt          = j.attempt + 1,
	lease_owner      = $4,
	lease_expires_at = $5,
	attempted_at     = $2,
	progress         = 0,
	progress_message = '',
	cancel_requested = false,
	updated_at       = $2,
	version          = j.version + 1`

const pick = `
	SELECT ctid FROM docket_jobs
	WHERE state = 'QUEUED' AND queue = $1 AND run_at <= $2
		AND NOT EXISTS (SELECT 1 FROM docket_queues WHERE name = $1 AND paused)
	ORDER BY sort_at, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED`

const returning17 = `id, job_type, queue, priority, payload, result, idempotency_key,
	attempt, max_attempts, run_at, timeout_ms, version, created_at, finished_at,
	last_error, attempt_base, sort_at`

// variants: acquiring statements, $1 queue, $2 now, $3 max, $4 owner,
// $5 lease expiry (each must use all five).
var variants = map[string]string{
	"docket": `UPDATE docket_jobs j SET` + setList + `
WHERE j.ctid = ANY(ARRAY(` + pick + `))
RETURNING ` + returning17,
	"floor": floorSQL,
	"no-queue": `UPDATE docket_jobs j SET` + setList + `
WHERE j.ctid = ANY(ARRAY(` + pick + `))
RETURNING id, job_type, priority, payload, result, idempotency_key,
	attempt, max_attempts, run_at, timeout_ms, version, created_at, finished_at,
	last_error, attempt_base, sort_at`,
	"ret-id": `UPDATE docket_jobs j SET` + setList + `
WHERE j.ctid = ANY(ARRAY(` + pick + `))
RETURNING id, sort_at`,
}

func main() {
	url := flag.String("database-url", "", "PostgreSQL URL of the cluster (databases acqprobe_* are made there)")
	jobs := flag.Int("jobs", 200000, "jobs in the table")
	batch := flag.Int("batch", 1500, "jobs per acquisition")
	reps := flag.Int("reps", 3, "repetitions of every variant (alternating)")
	names := flag.String("variants", "docket", "acquiring statements, comma-separated: "+strings.Join(keys(), ", "))
	prep := flag.String("prep", "", "SQL run in each copy before it is measured; several separated by | go with the variants in order")
	flag.Parse()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, *url)
	check(err)
	defer admin.Close(ctx)
	cfg := admin.Config()
	dbURL := func(db string) string {
		c := *cfg.Config.Copy()
		return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", c.User, c.Host, c.Port, db)
	}
	vs := strings.Split(*names, ",")
	preps := strings.Split(*prep, "|")
	type result struct{ begin, update, insert, commit, wal, wall []float64 }
	res := map[int]*result{}
	for i := range vs {
		if variants[vs[i]] == "" {
			log.Fatalf("no variant %q", vs[i])
		}
		res[i] = &result{}
	}
	for r := 0; r < *reps; r++ {
		for k := range vs {
			i := k
			if r%2 == 1 {
				i = len(vs) - 1 - k
			}
			p := ""
			if len(preps) == len(vs) {
				p = preps[i]
			} else if len(preps) == 1 {
				p = preps[0]
			}
			m := run(ctx, admin, dbURL, *jobs, variants[vs[i]], p, *batch)
			n := float64(m.jobs)
			fmt.Printf("%-12s rep %d: µs/job begin %.2f update %.2f insert %.2f commit %.2f | WAL B/job %.1f | wall µs/job %.2f | %d acquisitions\n",
				vs[i], r+1, m.begin/n, m.update/n, m.insert/n, m.commit/n, m.wal/n, m.wall/n, m.calls)
			x := res[i]
			x.begin, x.update, x.insert, x.commit = append(x.begin, m.begin/n), append(x.update, m.update/n), append(x.insert, m.insert/n), append(x.commit, m.commit/n)
			x.wal, x.wall = append(x.wal, m.wal/n), append(x.wall, m.wall/n)
		}
	}
	fmt.Printf("\nmedians of %d, per job: backend CPU µs by statement, WAL bytes of the transaction\n", *reps)
	fmt.Printf("%-12s %7s %7s %7s %7s %7s | %7s\n", "variant", "begin", "update", "insert", "commit", "total", "WAL B")
	for i, v := range vs {
		x := res[i]
		b, u, in, c := med(x.begin), med(x.update), med(x.insert), med(x.commit)
		fmt.Printf("%-12s %7.2f %7.2f %7.2f %7.2f %7.2f | %7.1f\n", v, b, u, in, c, b+u+in+c, med(x.wal))
	}
}

type measured struct {
	jobs, calls                              int
	begin, update, insert, commit, wal, wall float64 // µs, bytes
}

func run(ctx context.Context, admin *pgx.Conn, dbURL func(string) string, jobs int, sql, prep string, batch int) measured {
	db := "acqprobe_run"
	floor := sql == floorSQL
	if floor {
		fillFloor(ctx, admin, dbURL, db, jobs)
	} else {
		fill(ctx, admin, dbURL, db, jobs)
	}
	acq, err := pgx.Connect(ctx, dbURL(db))
	check(err)
	defer acq.Close(ctx)
	fin, err := pgx.Connect(ctx, dbURL(db))
	check(err)
	defer fin.Close(ctx)
	if prep != "" {
		_, err = acq.Exec(ctx, prep)
		check(err)
	}
	pid := acq.PgConn().PID()
	fmt.Fprintln(os.Stderr, "acquiring backend:", pid)
	var m measured
	owner := "acqprobe-0123456"
	now := time.Now().Add(time.Second)
	var (
		lsn0, lsn1 pgtype.Text
	)
	lsnDiff := func() float64 {
		var d float64
		check(fin.QueryRow(ctx, "SELECT $1::pg_lsn - $2::pg_lsn", lsn1.String, lsn0.String).Scan(&d))
		return d
	}
	for {
		check(fin.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn0))
		t0 := time.Now()
		c0 := cpu(pid)
		tx, err := acq.Begin(ctx)
		check(err)
		c1 := cpu(pid)
		args := []any{"bench.noop", now, batch, owner, now.Add(time.Minute)}
		if floor {
			args = []any{"default", batch}
		}
		rs, err := tx.Query(ctx, sql, args...)
		check(err)
		var (
			ids  [][16]byte
			ints []int64
		)
		for rs.Next() {
			vs := rs.RawValues()
			var id [16]byte
			copy(id[:], vs[0])
			ids = append(ids, id)
			if floor {
				ints = append(ints, int64(binary.BigEndian.Uint64(vs[0])))
			}
		}
		check(rs.Err())
		c2 := cpu(pid)
		if len(ids) > 0 && !floor {
			ts := make([]job.Transition, len(ids))
			for i, id := range ids {
				ts[i] = job.Transition{JobID: id, JobType: "bench.noop", Queue: "bench.noop", From: job.StateQueued, To: job.StateRunning, Attempt: 1}
			}
			event := job.StateChangedData{Transitions: ts}.AppendJSON(nil)
			_, err = tx.Exec(ctx, `INSERT INTO docket_outbox (event_type, data, created_at) VALUES ($1, $2::json, $3)`, "job.state_changed", event, now)
			check(err)
		}
		c3 := cpu(pid)
		check(tx.Commit(ctx))
		c4 := cpu(pid)
		m.wall += float64(time.Since(t0).Microseconds())
		check(fin.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn1))
		if len(ids) == 0 {
			break
		}
		m.wal += lsnDiff()
		m.jobs += len(ids)
		m.calls++
		m.begin += c1 - c0
		m.update += c2 - c1
		m.insert += c3 - c2
		m.commit += c4 - c3
		if floor {
			_, err = fin.Exec(ctx, `UPDATE jobs SET state = 2, finished_at = now() WHERE id = ANY($1)`, ints)
			check(err)
			continue
		}
		_, err = fin.Exec(ctx, `UPDATE docket_jobs SET state = 'SUCCESS', finished_at = $2, lease_expires_at = NULL,
			updated_at = $2, version = version + 1 WHERE id = ANY($1)`, ids, now)
		check(err)
	}
	var plans string
	check(acq.QueryRow(ctx, `SELECT coalesce(string_agg(generic_plans || ' generic, ' || custom_plans || ' custom', '; '), '') FROM pg_prepared_statements WHERE statement LIKE '%FOR UPDATE SKIP LOCKED%' AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&plans))
	fmt.Fprintln(os.Stderr, "plans of the acquiring statement:", plans)
	return m
}

// cpu is the backend's CPU time so far, µs (bench.ProcessCPU).
func cpu(pid uint32) float64 {
	d, err := bench.ProcessCPU(int(pid))
	check(err)
	return float64(d.Nanoseconds()) / 1000
}

// floorSQL is the floor's acquisition (../shared/bench/floor), $1 queue, $2 max.
const floorSQL = `UPDATE jobs SET state = 1, attempt = attempt + 1, lease_expires_at = now() + interval '5 minutes'
WHERE id = ANY(ARRAY(SELECT id FROM jobs WHERE queue = $1 AND state = 0 AND run_at <= now()
  ORDER BY priority, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING id`

// fillFloor makes the floor's table in a new database and COPYs jobs into
// it, 5,000 a transaction, as the floor does.
func fillFloor(ctx context.Context, admin *pgx.Conn, dbURL func(string) string, db string, jobs int) {
	_, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db)
	check(err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+db)
	check(err)
	_, err = admin.Exec(ctx, "CHECKPOINT")
	check(err)
	conn, err := pgx.Connect(ctx, dbURL(db))
	check(err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE jobs (id bigserial PRIMARY KEY, queue text NOT NULL,
  state smallint NOT NULL DEFAULT 0, priority smallint NOT NULL DEFAULT 1,
  run_at timestamptz NOT NULL DEFAULT now(), attempt int NOT NULL DEFAULT 0,
  payload jsonb NOT NULL, lease_expires_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz);
CREATE INDEX jobs_fetch ON jobs (queue, priority, run_at, id) WHERE state = 0`)
	check(err)
	for done := 0; done < jobs; {
		k, i, now := min(5000, jobs-done), 0, time.Now()
		_, err := conn.CopyFrom(ctx, pgx.Identifier{"jobs"}, []string{"queue", "priority", "run_at", "payload"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if i == k {
					return nil, nil
				}
				i++
				return []any{"default", int16(1), now, append(strconv.AppendInt([]byte(`{"num":`), int64(done+i), 10), '}')}, nil
			}))
		check(err)
		done += k
	}
	_, err = conn.Exec(ctx, "ANALYZE jobs")
	check(err)
}

func fill(ctx context.Context, admin *pgx.Conn, dbURL func(string) string, tmpl string, jobs int) {
	_, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+tmpl)
	check(err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+tmpl)
	check(err)
	_, err = admin.Exec(ctx, "CHECKPOINT")
	check(err)
	c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: dbURL(tmpl)})
	check(err)
	_, err = c.Migrate(ctx, docket.MigrateUp, 0)
	check(err)
	ps := make([]docket.InsertParams, 5000)
	for i := range ps {
		ps[i].Args = noop{}
	}
	for n := jobs; n > 0; n -= len(ps) {
		_, err := c.InsertMany(ctx, ps[:min(n, len(ps))])
		check(err)
	}
	c.Close()
	conn, err := pgx.Connect(ctx, dbURL(tmpl))
	check(err)
	_, err = conn.Exec(ctx, "ANALYZE")
	check(err)
	check(conn.Close(ctx))
}

func keys() []string {
	var ks []string
	for k := range variants {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func med(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
