package engine

import (
	"context"
	"testing"
	"time"
)

// A loop stopped right after it started (the elector does this when it
// loses leadership at once, or at shutdown) must not race its goroutine.
func TestLoopStopRightAfterStart(t *testing.T) {
	t.Parallel()
	for range 500 {
		l := &loop{name: "test", interval: time.Hour, fn: func(context.Context) {}}
		if err := l.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		l.Stop()
		l.Stop()
	}
}
