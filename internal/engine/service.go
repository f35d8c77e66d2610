// Package engine runs jobs: producers acquire leases, executors run handlers,
// the completer writes results in batches, and the leader's maintenance
// services rescue expired leases, schedule retries and prune old jobs.
package engine

import "github.com/docket-run/docket/internal/service"

// Service is the lifecycle of the engine's background services
// (internal/service).
type Service = service.Service
