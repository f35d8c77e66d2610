package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/store"
)

// PoolModelPut implements store.Store.
func (s *Store) PoolModelPut(ctx context.Context, p *store.PoolModelPutParams) (*store.PoolModel, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	m := &store.PoolModel{PoolID: p.PoolID, Field: p.Field}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var (
			model string
			at    int64
		)
		err := tx.QueryRowContext(ctx, `INSERT INTO docket_pool_models (pool_id, field, model, judgments, estimated_at)
			SELECT id, ?2, ?3, ?4, ?5 FROM docket_pools WHERE id = ?1
			ON CONFLICT (pool_id, field) DO UPDATE SET model = excluded.model, judgments = excluded.judgments,
				estimated_at = excluded.estimated_at
			RETURNING model, judgments, estimated_at`,
			p.PoolID.String(), p.Field, string(p.Model), p.Judgments, micros(p.Now)).Scan(&model, &m.Judgments, &at)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("put model of pool %s: %w", p.PoolID, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("put model of pool %s field %q: %w", p.PoolID, p.Field, err)
		}
		m.Model, m.EstimatedAt = json.RawMessage(model), fromMicros(at)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// PoolModelList implements store.Store.
func (s *Store) PoolModelList(ctx context.Context, poolID uuid.UUID) ([]*store.PoolModel, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT field, model, judgments, estimated_at FROM docket_pool_models
		WHERE pool_id = ? ORDER BY field`, poolID.String())
	if err != nil {
		return nil, fmt.Errorf("list models of pool %s: %w", poolID, err)
	}
	defer func() { _ = rows.Close() }()
	var out []*store.PoolModel
	for rows.Next() {
		var (
			m     = &store.PoolModel{PoolID: poolID}
			model string
			at    int64
		)
		if err := rows.Scan(&m.Field, &model, &m.Judgments, &at); err != nil {
			return nil, fmt.Errorf("list models of pool %s: %w", poolID, err)
		}
		m.Model, m.EstimatedAt = json.RawMessage(model), fromMicros(at)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list models of pool %s: %w", poolID, err)
	}
	return out, nil
}
