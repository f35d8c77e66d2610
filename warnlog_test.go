package docket

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// WarnLog is a slog.Handler for tests (this package's and docket_test's)
// that keeps what a client and its worker log at Warn and above, each
// record as its message and attributes.
type WarnLog struct {
	mu   sync.Mutex
	msgs []string
}

// Messages returns what was logged so far.
func (l *WarnLog) Messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

func (l *WarnLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *WarnLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.msgs = append(l.msgs, b.String())
	l.mu.Unlock()
	return nil
}
func (l *WarnLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *WarnLog) WithGroup(string) slog.Handler      { return l }
