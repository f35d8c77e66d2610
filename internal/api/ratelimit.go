package api

import (
	"math"
	"sync"

	"golang.org/x/time/rate"
)

// limiter is a token bucket per API key.
type limiter struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newLimiter(perSecond float64, burst int) *limiter {
	if burst < 1 {
		burst = max(1, int(math.Ceil(perSecond)))
	}
	return &limiter{rate: rate.Limit(perSecond), burst: burst, buckets: map[string]*rate.Limiter{}}
}

// allow takes a token for key; when there is none it returns how many
// seconds to wait (at least 1), and 0 when the request may go ahead.
func (l *limiter) allow(key string) int {
	l.mu.Lock()
	b, ok := l.buckets[key]
	if !ok {
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[key] = b
	}
	l.mu.Unlock()
	r := b.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return max(1, int(math.Ceil(d.Seconds())))
	}
	return 0
}
