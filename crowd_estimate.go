package docket

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/aggregate"
	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/task"
)

// Worker-quality estimates of the pools (docs/quality.md, "Live
// aggregation"). A model-based method (Dawid-Skene and the others of
// package aggregate) learns each contributor's confusion matrix from the
// whole pool; finalizing one unit cannot afford that, so:
//
//   - the maintenance leader re-estimates each pool whose judgment count
//     moved since its last estimate (the pool-estimator service, every
//     WorkerConfig.PoolEstimateInterval): all the pool's clean judgments,
//     golden units' answers as known truth, one aggregate.Categorical per
//     model-based field, and stores the aggregate.Model of each field
//     (store.PoolModelStore);
//   - every node finalizes a unit with the posterior of its judgments
//     under the stored model (aggregate.Model.Posterior: no
//     re-estimation, about a microsecond), reading the models at most
//     once per poolModelTTL per pool (a per-client cache).

// PoolEstimateIntervalDefault is WorkerConfig.PoolEstimateInterval's
// default.
const PoolEstimateIntervalDefault = 30 * time.Second

// PoolEstimateMinJudgments is how many judgments a pool must have
// counted before the pool-estimator estimates it: a model of fewer says
// more about chance than about the contributors (a contributor seen once
// would get a confusion matrix from one answer). Until then its units
// finalize with the weighted vote.
const PoolEstimateMinJudgments = 30

// poolModelTTL is how long a node uses the models it read of a pool
// before it reads them again: a new estimate reaches every node within
// it.
const poolModelTTL = 10 * time.Second

// modelsRead is what a node read of a pool's models.
type modelsRead struct {
	models map[string]*aggregate.Model // by field name
	stored map[string]modelStamp       // what each decoded model was, by field name
}

// modelStamp identifies one stored estimate: a model whose stamp did not
// change since it was decoded is not decoded again.
type modelStamp struct {
	judgments   int
	estimatedAt time.Time
}

// poolModels returns the worker-quality models of the pool's model-based
// fields, by field name, from the cache or the store; nil when the task
// has no model-based field (then nothing is read) or the pool was never
// estimated.
//
// One caller reads at a time (a refreshCache of poolModelTTL): when the
// models lapse, one rereads them while the others keep the ones they
// have; before the first read, the others wait for it. A model whose
// estimate did not change since the last read (its judgments and
// estimated_at) keeps its decoded form.
// (Every judgment in flight reread them at once before, each decoding
// every field's model again: a thousand reads in a run of a hot pool.)
func (c *Client) poolModels(ctx context.Context, pool *Pool, ct *task.Compiled) (map[string]*aggregate.Model, error) {
	if len(modelFields(ct)) == 0 {
		return nil, nil
	}
	pm, err := c.models.get(ctx, pool.ID, func(ctx context.Context, old modelsRead) (modelsRead, error) {
		stored, err := c.store.PoolModelList(ctx, pool.ID)
		if err != nil {
			return modelsRead{}, err
		}
		next := modelsRead{models: make(map[string]*aggregate.Model, len(stored)), stored: make(map[string]modelStamp, len(stored))}
		for _, s := range stored {
			stamp := modelStamp{judgments: s.Judgments, estimatedAt: s.EstimatedAt}
			if m, ok := old.models[s.Field]; ok && old.stored[s.Field] == stamp {
				next.models[s.Field], next.stored[s.Field] = m, stamp
				continue
			}
			m := &aggregate.Model{}
			if err := json.Unmarshal(s.Model, m); err != nil {
				// A model this version cannot read: the units fall back to
				// the weighted vote until the next estimate replaces it.
				c.cfg.Logger.Warn("unreadable pool model", "pool_id", pool.ID, "field", s.Field, "error", err)
				continue
			}
			next.models[s.Field], next.stored[s.Field] = m, stamp
		}
		return next, nil
	})
	return pm.models, err
}

// forgetPoolModels drops the cached models of a pool (a newer estimate
// was stored, which a read in flight may predate): the next finalization
// reads the ones just stored.
func (c *Client) forgetPoolModels(poolID uuid.UUID) {
	c.models.forget(poolID)
}

