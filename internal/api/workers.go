package api

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// workerStateTTL is how long workerID trusts a contributor's state read
// earlier. A ban through this server drops the entry at once
// (patchContributor); a ban through another server is seen within the TTL,
// and a take is refused by the database at once anyway.
const workerStateTTL = 2 * time.Second

// workerCache remembers contributors' states for workerID.
type workerCache struct {
	mu sync.Mutex
	m  map[uuid.UUID]workerEntry
}

type workerEntry struct {
	banned  bool
	expires time.Time
}

// workerID is worker for the hot path (take, submit): the contributor of
// the key, refused when banned, without reading the contributor on every
// request — the take and the judgment statements check what they need of
// them (that they exist, are active, may work on the pool, hold the
// assignment) themselves.
func (s *Server) workerID(ctx context.Context) (uuid.UUID, error) {
	k := principal(ctx)
	if k == nil || k.ContributorID == uuid.Nil {
		return uuid.Nil, forbidden("this endpoint is for contributor keys")
	}
	now := time.Now()
	s.workers.mu.Lock()
	e, ok := s.workers.m[k.ContributorID]
	s.workers.mu.Unlock()
	if ok && now.Before(e.expires) {
		if e.banned {
			return s.workerRefused(ctx)
		}
		return k.ContributorID, nil
	}
	c, err := s.worker(ctx)
	if err != nil {
		if c, gerr := s.me(ctx); gerr == nil && c.State == docket.ContributorBanned {
			s.rememberWorker(c.ID, true, now)
		}
		return uuid.Nil, err
	}
	s.rememberWorker(c.ID, false, now)
	return c.ID, nil
}

// workerRefused answers as worker does for a banned contributor.
func (s *Server) workerRefused(ctx context.Context) (uuid.UUID, error) {
	_, err := s.worker(ctx)
	if err == nil {
		return uuid.Nil, forbidden("you are banned: you may take, heartbeat, extend or submit no assignment")
	}
	return uuid.Nil, err
}

func (s *Server) rememberWorker(id uuid.UUID, banned bool, now time.Time) {
	s.workers.mu.Lock()
	if s.workers.m == nil || len(s.workers.m) > 100_000 {
		s.workers.m = map[uuid.UUID]workerEntry{}
	}
	s.workers.m[id] = workerEntry{banned: banned, expires: now.Add(workerStateTTL)}
	s.workers.mu.Unlock()
}

// forgetWorker drops what workerID knows of a contributor whose state
// changed through this server.
func (s *Server) forgetWorker(id uuid.UUID) {
	s.workers.mu.Lock()
	delete(s.workers.m, id)
	s.workers.mu.Unlock()
}
