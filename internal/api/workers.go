package api

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// workerStateTTL is how old what workerID knows of a contributor's state
// may be. A ban through this server drops what it knows at once
// (patchContributor); a ban through another server is seen within the
// TTL, and a take is refused by the database at once anyway.
const workerStateTTL = 2 * time.Second

// workerReadTimeout bounds one read of the remembered contributors'
// states, which the requests that find them stale wait for.
const workerReadTimeout = 5 * time.Second

// workerCacheMax bounds the contributors a workerCache remembers.
const workerCacheMax = 100_000

// workerCache remembers contributors' states for workerID: those of the
// contributors seen, as of one read that began at asOf. Once that read is
// older than workerStateTTL, the next request reads the states of every
// contributor asked for since, in one query (ContributorStates), and the
// requests that need them wait for it: one read per server every 2 s,
// not one per contributor. A contributor not known yet is read on its own
// (ContributorGet, as worker does), but at a take, which is that read
// (workerIDOr).
type workerCache struct {
	mu      sync.Mutex
	m       map[uuid.UUID]*workerEntry
	asOf    time.Time
	gen     uint64         // moves on each change: a read begun before a change is not kept
	reading *workerRefresh // the read in flight, nil when none
	// reads of all (refreshWorkers) and of one contributor (workerRead),
	// for tests
	readsOfAll, readsOfOne int
}

type workerEntry struct {
	banned bool
	used   bool // asked for since the last read of all: read again by the next
}

// workerRefresh is one read of the remembered contributors' states.
type workerRefresh struct {
	done chan struct{} // closed when it ended
	err  error
}

// workerID is worker for the hot path (take, submit): the contributor of
// the key, refused when banned, without reading the contributor on every
// request — the take and the judgment statements check what they need of
// them (that they exist, are active, may work on the pool, hold the
// assignment) themselves.
func (s *Server) workerID(ctx context.Context) (uuid.UUID, error) {
	id, _, err := s.workerIDOr(ctx, false)
	return id, err
}

// unknownWorker is what workerIDOr answers for a contributor it does not
// know yet, when asked not to read them: the caller proves them active
// itself (known) or reads them (refused).
type unknownWorker struct {
	gen   uint64    // what the contributors known were at, before the caller's proof
	start time.Time // when the proof began
}

// known remembers the contributor as active: the caller's statement, begun
// after u was made, found them active (a take requires k.state =
// 'active'). Not kept when anything changed since (a ban through this
// server, a read of all).
func (s *Server) known(u *unknownWorker, id uuid.UUID) {
	if u != nil {
		s.rememberWorker(id, false, u.gen, u.start)
	}
}

// refused answers, after the caller's proof failed with err, as worker
// does when the contributor is banned or gone (and remembers a ban), or
// err.
func (s *Server) refused(ctx context.Context, u *unknownWorker, err error) error {
	if u == nil {
		return err
	}
	if _, rerr := s.workerRead(ctx, u.gen, time.Now()); rerr != nil {
		return rerr
	}
	return err
}

// workerIDOr is workerID; with lazy, a contributor it does not know yet
// is not read but answered with an unknownWorker: the take, whose
// statement refuses a contributor who is not active, is that read (known
// when it took, refused when it did not), one round trip less for each
// new contributor's first take.
func (s *Server) workerIDOr(ctx context.Context, lazy bool) (uuid.UUID, *unknownWorker, error) {
	k := principal(ctx)
	if k == nil || k.ContributorID == uuid.Nil {
		return uuid.Nil, nil, forbidden("this endpoint is for contributor keys")
	}
	w := &s.workers
	for {
		w.mu.Lock()
		e, ok := w.m[k.ContributorID]
		if !ok {
			gen := w.gen
			w.mu.Unlock()
			start := time.Now()
			if lazy {
				return k.ContributorID, &unknownWorker{gen: gen, start: start}, nil
			}
			id, err := s.workerRead(ctx, gen, start)
			return id, nil, err
		}
		if time.Since(w.asOf) < workerStateTTL {
			e.used = true
			banned := e.banned
			w.mu.Unlock()
			if banned {
				id, err := s.workerRefused(ctx)
				return id, nil, err
			}
			return k.ContributorID, nil, nil
		}
		if rf := w.reading; rf != nil {
			w.mu.Unlock()
			select {
			case <-rf.done:
			case <-ctx.Done():
				return uuid.Nil, nil, ctx.Err()
			}
			if rf.err != nil {
				return uuid.Nil, nil, rf.err
			}
			continue
		}
		if err := s.refreshWorkers(ctx, k.ContributorID); err != nil {
			return uuid.Nil, nil, err
		}
	}
}

