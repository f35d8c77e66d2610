package docket

import (
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/docket-run/docket/internal/crowd"
)

// TakeRateError: a take came past the pool's safe rate (its task's
// takesPerSecond or takesPerSecondPerContributor); retry after
// RetryAfter. The API answers it 429 with a Retry-After header.
type TakeRateError = crowd.TakeRateError

// takeRatesMax is how many buckets a node keeps before it starts afresh
// (a full bucket each: at worst a burst more than the rate per key).
const takeRatesMax = 100_000

// takeRates holds the token buckets of the pools' safe rates on this
// node: one per pool whose task sets takesPerSecond, one per pool and
// contributor when it sets takesPerSecondPerContributor. Each holds one
// second's worth of takes (at least one). The rate is per node: N nodes
// serving one pool hand out up to N times its rate.
type takeRates struct {
	mu sync.Mutex
	m  map[takeRateKey]*rate.Limiter
}

type takeRateKey struct {
	pool, contributor uuid.UUID // contributor uuid.Nil: the pool's bucket
}

func (r *takeRates) bucket(k takeRateKey, perSecond float64) *rate.Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= takeRatesMax {
		r.m = map[takeRateKey]*rate.Limiter{}
	}
	b := r.m[k]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond)))
		r.m[k] = b
	}
	return b
}

// allow takes one token of the contributor's bucket and one of the
// pool's, or none: a *TakeRateError when either has none now.
func (r *takeRates) allow(poolID, contributorID uuid.UUID, poolRate, contributorRate float64, now time.Time) error {
	var held []*rate.Reservation
	cancel := func() {
		for _, h := range held {
			h.CancelAt(now)
		}
	}
	for _, b := range []struct {
		key       takeRateKey
		perSecond float64
	}{
		{takeRateKey{poolID, contributorID}, contributorRate},
		{takeRateKey{pool: poolID}, poolRate},
	} {
		if b.perSecond <= 0 {
			continue
		}
		res := r.bucket(b.key, b.perSecond).ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 || !res.OK() {
			res.CancelAt(now)
			cancel()
			return &TakeRateError{PoolID: poolID, ContributorID: b.key.contributor, PerSecond: b.perSecond, RetryAfter: d}
		}
		held = append(held, res)
	}
	return nil
}

// takeRateAllow applies the safe rates of the pool's task to one take.
func (c *Client) takeRateAllow(pool *Pool, ct *CompiledTask, contributorID uuid.UUID) error {
	t := ct.Template
	if t.TakesPerSecond <= 0 && t.TakesPerSecondPerContributor <= 0 {
		return nil
	}
	return c.rates.allow(pool.ID, contributorID, t.TakesPerSecond, t.TakesPerSecondPerContributor, c.cfg.Now())
}
