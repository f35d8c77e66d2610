package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// FindWorkShape is the data "finding work" (PoolListEligible) is measured
// on: Pools OPEN pools of UnitsPerPool units each and Contributors
// contributors. Skills and channels are drawn (seeded, so every run sees
// the same data) from a vocabulary of 20 skills and 8 channels: a pool
// requires no skill (30%), one (50%) or two (20%), and no channel (half)
// or one or two; a contributor has 3 to 6 skills and 1 or 2 channels; a
// pool's priority is 0–9 and its age up to a day. About a quarter of the
// pools are open to a given contributor (2,559 of 10,000 for the first),
// so every call fills its limit of 50.
type FindWorkShape struct {
	Pools, UnitsPerPool, Contributors int
}

// FindWorkShapeDefault is the shape of the issue: 10,000 open pools and
// 10,000 contributors.
var FindWorkShapeDefault = FindWorkShape{Pools: 10_000, UnitsPerPool: 3, Contributors: 10_000}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// draw picks k distinct names of vocab, sorted.
func draw(r *rand.Rand, vocab []string, k int) []string {
	out := []string{}
	for _, i := range r.Perm(len(vocab))[:k] {
		out = append(out, vocab[i])
	}
	slices.Sort(out)
	return out
}

// SeedFindWork fills s with shape through the store (pools and units in
// transactions of 500 pools, contributors one by one) and returns the
// contributors' ids. The store needs a workflow and a task: it creates
// workflow "findwork" (one version; each pool is one of its steps) and
// task "findwork".
func SeedFindWork(ctx context.Context, s store.Store, shape FindWorkShape) ([]uuid.UUID, error) {
	now := time.Now().UTC().Truncate(time.Second)
	if _, _, err := s.WorkflowPut(ctx, &store.WorkflowPutParams{Name: "findwork", Definition: json.RawMessage(`{}`), Hash: "findwork", Now: now}); err != nil {
		return nil, fmt.Errorf("seed: workflow: %w", err)
	}
	if _, _, err := s.TaskPut(ctx, &store.TaskPutParams{Name: "findwork", Definition: json.RawMessage(`{}`), Hash: "findwork", Now: now}); err != nil {
		return nil, fmt.Errorf("seed: task: %w", err)
	}
	r := rand.New(rand.NewPCG(17, 4))
	skills, channels := names("skill", 20), names("channel", 8)
	const batch = 500
	for from := 0; from < shape.Pools; from += batch {
		err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			for i := from; i < min(from+batch, shape.Pools); i++ {
				k := 0
				switch x := r.IntN(10); {
				case x >= 8:
					k = 2
				case x >= 3:
					k = 1
				}
				var ch []string
				if r.IntN(2) == 1 {
					ch = draw(r, channels, 1+r.IntN(2))
				}
				p, _, err := tx.PoolCreate(ctx, &store.PoolCreateParams{
					ID: uuid.Must(uuid.NewV7()), Workflow: "findwork", WorkflowVersion: 1, Step: "s" + strconv.Itoa(i),
					Task: "findwork", TaskVersion: 1, Priority: r.IntN(10), Skills: draw(r, skills, k), Channels: ch,
					JudgmentsPerUnit: 3, AssignmentSeconds: 900, Now: now.Add(-time.Duration(r.IntN(86400)) * time.Second),
				})
				if err != nil {
					return err
				}
				units := make([]*store.UnitInsertParams, shape.UnitsPerPool)
				for j := range units {
					units[j] = &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), RunID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}
				}
				if len(units) > 0 {
					if _, err := tx.UnitInsertMany(ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable, Units: units, Now: now}); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("seed: pools: %w", err)
		}
	}
	ids := make([]uuid.UUID, shape.Contributors)
	for i := range ids {
		c, err := s.ContributorCreate(ctx, &store.ContributorCreateParams{ID: uuid.Must(uuid.NewV7()),
			ExternalID: "findwork-" + strconv.Itoa(i), Skills: draw(r, skills, 3+r.IntN(4)),
			Channels: draw(r, channels, 1+r.IntN(2)), Now: now})
		if err != nil {
			return nil, fmt.Errorf("seed: contributors: %w", err)
		}
		ids[i] = c.ID
	}
	return ids, nil
}

// BenchmarkFindWork measures PoolListEligible (GET /v1/me/pools, limit
// 50, the API's default) on FindWorkShapeDefault, each iteration for the
// next contributor, and reports the p50 and p99 of one call in ms and the
// pools found per call. Seeding is not timed. Run it with, e.g.:
//
//	go test -run '^$' -bench FindWork -benchtime 2000x ./internal/store/postgres/
func BenchmarkFindWork(b *testing.B, s store.Store) {
	ctx := b.Context()
	ids, err := SeedFindWork(ctx, s, FindWorkShapeDefault)
	if err != nil {
		b.Fatal(err)
	}
	var (
		took  []time.Duration
		found int
	)
	i := 0
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		ps, err := s.PoolListEligible(ctx, &store.PoolListEligibleParams{ContributorID: ids[i%len(ids)], Limit: 50})
		took = append(took, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		found += len(ps)
		i++
	}
	slices.Sort(took)
	pct := func(q float64) float64 {
		return float64(took[min(len(took)-1, int(q*float64(len(took))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(float64(found)/float64(len(took)), "pools/op")
}
