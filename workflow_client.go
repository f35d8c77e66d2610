package docket

import (
	"context"
	"fmt"
	"time"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
)

// WorkflowVersion is one stored version of a workflow definition.
type WorkflowVersion struct {
	Name string
	// Version is 1 for the first definition stored under Name and one more
	// for each changed definition after it.
	Version int
	// Hash is the content hash of the definition (WorkflowHash),
	// "sha256:<hex>".
	Hash string
	// Definition is the definition in canonical form: steps and `after`
	// lists sorted by name, defaults dropped (docs/workflows.md, "Versions
	// and the content hash"). It behaves as the definition that was put.
	Definition *WorkflowDefinition
	CreatedAt  time.Time
}

// WorkflowPut stores def as the latest version of the workflow def.Name.
// When its content (WorkflowHash) is that of the latest version, nothing is
// written and that version is returned with created = false; otherwise a
// new version is stored (1 for a new workflow) and created is true.
//
// def is validated first, structure and CEL expressions alike
// (ValidateWorkflow, the same check as PUT /v1/workflows/{name}): the error
// is a *WorkflowValidationError naming every bad field, and nothing is
// stored.
func (c *Client) WorkflowPut(ctx context.Context, def *WorkflowDefinition) (v *WorkflowVersion, created bool, err error) {
	if err := ValidateWorkflow(def); err != nil {
		return nil, false, err
	}
	canon, err := flow.Canonical(def)
	if err != nil {
		return nil, false, fmt.Errorf("put workflow %q: %w", def.Name, err)
	}
	hash, err := flow.Hash(def)
	if err != nil {
		return nil, false, fmt.Errorf("put workflow %q: %w", def.Name, err)
	}
	stored, created, err := c.store.WorkflowPut(ctx, &store.WorkflowPutParams{
		Name: def.Name, Definition: canon, Hash: hash, Now: c.cfg.Now(),
	})
	if err != nil {
		return nil, false, err
	}
	v, err = workflowVersionOf(stored)
	if err != nil {
		return nil, false, err
	}
	return v, created, nil
}

// WorkflowGet reads version of the workflow name; version 0 reads the
// latest. ErrNotFound when there is no such workflow or version.
func (c *Client) WorkflowGet(ctx context.Context, name string, version int) (*WorkflowVersion, error) {
	if version < 0 {
		return nil, fmt.Errorf("get workflow %q: version %d: want 0 (the latest) or more", name, version)
	}
	stored, err := c.store.WorkflowGet(ctx, &store.WorkflowGetParams{Name: name, Version: version})
	if err != nil {
		return nil, fieldErrors(err)
	}
	return workflowVersionOf(stored)
}

// WorkflowListParams pages through WorkflowList.
type WorkflowListParams struct {
	// After is the cursor: only workflows whose name sorts after it (the
	// previous page's last name). "" starts at the first.
	After string
	// Limit; default 100, at most 1000.
	Limit int
}

// WorkflowList lists the latest version of each workflow, by name.
func (c *Client) WorkflowList(ctx context.Context, p WorkflowListParams) ([]*WorkflowVersion, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	p.Limit = min(p.Limit, 1000)
	rows, err := c.store.WorkflowList(ctx, &store.WorkflowListParams{AfterName: p.After, Limit: p.Limit})
	if err != nil {
		return nil, fieldErrors(err)
	}
	out := make([]*WorkflowVersion, len(rows))
	for i, row := range rows {
		if out[i], err = workflowVersionOf(row); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func workflowVersionOf(v *flow.Version) (*WorkflowVersion, error) {
	def, err := flow.Decode(v.Definition)
	if err != nil {
		return nil, fmt.Errorf("workflow %q version %d: the stored definition does not decode: %w", v.Name, v.Version, err)
	}
	return &WorkflowVersion{Name: v.Name, Version: v.Version, Hash: v.Hash, Definition: def, CreatedAt: v.CreatedAt}, nil
}
