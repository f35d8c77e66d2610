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

// FindWorkData is the data of shape, drawn (seeded): the pools, each with
// its units, and the contributors, in the order SeedFindWork creates them.
// The pools are steps of workflow "findwork" and use task "findwork".
type FindWorkData struct {
	Pools        []FindWorkPool
	Contributors []*store.ContributorCreateParams
}

// FindWorkPool is one pool of FindWorkData and its JUDGABLE units.
type FindWorkPool struct {
	Pool  *store.PoolCreateParams
	Units []*store.UnitInsertParams
}

// DrawFindWork draws shape's data, now being the newest pool's creation.
func DrawFindWork(shape FindWorkShape, now time.Time) *FindWorkData {
	r := rand.New(rand.NewPCG(17, 4))
	skills, channels := names("skill", 20), names("channel", 8)
	d := &FindWorkData{Pools: make([]FindWorkPool, shape.Pools), Contributors: make([]*store.ContributorCreateParams, shape.Contributors)}
	for i := range d.Pools {
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
		units := make([]*store.UnitInsertParams, shape.UnitsPerPool)
		for j := range units {
			units[j] = &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), RunID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}
		}
		d.Pools[i] = FindWorkPool{Pool: &store.PoolCreateParams{
			ID: uuid.Must(uuid.NewV7()), Workflow: "findwork", WorkflowVersion: 1, Step: "s" + strconv.Itoa(i),
			Task: "findwork", TaskVersion: 1, Priority: r.IntN(10), Skills: draw(r, skills, k), Channels: ch,
			JudgmentsPerUnit: 3, AssignmentSeconds: 900, Now: now.Add(-time.Duration(r.IntN(86400)) * time.Second),
		}, Units: units}
	}
	for i := range d.Contributors {
		d.Contributors[i] = &store.ContributorCreateParams{ID: uuid.Must(uuid.NewV7()),
			ExternalID: "findwork-" + strconv.Itoa(i), Skills: draw(r, skills, 3+r.IntN(4)),
			Channels: draw(r, channels, 1+r.IntN(2)), Now: now}
	}
	return d
}

// SeedFindWork fills s with shape (DrawFindWork) through the store (pools
// and units in transactions of 500 pools, contributors one by one) and
// returns the contributors' ids. The store needs a workflow and a task: it
// creates workflow "findwork" (one version; each pool is one of its steps)
// and task "findwork".
func SeedFindWork(ctx context.Context, s store.Store, shape FindWorkShape) ([]uuid.UUID, error) {
	now := time.Now().UTC().Truncate(time.Second)
	if err := SeedFindWorkDefinitions(ctx, s, now); err != nil {
		return nil, err
	}
	d := DrawFindWork(shape, now)
	const batch = 500
	for from := 0; from < len(d.Pools); from += batch {
		err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			for _, fp := range d.Pools[from:min(from+batch, len(d.Pools))] {
				p, _, err := tx.PoolCreate(ctx, fp.Pool)
				if err != nil {
					return err
				}
				if len(fp.Units) > 0 {
					if _, err := tx.UnitInsertMany(ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable, Units: fp.Units, Now: now}); err != nil {
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
	ids := make([]uuid.UUID, len(d.Contributors))
	for i, cp := range d.Contributors {
		c, err := s.ContributorCreate(ctx, cp)
		if err != nil {
			return nil, fmt.Errorf("seed: contributors: %w", err)
		}
		ids[i] = c.ID
	}
	return ids, nil
}

// SeedFindWorkDefinitions creates the workflow and the task of
// DrawFindWork's pools.
func SeedFindWorkDefinitions(ctx context.Context, s store.Store, now time.Time) error {
	if _, _, err := s.WorkflowPut(ctx, &store.WorkflowPutParams{Name: "findwork", Definition: json.RawMessage(`{}`), Hash: "findwork", Now: now}); err != nil {
		return fmt.Errorf("seed: workflow: %w", err)
	}
	if _, _, err := s.TaskPut(ctx, &store.TaskPutParams{Name: "findwork", Definition: json.RawMessage(`{}`), Hash: "findwork", Now: now}); err != nil {
		return fmt.Errorf("seed: task: %w", err)
	}
	return nil
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
