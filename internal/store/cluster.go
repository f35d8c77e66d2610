package store

import (
	"context"
	"time"
)

// ClusterStore is the cluster domain: leaderships and the registry of
// running nodes.
type ClusterStore interface {
	// LeaderAttemptElect makes p.NodeID leader until Now+TTL if there is no
	// leader, the leader's term expired, or p.NodeID already leads (renewal).
	// Reports whether p.NodeID is leader afterwards.
	LeaderAttemptElect(ctx context.Context, p *LeaderElectParams) (bool, error)
	// LeaderResign gives up leadership if p.NodeID holds it.
	LeaderResign(ctx context.Context, p *LeaderResignParams) error

	// NodeHeartbeat registers a node or refreshes its last_active.
	NodeHeartbeat(ctx context.Context, p *NodeHeartbeatParams) error
	NodeDelete(ctx context.Context, id string) error
	NodeList(ctx context.Context) ([]*Node, error)
	NodeDeleteStale(ctx context.Context, p *NodeDeleteStaleParams) (int, error)
}

// LeaderElectParams asks for (or renews) leadership.
type LeaderElectParams struct {
	Name   string // the leadership (one row each): leader.Maintenance, …
	NodeID string
	TTL    time.Duration
	Now    time.Time
}

// LeaderResignParams gives leadership up.
type LeaderResignParams struct {
	Name   string
	NodeID string
}

// NodeHeartbeatParams registers or refreshes a node.
type NodeHeartbeatParams struct {
	ID       string
	Hostname string
	PID      int
	Now      time.Time
}

// Node is a running docket process.
type Node struct {
	ID         string
	Hostname   string
	PID        int
	StartedAt  time.Time
	LastActive time.Time
}

// NodeDeleteStaleParams deletes nodes not seen since LastActiveBefore.
type NodeDeleteStaleParams struct {
	LastActiveBefore time.Time
}