// refreshWorkers reads the states of the contributors asked for since the
// last read, and me, and makes them what workerID knows. Called with
// s.workers.mu held; returns with it released.
func (s *Server) refreshWorkers(ctx context.Context, me uuid.UUID) error {
	w := &s.workers
	rf := &workerRefresh{done: make(chan struct{})}
	w.reading = rf
	w.readsOfAll++
	gen := w.gen
	ids := make([]uuid.UUID, 0, len(w.m))
	for id, e := range w.m {
		if e.used || id == me {
			ids = append(ids, id)
		}
	}
	w.mu.Unlock()
	start := time.Now()
	// not canceled with this request: other requests wait for the read;
	// bounded, so a read that hangs (a lost connection) does not hold
	// them all (each waiter also stops with its own request)
	rctx, cancel := context.WithTimeout(storeContext(ctx), workerReadTimeout)
	states, err := s.client.ContributorStates(rctx, ids)
	cancel()
	w.mu.Lock()
	w.reading = nil
	if err == nil && w.gen == gen {
		m := make(map[uuid.UUID]*workerEntry, len(states))
		for id, st := range states {
			m[id] = &workerEntry{banned: st == docket.ContributorBanned}
		}
		w.m, w.asOf = m, start
		w.gen++ // a single read begun before this one must not add what it saw
	}
	w.mu.Unlock()
	rf.err = err
	close(rf.done)
	return err
}

// workerRead reads a contributor workerID does not know yet.
func (s *Server) workerRead(ctx context.Context, gen uint64, start time.Time) (uuid.UUID, error) {
	s.workers.mu.Lock()
	s.workers.readsOfOne++
	s.workers.mu.Unlock()
	c, err := s.worker(ctx)
	if err != nil {
		if c, gerr := s.me(ctx); gerr == nil && c.State == docket.ContributorBanned {
			s.rememberWorker(c.ID, true, gen, start)
		}
		return uuid.Nil, err
	}
	s.rememberWorker(c.ID, false, gen, start)
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

// rememberWorker adds what a read of one contributor begun at gen (at
// time start) saw, unless something changed since. Into an empty cache,
// it is as of start: what the cache knows is as old as its oldest read,
// and with none older the first read of all comes workerStateTTL after
// this one, not at the next request (many contributors arriving at once
// would otherwise start one at once, and the reads of one contributor
// it overlapped would not be kept: their next request reads them again).
func (s *Server) rememberWorker(id uuid.UUID, banned bool, gen uint64, start time.Time) {
	w := &s.workers
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gen != gen {
		return
	}
	if w.m == nil || len(w.m) >= workerCacheMax {
		w.m = map[uuid.UUID]*workerEntry{}
	}
	if len(w.m) == 0 || start.Before(w.asOf) {
		// as old as its oldest read: a read begun before the one that
		// set asOf may end after it
		w.asOf = start
	}
	w.m[id] = &workerEntry{banned: banned, used: true}
}

// forgetWorker drops what workerID knows of a contributor whose state
// changed through this server; a read of states in flight is not kept.
func (s *Server) forgetWorker(id uuid.UUID) {
	s.workers.mu.Lock()
	delete(s.workers.m, id)
	s.workers.gen++
	s.workers.mu.Unlock()
}
