package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/store"
)

// PoolModelPut implements store.Store.
func (s *Store) PoolModelPut(ctx context.Context, p *store.PoolModelPutParams) (*store.PoolModel, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	m := &store.PoolModel{PoolID: p.PoolID, Field: p.Field}
	err := s.pool.QueryRow(ctx, `INSERT INTO docket_pool_models (pool_id, field, model, judgments, estimated_at)
		SELECT id, $2, $3::jsonb, $4, $5 FROM docket_pools WHERE id = $1
		ON CONFLICT (pool_id, field) DO UPDATE SET model = excluded.model, judgments = excluded.judgments,
			estimated_at = excluded.estimated_at
		RETURNING model, judgments, estimated_at`,
		p.PoolID, p.Field, string(p.Model), p.Judgments, dbTime(p.Now)).Scan(&m.Model, &m.Judgments, &m.EstimatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("put model of pool %s: %w", p.PoolID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("put model of pool %s field %q: %w", p.PoolID, p.Field, err)
	}
	m.EstimatedAt = m.EstimatedAt.UTC()
	return m, nil
}

// PoolModelList implements store.Store.
func (s *Store) PoolModelList(ctx context.Context, poolID uuid.UUID) ([]*store.PoolModel, error) {
	rows, err := s.pool.Query(ctx, `SELECT field, model, judgments, estimated_at FROM docket_pool_models
		WHERE pool_id = $1 ORDER BY field`, poolID)
	if err != nil {
		return nil, fmt.Errorf("list models of pool %s: %w", poolID, err)
	}
	defer rows.Close()
	var out []*store.PoolModel
	for rows.Next() {
		m := &store.PoolModel{PoolID: poolID}
		if err := rows.Scan(&m.Field, &m.Model, &m.Judgments, &m.EstimatedAt); err != nil {
			return nil, fmt.Errorf("list models of pool %s: %w", poolID, err)
		}
		m.EstimatedAt = m.EstimatedAt.UTC()
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list models of pool %s: %w", poolID, err)
	}
	return out, nil
}
