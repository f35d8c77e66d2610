package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// outboxStateChanged is the body of a CTE that writes ONE job.state_changed
// outbox row describing every row of src (a CTE of changed jobs with id,
// job_type, queue, attempt), and nothing when src is empty. from and to are
// SQL expressions over src's columns; now is the SQL placeholder of the
// statement's Now. The JSON is job.StateChangedData in its grouped form:
// one group per type, queue, from, to and attempt, its jobs' ids an
// array_agg that json_agg writes as a JSON array of strings. A group is a
// record whose column names are the JSON keys. Against json_agg of one
// record per job (the long form), this aggregates only the ids per job and
// makes about a third of the bytes, which are then compressed and stored:
// the outbox's part of a 2,000-job finish went from about 7 to 3 ms of
// the backend's CPU (docs/benchmarks.md, round six). The transitions come
// out grouped, in no particular order, as they did before (each job once).
func outboxStateChanged(src, from, to, now string) string {
	return fmt.Sprintf(`INSERT INTO docket_outbox (event_type, data, created_at)
		SELECT 'job.state_changed', json_build_object('groups', json_agg(g)), %s
		FROM (SELECT job_type AS "jobType", queue, %s AS "from", %s AS "to", attempt, array_agg(id) AS "jobIds"
			FROM %s GROUP BY 1, 2, 3, 4, 5) g
		HAVING count(*) > 0`, now, from, to, src)
}

// insertStateChangedSQL writes one job.state_changed outbox row.
const insertStateChangedSQL = `INSERT INTO docket_outbox (event_type, data, created_at) VALUES ($1, $2::json, $3)`

// insertStateChanged writes, in tx, the one job.state_changed outbox row
// whose data is data, encoded in Go (job.StateChangedEncoder): for the
// statements of the hot path this is cheaper than json_agg in the server,
// which shares the machine's cores.
func insertStateChanged(ctx context.Context, tx pgx.Tx, data []byte, now time.Time) error {
	// The bytes as they are: pgx sends a []byte for a json parameter
	// unchanged, where a string would be one more copy of the batch.
	if _, err := tx.Exec(ctx, insertStateChangedSQL, job.EventStateChanged, data, now); err != nil {
		return fmt.Errorf("write %s outbox row: %w", job.EventStateChanged, err)
	}
	return nil
}

// notifyAvailable is the body of a CTE that sends one docket_job_available
// NOTIFY per distinct queue of src's rows that are QUEUED and due at now.
// PostgreSQL delivers it on commit. The CTE must be referenced (see
// notifyGuard) or it is not run.
func notifyAvailable(src, now string) string {
	return fmt.Sprintf(`SELECT pg_notify('%s', queue)
		FROM (SELECT DISTINCT queue FROM %s WHERE state = 'QUEUED' AND run_at <= %s) due`,
		channelJobAvailable, src, now)
}

// notifyGuard is a WHERE condition that forces a notify CTE named cte to
// run: a SELECT CTE that nothing reads is never executed.
func notifyGuard(cte string) string {
	return fmt.Sprintf(`(SELECT count(*) FROM %s) >= 0`, cte)
}

// OutboxList implements store.Store.
func (s *Store) OutboxList(ctx context.Context, p *store.OutboxListParams) ([]*store.OutboxEvent, error) {
	rs, err := s.pool.Query(ctx, `
		SELECT id, event_type, data, created_at
		FROM docket_outbox
		WHERE id > $1
		ORDER BY id
		LIMIT $2`, p.AfterID, limitOrNull(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	defer rs.Close()
	var out []*store.OutboxEvent
	for rs.Next() {
		ev, err := scanOutbox(rs)
		if err != nil {
			return nil, fmt.Errorf("list outbox: %w", err)
		}
		out = append(out, ev)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	return out, nil
}
