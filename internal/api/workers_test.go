package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestWorkerStates: workerID reads a contributor it does not know on its
// own, then remembers them; once what it knows is older than
// workerStateTTL, one read of the states of every contributor asked for
// since serves them all — however many requests wait for it — and a ban
// made elsewhere (not through this server) is seen then; a change through
// this server (forgetWorker) is seen at once.
func TestWorkerStates(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := t.Context()
		client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		s := New(Config{Client: client})
		var (
			ids  []uuid.UUID
			ctxs []context.Context
		)
		for i := range 5 {
			c, err := client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: fmt.Sprint("w", i), Name: "W"})
			require.NoError(t, err)
			ids = append(ids, c.ID)
			ctxs = append(ctxs, context.WithValue(ctx, principalKey{}, &docket.APIKey{Role: docket.RoleContributor, ContributorID: c.ID}))
		}
		reads := func() (all, one int) {
			s.workers.mu.Lock()
			defer s.workers.mu.Unlock()
			return s.workers.readsOfAll, s.workers.readsOfOne
		}
		readAt := func(at time.Time) {
			s.workers.mu.Lock()
			s.workers.asOf = at
			s.workers.mu.Unlock()
		}
		stale := func() { readAt(time.Now().Add(-workerStateTTL)) }
		work := func(i int) error { // (no require: it runs on other goroutines too)
			id, err := s.workerID(ctxs[i])
			if err == nil && id != ids[i] {
				return fmt.Errorf("contributor %s answered for %s", id, ids[i])
			}
			return err
		}
		for i := range ids {
			require.NoError(t, work(i))
		}
		all, one := reads()
		require.Equal(t, 0, all)
		require.Equal(t, len(ids), one, "each new contributor read on its own")

		// Stale: 50 requests at once wait for one read of all.
		stale()
		var wg sync.WaitGroup
		errs := make([]error, 50)
		for n := range errs {
			wg.Go(func() { errs[n] = work(n % len(ids)) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		all, one = reads()
		require.Equal(t, 1, all, "one read for every contributor")
		require.Equal(t, len(ids), one)

		// A ban made elsewhere is seen once what this server knows is stale.
		banned := docket.ContributorBanned
		_, err = client.ContributorUpdate(ctx, ids[2], docket.ContributorUpdateParams{State: &banned})
		require.NoError(t, err)
		readAt(time.Now()) // what it knows is fresh, however long the above took
		require.NoError(t, work(2), "within the TTL: what the server knew")
		stale()
		require.NoError(t, work(0))
		err = work(2)
		require.Error(t, err)
		p := problemFor(err)
		require.Equal(t, http.StatusForbidden, p.Status)
		require.Contains(t, p.Detail, "banned")
		all, _ = reads()
		require.Equal(t, 2, all)

		// A change through this server is seen at once: the contributor
		// is read on its own at their next request.
		active := docket.ContributorActive
		_, err = client.ContributorUpdate(ctx, ids[2], docket.ContributorUpdateParams{State: &active})
		require.NoError(t, err)
		s.forgetWorker(ids[2])
		require.NoError(t, work(2))
		_, one = reads()
		require.Equal(t, len(ids)+1, one)

		// A contributor asked for in no request since the last read of all
		// is not read again, nor remembered.
		stale()
		require.NoError(t, work(0))
		s.workers.mu.Lock()
		_, kept := s.workers.m[ids[4]]
		s.workers.mu.Unlock()
		require.False(t, kept)

		// A request waiting for a read of all that does not end stops
		// with its own context.
		stale()
		s.workers.mu.Lock()
		hung := &workerRefresh{done: make(chan struct{})}
		s.workers.reading = hung
		s.workers.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctxs[0], 50*time.Millisecond)
		defer cancel()
		_, err = s.workerID(wctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		s.workers.mu.Lock()
		s.workers.reading = nil
		s.workers.mu.Unlock()
		close(hung.done)
	})
}

