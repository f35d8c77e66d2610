// Package workflow advances workflow runs: it releases the steps whose
// trigger is met (creating their jobs in the same transaction), records
// the ends of step jobs and signals, and finishes runs. It also holds the
// run operations (cancel, pause, resume, retry, signal), a queue of runs to
// advance fed by job completions, and the sweeper that advances runs whose
// fast path was missed.
//
// The rules themselves (when a step runs, how states fold, what a step
// sees) are the pure functions of package flow; the expressions are
// evaluated by flow/expr. This package is where they meet the store: every
// change of a run is made by Advance inside one transaction that holds the
// run's lock, so advancements of one run never interleave, and a second
// Advance with nothing new to record is a no-op.
package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/flow/expr"
	"github.com/docket-run/docket/internal/store"
)

// compiled is one workflow version, decoded and with its expressions
// compiled; nil wf with err set when the stored definition does not
// compile (it was valid when stored, so only a change of the rules makes
// that happen: its runs fail with err). g is kept when only the
// expressions fail, so that what such a run released can be stopped by
// the graph's order; nil when the structure does not decode either.
type compiled struct {
	wf  *expr.Workflow
	g   *flow.Graph
	err error
}

type versionKey struct {
	name    string
	version int
}

// cache keeps the compiled versions. A version never changes once stored,
// so entries never go stale; there are few versions per workflow, so the
// cache is not bounded.
type cache struct {
	env *expr.Env
	mu  sync.Mutex
	m   map[versionKey]*compiled
}

func newCache() (*cache, error) {
	env, err := expr.NewEnv()
	if err != nil {
		return nil, err
	}
	return &cache{env: env, m: map[versionKey]*compiled{}}, nil
}

// get returns the compiled version, reading it through r on a miss. Only
// an error of r is returned; a definition that does not compile is a
// compiled with err.
func (c *cache) get(ctx context.Context, r interface {
	WorkflowGet(context.Context, *store.WorkflowGetParams) (*flow.Version, error)
}, name string, version int) (*compiled, error) {
	k := versionKey{name, version}
	c.mu.Lock()
	got := c.m[k]
	c.mu.Unlock()
	if got != nil {
		return got, nil
	}
	v, err := r.WorkflowGet(ctx, &store.WorkflowGetParams{Name: name, Version: version})
	if err != nil {
		return nil, fmt.Errorf("read workflow %q version %d: %w", name, version, err)
	}
	got = c.compile(v.Definition)
	if got.err != nil {
		got.err = fmt.Errorf("workflow %q version %d: %w", name, version, got.err)
	}
	c.mu.Lock()
	c.m[k] = got
	c.mu.Unlock()
	return got, nil
}

func (c *cache) compile(raw json.RawMessage) *compiled {
	def, err := flow.Decode(raw)
	if err != nil {
		return &compiled{err: err}
	}
	wf, err := c.env.Compile(def)
	if err != nil {
		g, _ := flow.NewGraph(def) // nil when the structure fails too
		return &compiled{g: g, err: err}
	}
	return &compiled{wf: wf, g: wf.Graph()}
}
