package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

const insertOutboxSQL = `INSERT INTO docket_outbox (event_type, data, created_at) VALUES (?, ?, ?)`

// insertOutbox writes one outbox row inside tx (the caller's write
// transaction), data encoded as JSON.
func insertOutbox(ctx context.Context, tx conn, eventType string, data any, now time.Time) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", eventType, err)
	}
	return insertOutboxJSON(ctx, tx, eventType, b, now)
}

// insertOutboxJSON writes one outbox row inside tx (the caller's write
// transaction), data already encoded.
func insertOutboxJSON(ctx context.Context, tx conn, eventType string, data []byte, now time.Time) error {
	if _, err := tx.ExecContext(ctx, insertOutboxSQL, eventType, string(data), micros(now)); err != nil {
		return fmt.Errorf("insert %s outbox row: %w", eventType, err)
	}
	return nil
}

// insertStateChanged writes the one job.state_changed outbox row describing
// every transition a call made; nothing when there were none.
func insertStateChanged(ctx context.Context, tx *sql.Tx, ts []job.Transition, now time.Time) error {
	if len(ts) == 0 {
		return nil
	}
	return insertOutboxJSON(ctx, tx, job.EventStateChanged, job.StateChangedData{Transitions: ts}.AppendJSON(nil), now)
}

// OutboxList implements store.Store.
func (s *Store) OutboxList(ctx context.Context, p *store.OutboxListParams) ([]*store.OutboxEvent, error) {
	out, err := s.queryOutbox(ctx, `SELECT id, event_type, data, created_at FROM docket_outbox
		WHERE id > ? ORDER BY id LIMIT ?`, p.AfterID, limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list outbox after %d: %w", p.AfterID, err)
	}
	return out, nil
}

// queryOutbox reads outbox rows (id, event_type, data, created_at) on the
// reader.
func (s *Store) queryOutbox(ctx context.Context, query string, args ...any) ([]*store.OutboxEvent, error) {
	rows, err := s.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.OutboxEvent
	for rows.Next() {
		var (
			e         store.OutboxEvent
			data      []byte
			createdAt int64
		)
		if err := rows.Scan(&e.ID, &e.Type, &data, &createdAt); err != nil {
			return nil, fmt.Errorf("scan outbox row: %w", err)
		}
		e.Data = json.RawMessage(data)
		e.CreatedAt = fromMicros(createdAt)
		out = append(out, &e)
	}
	return out, rows.Err()
}
