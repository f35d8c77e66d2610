package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/docket-run/docket/internal/store"
)

// inboxInsertSQL records an event as handled; a duplicate inserts nothing.
const inboxInsertSQL = `INSERT INTO docket_inbox (consumer, event_id, handled_at) VALUES (?, ?, ?)
	ON CONFLICT (consumer, event_id) DO NOTHING`

// deadLetterDeleteSQL removes an event's dead letter once it is handled.
const deadLetterDeleteSQL = `DELETE FROM docket_dead_letters WHERE consumer = ? AND event_id = ?`

// InboxHandle implements store.Store. The transaction is a write
// transaction (BEGIN IMMEDIATE): SQLite serialises it with every other
// write, so a concurrent handler of the same event — in this process or
// another — runs after this one commits and sees the inbox row.
func (s *Store) InboxHandle(ctx context.Context, p *store.InboxHandleParams, fn func(ctx context.Context, tx store.Tx) error) (bool, error) {
	if p.Consumer == "" || p.EventID == "" {
		return false, fmt.Errorf("inbox handle: consumer and event id are required")
	}
	var (
		handled bool
		t       *storeTx
	)
	err := s.write(ctx, func(sqlTx *sql.Tx) error {
		res, err := sqlTx.ExecContext(ctx, inboxInsertSQL, p.Consumer, p.EventID, micros(p.Now))
		if err != nil {
			return fmt.Errorf("inbox insert %s/%s: %w", p.Consumer, p.EventID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("inbox insert %s/%s: %w", p.Consumer, p.EventID, err)
		}
		// Handled now, or before: either way the event is no longer dead.
		if _, err := sqlTx.ExecContext(ctx, deadLetterDeleteSQL, p.Consumer, p.EventID); err != nil {
			return fmt.Errorf("delete dead letter %s/%s: %w", p.Consumer, p.EventID, err)
		}
		if n == 0 {
			return nil
		}
		handled = true
		t = &storeTx{s: s, tx: sqlTx, now: p.Now}
		return t.run(ctx, fn)
	})
	if err != nil {
		return false, err
	}
	if t != nil {
		t.publish()
	}
	return handled, nil
}

// InboxDeleteHandled implements store.Store.
func (s *Store) InboxDeleteHandled(ctx context.Context, p *store.InboxDeleteHandledParams) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM docket_inbox WHERE rowid IN (
			SELECT rowid FROM docket_inbox WHERE handled_at < ? ORDER BY handled_at LIMIT ?)`,
			micros(p.HandledBefore), limit(p.Max))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete inbox rows handled before %s: %w", p.HandledBefore, err)
	}
	return int(n), nil
}

const deadLetterColumns = `consumer, event_id, event_type, envelope, deliveries, last_error,
	created_at, updated_at, retry_requested_at`

func scanDeadLetter(sc scanner) (*store.DeadLetter, error) {
	var (
		d                store.DeadLetter
		envelope         []byte
		created, updated int64
		retryRequestedAt sql.NullInt64
	)
	if err := sc.Scan(&d.Consumer, &d.EventID, &d.EventType, &envelope, &d.Deliveries, &d.LastError,
		&created, &updated, &retryRequestedAt); err != nil {
		return nil, err
	}
	d.Envelope = append([]byte(nil), envelope...)
	d.CreatedAt, d.UpdatedAt = fromMicros(created), fromMicros(updated)
	d.RetryRequestedAt = fromNullMicros(retryRequestedAt)
	return &d, nil
}

func collectDeadLetters(rows *sql.Rows) ([]*store.DeadLetter, error) {
	defer rows.Close()
	var out []*store.DeadLetter
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// DeadLetterRecord implements store.Store.
func (s *Store) DeadLetterRecord(ctx context.Context, p *store.DeadLetterRecordParams) (bool, error) {
	if p.Consumer == "" || p.EventID == "" {
		return false, fmt.Errorf("record dead letter: consumer and event id are required")
	}
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO docket_dead_letters (`+deadLetterColumns+`)
			SELECT ?, ?, ?, ?, ?, ?, ?, ?, NULL
			WHERE NOT EXISTS (SELECT 1 FROM docket_inbox WHERE consumer = ? AND event_id = ?)
			ON CONFLICT (consumer, event_id) DO UPDATE SET
				deliveries = deliveries + excluded.deliveries,
				last_error = excluded.last_error,
				updated_at = excluded.updated_at,
				retry_requested_at = NULL`,
			p.Consumer, p.EventID, p.EventType, string(p.Envelope), p.Deliveries, p.LastError,
			micros(p.Now), micros(p.Now), p.Consumer, p.EventID)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("record dead letter %s/%s: %w", p.Consumer, p.EventID, err)
	}
	return n > 0, nil
}

// DeadLetterList implements store.Store.
func (s *Store) DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*store.DeadLetter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var after any // NULL: from the oldest
	var afterConsumer, afterEventID string
	if p.After != nil {
		after, afterConsumer, afterEventID = micros(p.After.CreatedAt), p.After.Consumer, p.After.EventID
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT `+deadLetterColumns+` FROM docket_dead_letters
		WHERE (?1 = '' OR consumer = ?1)
		AND (?3 IS NULL OR (created_at, consumer, event_id) > (?3, ?4, ?5))
		ORDER BY created_at, consumer, event_id LIMIT ?2`,
		p.Consumer, limit(p.Limit), after, afterConsumer, afterEventID)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out, err := collectDeadLetters(rows)
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
	var d *store.DeadLetter
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		d, err = scanDeadLetter(tx.QueryRowContext(ctx, `UPDATE docket_dead_letters
			SET retry_requested_at = coalesce(retry_requested_at, ?)
			WHERE consumer = ? AND event_id = ? RETURNING `+deadLetterColumns,
			micros(p.Now), p.Consumer, p.EventID))
		return notFound(err)
	})
	if err != nil {
		return nil, fmt.Errorf("request retry of dead letter %s/%s: %w", p.Consumer, p.EventID, err)
	}
	return d, nil
}

// DeadLetterClaimRetries implements store.Store. The write transaction
// serialises claimers, so each request goes to one.
func (s *Store) DeadLetterClaimRetries(ctx context.Context, p *store.DeadLetterClaimRetriesParams) ([]*store.DeadLetter, error) {
	var out []*store.DeadLetter
	err := s.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+deadLetterColumns+` FROM docket_dead_letters
			WHERE consumer = ? AND retry_requested_at IS NOT NULL
			ORDER BY retry_requested_at, event_id LIMIT ?`, p.Consumer, limit(p.Max))
		if err != nil {
			return err
		}
		if out, err = collectDeadLetters(rows); err != nil {
			return err
		}
		for _, d := range out {
			if _, err := tx.ExecContext(ctx, `UPDATE docket_dead_letters SET retry_requested_at = NULL
				WHERE consumer = ? AND event_id = ?`, d.Consumer, d.EventID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim dead letter retries of %s: %w", p.Consumer, err)
	}
	return out, nil
}
