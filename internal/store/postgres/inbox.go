package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/store"
)

// inboxEnterSQL records an event as handled and removes its dead letter
// (handled now or before, it is no longer dead) in one statement; it
// returns 1 when the inbox row is new, 0 for a duplicate. A concurrent
// transaction inserting the same row makes this one wait for its end.
const inboxEnterSQL = `
WITH ins AS (
	INSERT INTO docket_inbox (consumer, event_id, handled_at) VALUES ($1, $2, $3)
	ON CONFLICT (consumer, event_id) DO NOTHING
	RETURNING 1
),
dead AS (
	DELETE FROM docket_dead_letters WHERE consumer = $1 AND event_id = $2
)
SELECT count(*) FROM ins`

// InboxHandle implements store.Store. The transaction is READ COMMITTED,
// like every other: the inbox row is the event's lock, so a concurrent
// handler of the same event blocks on it and, once this one commits, finds
// a duplicate.
func (s *Store) InboxHandle(ctx context.Context, p *store.InboxHandleParams, fn func(ctx context.Context, tx store.Tx) error) (bool, error) {
	if p.Consumer == "" || p.EventID == "" {
		return false, fmt.Errorf("inbox handle: consumer and event id are required")
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("inbox handle %s/%s: begin: %w", p.Consumer, p.EventID, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var n int
	if err := tx.QueryRow(ctx, inboxEnterSQL, p.Consumer, p.EventID, dbTime(p.Now)).Scan(&n); err != nil {
		return false, fmt.Errorf("inbox insert %s/%s: %w", p.Consumer, p.EventID, err)
	}
	if n == 1 {
		if err := s.runTx(ctx, tx, fn); err != nil {
			return false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("inbox handle %s/%s: commit: %w", p.Consumer, p.EventID, err)
	}
	return n == 1, nil
}

// InboxDeleteHandled implements store.Store.
func (s *Store) InboxDeleteHandled(ctx context.Context, p *store.InboxDeleteHandledParams) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM docket_inbox WHERE ctid IN (
		SELECT ctid FROM docket_inbox WHERE handled_at < $1 ORDER BY handled_at LIMIT $2)`,
		dbTime(p.HandledBefore), limitOrNull(p.Max))
	if err != nil {
		return 0, fmt.Errorf("delete inbox rows handled before %s: %w", p.HandledBefore, err)
	}
	return int(tag.RowsAffected()), nil
}

const deadLetterColumns = `consumer, event_id, event_type, envelope, deliveries, last_error,
	created_at, updated_at, retry_requested_at`

func scanDeadLetter(r rowScanner) (*store.DeadLetter, error) {
	var (
		d              store.DeadLetter
		envelope       []byte
		retryRequested *time.Time
	)
	if err := r.Scan(&d.Consumer, &d.EventID, &d.EventType, &envelope, &d.Deliveries, &d.LastError,
		&d.CreatedAt, &d.UpdatedAt, &retryRequested); err != nil {
		return nil, err
	}
	d.Envelope = append([]byte(nil), envelope...)
	d.CreatedAt, d.UpdatedAt = d.CreatedAt.UTC(), d.UpdatedAt.UTC()
	d.RetryRequestedAt = utcOrZero(retryRequested)
	return &d, nil
}

func collectDeadLetters(rs pgx.Rows) ([]*store.DeadLetter, error) {
	defer rs.Close()
	var out []*store.DeadLetter
	for rs.Next() {
		d, err := scanDeadLetter(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rs.Err()
}

// deadLetterRecordSQL inserts a dead letter, or counts a new failure on an
// existing one; nothing when the inbox has the event.
const deadLetterRecordSQL = `
INSERT INTO docket_dead_letters (consumer, event_id, event_type, envelope, deliveries, last_error, created_at, updated_at)
SELECT $1, $2, $3, $4::json, $5, $6, $7, $7
WHERE NOT EXISTS (SELECT 1 FROM docket_inbox WHERE consumer = $1 AND event_id = $2)
ON CONFLICT (consumer, event_id) DO UPDATE SET
	deliveries = docket_dead_letters.deliveries + excluded.deliveries,
	last_error = excluded.last_error,
	updated_at = excluded.updated_at,
	retry_requested_at = NULL`

// DeadLetterRecord implements store.Store.
func (s *Store) DeadLetterRecord(ctx context.Context, p *store.DeadLetterRecordParams) (bool, error) {
	if p.Consumer == "" || p.EventID == "" {
		return false, fmt.Errorf("record dead letter: consumer and event id are required")
	}
	tag, err := s.pool.Exec(ctx, deadLetterRecordSQL, p.Consumer, p.EventID, p.EventType,
		string(p.Envelope), p.Deliveries, p.LastError, dbTime(p.Now))
	if err != nil {
		return false, fmt.Errorf("record dead letter %s/%s: %w", p.Consumer, p.EventID, err)
	}
	return tag.RowsAffected() > 0, nil
}

// DeadLetterList implements store.Store.
func (s *Store) DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*store.DeadLetter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var after any // NULL: from the oldest
	var afterConsumer, afterEventID string
	if p.After != nil {
		after, afterConsumer, afterEventID = dbTime(p.After.CreatedAt), p.After.Consumer, p.After.EventID
	}
	rs, err := s.pool.Query(ctx, `SELECT `+deadLetterColumns+` FROM docket_dead_letters
		WHERE ($1 = '' OR consumer = $1)
		AND ($3::timestamptz IS NULL OR (created_at, consumer, event_id) > ($3, $4, $5))
		ORDER BY created_at, consumer, event_id LIMIT $2`,
		p.Consumer, limitOrNull(p.Limit), after, afterConsumer, afterEventID)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out, err := collectDeadLetters(rs)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// DeadLetterRequestRetry implements store.Store.
func (s *Store) DeadLetterRequestRetry(ctx context.Context, p *store.DeadLetterRequestRetryParams) (*store.DeadLetter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	d, err := scanDeadLetter(s.pool.QueryRow(ctx, `UPDATE docket_dead_letters
		SET retry_requested_at = coalesce(retry_requested_at, $3)
		WHERE consumer = $1 AND event_id = $2 RETURNING `+deadLetterColumns,
		p.Consumer, p.EventID, dbTime(p.Now)))
	if err != nil {
		return nil, fmt.Errorf("request retry of dead letter %s/%s: %w", p.Consumer, p.EventID, notFound(err))
	}
	return d, nil
}

// DeadLetterClaimRetries implements store.Store: requests locked by a
// concurrent claimer are skipped, so each goes to one.
func (s *Store) DeadLetterClaimRetries(ctx context.Context, p *store.DeadLetterClaimRetriesParams) ([]*store.DeadLetter, error) {
	rs, err := s.pool.Query(ctx, `
		WITH c AS (
			SELECT consumer, event_id, retry_requested_at FROM docket_dead_letters
			WHERE consumer = $1 AND retry_requested_at IS NOT NULL
			ORDER BY retry_requested_at, event_id LIMIT $2
			FOR UPDATE SKIP LOCKED
		)
		UPDATE docket_dead_letters d SET retry_requested_at = NULL
		FROM c WHERE d.consumer = c.consumer AND d.event_id = c.event_id
		RETURNING d.consumer, d.event_id, d.event_type, d.envelope, d.deliveries, d.last_error,
			d.created_at, d.updated_at, c.retry_requested_at`,
		p.Consumer, limitOrNull(p.Max))
	if err != nil {
		return nil, fmt.Errorf("claim dead letter retries of %s: %w", p.Consumer, err)
	}
	out, err := collectDeadLetters(rs)
	if err != nil {
		return nil, fmt.Errorf("claim dead letter retries of %s: %w", p.Consumer, err)
	}
	return out, nil
}
