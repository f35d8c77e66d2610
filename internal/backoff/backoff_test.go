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

func TestOrFillsEachFieldAlone(t *testing.T) {
	def := Policy{Base: time.Second, Max: time.Hour}
	for _, c := range []struct{ p, want Policy }{
		{Policy{}, def},
		{Policy{Base: -1, Max: -1}, def},
		{Policy{Max: 50 * time.Millisecond}, Policy{Base: 50 * time.Millisecond, Max: 50 * time.Millisecond}},
		{Policy{Max: time.Minute}, Policy{Base: time.Second, Max: time.Minute}},
		{Policy{Base: time.Millisecond}, Policy{Base: time.Millisecond, Max: time.Hour}},
		{Policy{Base: 2 * time.Hour}, Policy{Base: 2 * time.Hour, Max: 2 * time.Hour}},
		{Policy{Base: time.Millisecond, Max: time.Second}, Policy{Base: time.Millisecond, Max: time.Second}},
	} {
		if got := c.p.Or(def); got != c.want {
			t.Errorf("%+v.Or(%+v) = %+v, want %+v", c.p, def, got, c.want)
		}
	}
}
