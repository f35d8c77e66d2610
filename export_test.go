package docket

import (
	"context"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
)

// PutWorkflowForTest stores a definition straight through the store (the
// definitions API lives elsewhere) and returns its version.
func PutWorkflowForTest(ctx context.Context, c *Client, def *WorkflowDefinition) (int, error) {
	canon, err := flow.Canonical(def)
	if err != nil {
		return 0, err
	}
	hash, err := flow.Hash(def)
	if err != nil {
		return 0, err
	}
	v, _, err := c.store.WorkflowPut(ctx, &store.WorkflowPutParams{Name: def.Name, Definition: canon, Hash: hash, Now: c.cfg.Now()})
	if err != nil {
		return 0, err
	}
	return v.Version, nil
}
