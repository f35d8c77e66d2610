package service

import (
	"context"
	"testing"
	"time"
)

// A loop stopped right after it started (an elector does this when it
// loses leadership at once, or at shutdown) must not race its goroutine.
func TestLoopStopRightAfterStart(t *testing.T) {
	t.Parallel()
	for range 500 {
		l := &Loop{Name: "test", Interval: time.Hour, Fn: func(context.Context) {}}
		if err := l.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !l.Running() {
			t.Fatal("not running after Start")
		}
		l.Stop()
		l.Stop()
		if l.Running() {
			t.Fatal("running after Stop")
		}
	}
}
