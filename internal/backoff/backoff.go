// Package backoff computes retry delays: exponential growth with full jitter.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff: the ceiling of the n-th retry's delay is
// Base × 2^(n-1), capped at Max; the delay itself is uniform in
// [ceiling/2, ceiling] ("full jitter" over the upper half keeps delays from
// collapsing to zero while still spreading retries of a burst apart).
type Policy struct {
	Base time.Duration
	Max  time.Duration
}

// Or returns p with each field it leaves unset (zero or less) taken from
// def, on its own: a Base alone grows up to def's Max (or stays at itself,
// when larger), and a Max alone caps def's Base.
func (p Policy) Or(def Policy) Policy {
	switch {
	case p.Base <= 0 && p.Max <= 0:
		return def
	case p.Base <= 0:
		p.Base = min(def.Base, p.Max)
	case p.Max <= 0:
		p.Max = max(def.Max, p.Base)
	}
	return p
}

// Delay returns the delay before the retry that follows attempt (1-based).
func (p Policy) Delay(attempt int) time.Duration {
	return p.delay(attempt, rand.Int64N)
}

func (p Policy) delay(attempt int, randN func(int64) int64) time.Duration {
	if p.Base <= 0 {
		return 0
	}
	ceiling := p.Max
	if attempt < 1 {
		attempt = 1
	}
	if shift := attempt - 1; shift < 40 && p.Base<<shift > 0 && (p.Max <= 0 || p.Base<<shift < p.Max) {
		ceiling = p.Base << shift
	}
	if ceiling <= 1 {
		return ceiling
	}
	half := int64(ceiling) / 2
	return time.Duration(half + randN(int64(ceiling)-half+1))
}
