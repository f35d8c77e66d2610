package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// PoolModelStore keeps the worker-quality models of pools: for each
// categorical field whose aggregation method learns one (Dawid-Skene and
// the others of package aggregate), the JSON of the aggregate.Model last
// estimated from the pool's clean judgments. The maintenance leader
// writes them (re-estimation); every node reads them to finalize a unit
// with the per-item posterior. They are advice, not state: a unit is
// finalized with whatever model was read, and nothing else depends on
// them, so they are read and written outside the judgment's transaction.
type PoolModelStore interface {
	// PoolModelPut stores the model of one field of a pool, replacing
	// the one there. ErrNotFound when the pool does not exist.
	PoolModelPut(ctx context.Context, p *PoolModelPutParams) (*PoolModel, error)
	// PoolModelList lists a pool's models by field name; none for a pool
	// never estimated (or none at all).
	PoolModelList(ctx context.Context, poolID uuid.UUID) ([]*PoolModel, error)
}

// PoolModel is the stored model of one field of a pool.
type PoolModel struct {
	PoolID uuid.UUID
	Field  string
	// Model is an aggregate.Model as JSON.
	Model json.RawMessage
	// Judgments is the pool's judgment count the model was estimated at.
	Judgments   int
	EstimatedAt time.Time
}

// PoolModelPutParams stores one model.
type PoolModelPutParams struct {
	PoolID    uuid.UUID
	Field     string
	Model     json.RawMessage // a JSON object
	Judgments int
	Now       time.Time
}

// Validate names every invalid field.
func (p *PoolModelPutParams) Validate() error {
	pr := problemsOf("put pool model")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.Field == "", "field", "is required")
	checkJSON(pr, "model", p.Model)
	pr.Check(p.Judgments < 0, "judgments", "must not be negative")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}
