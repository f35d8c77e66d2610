package backoff

import (
	"testing"
	"time"
)

func TestDelayBounds(t *testing.T) {
	p := Policy{Base: time.Second, Max: time.Minute}
	for attempt := 1; attempt <= 100; attempt++ {
		ceiling := time.Minute
		if attempt <= 6 {
			ceiling = time.Second << (attempt - 1)
		}
		lo := p.delay(attempt, func(int64) int64 { return 0 })
		hi := p.delay(attempt, func(n int64) int64 { return n - 1 })
		if lo != ceiling/2 || hi != ceiling {
			t.Fatalf("attempt %d: delay range [%v, %v], want [%v, %v]", attempt, lo, hi, ceiling/2, ceiling)
		}
		if d := p.Delay(attempt); d < ceiling/2 || d > ceiling {
			t.Fatalf("attempt %d: random delay %v outside [%v, %v]", attempt, d, ceiling/2, ceiling)
		}
	}
}

func TestZeroBase(t *testing.T) {
	if d := (Policy{}).Delay(3); d != 0 {
		t.Fatalf("zero policy gave %v", d)
	}
}