// PoolsEstimate re-estimates the worker-quality models of every pool that
// is not COMPLETED, has a model-based field and counted a judgment since
// its last estimate, and returns how many pools it estimated. The
// maintenance leader runs it every WorkerConfig.PoolEstimateInterval (the
// pool-estimator service); tools and tests may call it.
func (c *Client) PoolsEstimate(ctx context.Context) (int, error) {
	n := 0
	var before uuid.UUID
	for {
		pools, err := c.store.PoolList(ctx, &store.PoolListParams{
			Statuses: []crowd.PoolStatus{crowd.PoolOpen, crowd.PoolPaused, crowd.PoolClosed}, BeforeID: before, Limit: 100,
		})
		if err != nil {
			return n, err
		}
		for _, p := range pools {
			done, err := c.PoolEstimate(ctx, p, false)
			if err != nil {
				return n, fmt.Errorf("estimate pool %s: %w", p.ID, err)
			}
			if done {
				n++
			}
		}
		if len(pools) < 100 {
			return n, nil
		}
		before = pools[len(pools)-1].ID
	}
}

// PoolEstimate re-estimates the worker-quality model of each model-based
// field of the pool from all its clean judgments (golden units' answers
// taken as known truth) and stores them; unless force, only when the
// pool has counted PoolEstimateMinJudgments and its count moved since the
// stored estimate. It reports whether it estimated.
//
// Cost: it reads every judgment of the pool (one query) and the golden
// units, and runs the field's method over them — for Dawid-Skene about
// O(judgments × classes² × iterations); see docs/quality.md for figures.
func (c *Client) PoolEstimate(ctx context.Context, pool *Pool, force bool) (bool, error) {
	ct, err := c.CompiledTask(ctx, pool.Task, pool.TaskVersion)
	if err != nil {
		return false, err
	}
	fields := modelFields(ct)
	if len(fields) == 0 {
		return false, nil
	}
	counted := pool.Counts.Judgments
	if !force {
		if counted < PoolEstimateMinJudgments {
			return false, nil
		}
		stored, err := c.store.PoolModelList(ctx, pool.ID)
		if err != nil {
			return false, err
		}
		current := 0
		for _, m := range stored {
			if m.Judgments == counted {
				current++
			}
		}
		if current == len(fields) {
			return false, nil
		}
	}
	judgments, err := c.store.JudgmentList(ctx, &store.JudgmentListParams{PoolID: pool.ID})
	if err != nil {
		return false, err
	}
	golden := true
	goldens, err := c.store.UnitList(ctx, &store.UnitListParams{PoolID: pool.ID, Golden: &golden})
	if err != nil {
		return false, err
	}
	answers := make(map[uuid.UUID]task.Judgment, len(goldens))
	for _, u := range goldens {
		a, err := ct.ParseAnswer(u.Answer)
		if err != nil {
			continue // an answer of another version of the task: no truth
		}
		answers[u.ID] = a
	}
	parsed := make([]task.Judgment, len(judgments))
	for i, j := range judgments {
		if j.Tainted {
			continue
		}
		if parsed[i], err = ct.ParseJudgment(j.Data); err != nil {
			return false, fmt.Errorf("judgment %s: %w", j.ID, err)
		}
	}
	for _, f := range fields {
		var in []aggregate.Judgment
		// Oldest first: the order the methods see items and workers in.
		for i := len(judgments) - 1; i >= 0; i-- {
			j := judgments[i]
			if v, ok := parsed[i][f.Name]; ok && !j.Tainted {
				in = append(in, aggregate.Judgment{Item: j.UnitID.String(), Worker: j.ContributorID.String(), Label: fmt.Sprint(v)})
			}
		}
		gold := map[string]string{}
		for id, a := range answers {
			if v, ok := a[f.Name]; ok {
				gold[id.String()] = fmt.Sprint(v)
			}
		}
		res, err := aggregate.Categorical(aggregate.Method(f.Aggregation), in, aggregate.Options{Classes: fieldClasses(f), Gold: gold})
		if err != nil {
			return false, fmt.Errorf("field %s: %w", f.Name, err)
		}
		if res.Model == nil {
			continue
		}
		b, err := json.Marshal(res.Model)
		if err != nil {
			return false, err
		}
		if _, err := c.store.PoolModelPut(ctx, &store.PoolModelPutParams{
			PoolID: pool.ID, Field: f.Name, Model: b, Judgments: counted, Now: c.cfg.Now(),
		}); err != nil {
			return false, err
		}
	}
	c.forgetPoolModels(pool.ID)
	return true, nil
}

// poolEstimator is the leader service that re-estimates the pools'
// worker-quality models.
func (c *Client) poolEstimator(interval time.Duration) service.Service {
	if interval <= 0 {
		interval = PoolEstimateIntervalDefault
	}
	return &service.Loop{Name: "pool-estimator", Interval: interval, Fn: func(ctx context.Context) {
		n, err := c.PoolsEstimate(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			c.cfg.Logger.Warn("estimate pools failed", "service", "pool-estimator", "error", err)
		case n > 0:
			c.cfg.Logger.Info("estimated pools", "service", "pool-estimator", "count", n)
		}
	}}
}