// TestTakeReadsNewWorker: a contributor's first take is the read of them
// (its statement requires them active): a new contributor who takes is
// not read on their own, and is known afterwards, as of their take (their
// submit reads nothing either: what the server knows is no older than
// that, so no read of all yet); one the take refuses is read then — banned, the answer
// is the ban's 403, as it was before any take, and they are known banned;
// not banned, the take's own answer.
func TestTakeReadsNewWorker(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := t.Context()
		client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		s := New(Config{Client: client})
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		cb := &crowdBundle{bundle: &bundle{client: client, server: srv, keys: map[docket.Role]string{}}}
		secret, _, err := client.CreateAPIKey(ctx, "admin", docket.RoleAdmin)
		require.NoError(t, err)
		cb.keys[docket.RoleAdmin] = secret
		pool := cb.newPool(t, "label", 3, sameProduct)
		pid := pool.ID.String()
		known := func(w worker) (banned, ok bool) {
			s.workers.mu.Lock()
			defer s.workers.mu.Unlock()
			e, ok := s.workers.m[uuid.MustParse(w.id)]
			if !ok {
				return false, false
			}
			return e.banned, true
		}
		readsOfOne := func() int {
			s.workers.mu.Lock()
			defer s.workers.mu.Unlock()
			return s.workers.readsOfOne
		}
		readsOfAll := func() int {
			s.workers.mu.Lock()
			defer s.workers.mu.Unlock()
			return s.workers.readsOfAll
		}

		w := cb.newWorker(t, "w", "en")
		_, ok := known(w)
		require.False(t, ok)
		before := time.Now()
		taken, r := cb.take(t, w, pid)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		require.Zero(t, readsOfOne(), "the take was the read")
		s.workers.mu.Lock()
		asOf := s.workers.asOf
		s.workers.mu.Unlock()
		require.False(t, asOf.Before(before), "known as of the take")
		banned, ok := known(w)
		require.True(t, ok)
		require.False(t, banned)
		r = cb.as(t, w.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": taken.AssignmentID, "data": map[string]any{"same": "yes"}})
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		require.Zero(t, readsOfOne())
		// No read of all: what the server knows is as of the take, younger
		// than workerStateTTL at the submit — when the take and the submit
		// took less than that (a loaded machine may be slower: then a read
		// of all is due, and the check says nothing; asOf above is the
		// check that does not depend on the suite's speed).
		if time.Since(before) < workerStateTTL {
			require.Zero(t, readsOfAll(), "what the server knows is fresh")
		} else {
			t.Logf("take and submit took %s, longer than workerStateTTL: the read of all is not checked", time.Since(before))
		}

		// Banned elsewhere before their first request: the take refuses
		// them, and the answer is the ban.
		b := cb.newWorker(t, "b", "en")
		bannedState := docket.ContributorBanned
		_, err = client.ContributorUpdate(ctx, uuid.MustParse(b.id), docket.ContributorUpdateParams{State: &bannedState})
		require.NoError(t, err)
		p := cb.as(t, b.secret, "POST", "/v1/assignments", map[string]any{"poolId": pid}).Problem(t, http.StatusForbidden)
		require.Contains(t, p.Detail, "banned")
		require.Equal(t, 1, readsOfOne())
		banned, ok = known(b)
		require.True(t, ok)
		require.True(t, banned, "known banned")
		p = cb.as(t, b.secret, "POST", "/v1/assignments", map[string]any{"poolId": pid}).Problem(t, http.StatusForbidden)
		require.Contains(t, p.Detail, "banned")
		require.Equal(t, 1, readsOfOne(), "not read again")

		// Refused for another reason (no skill the pool needs): the take's
		// answer, and known not banned.
		n := cb.newWorker(t, "n", "fr")
		r = cb.as(t, n.secret, "POST", "/v1/assignments", map[string]any{"poolId": pid})
		require.Equal(t, http.StatusForbidden, r.Status, string(r.Body))
		require.NotContains(t, string(r.Body), "banned")
		require.Equal(t, 2, readsOfOne())
		banned, ok = known(n)
		require.True(t, ok)
		require.False(t, banned)
	})
}
