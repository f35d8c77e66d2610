package leader_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// probe records whether it runs and how often it was started.
type probe struct {
	mu      sync.Mutex
	running bool
	starts  int
}

func (s *probe) Start(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = true
	s.starts++
	return nil
}

func (s *probe) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = false
}

func (s *probe) state() (running bool, starts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, s.starts
}

func (s *probe) isRunning() bool { r, _ := s.state(); return r }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(5 * time.Millisecond)
	}
}

func forEachBackend(t *testing.T, fn func(t *testing.T, url string, st store.Store)) {
	for _, b := range testdb.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			url := b.URL(t)
			fn(t, url, teststore.Open(t, url))
		})
	}
}

func elector(st store.Store, name, node string, ttl time.Duration, svc service.Service) *leader.Elector {
	return leader.New(leader.Config{Name: name, NodeID: node, TTL: ttl, Store: st, Services: []service.Service{svc}})
}

// TestServicesRunOnTheLeaderOnly: the services run on one node of a
// leadership at a time and move when it resigns; another leadership is
// elected apart.
func TestServicesRunOnTheLeaderOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ string, st store.Store) {
		ctx := t.Context()
		svcA, svcB, svcC := &probe{}, &probe{}, &probe{}
		a := elector(st, "relay", "node-a", 300*time.Millisecond, svcA)
		b := elector(st, "relay", "node-b", 300*time.Millisecond, svcB)
		c := elector(st, "other", "node-b", 300*time.Millisecond, svcC)
		defer b.Stop()
		defer c.Stop()

		require.NoError(t, a.Start(ctx))
		waitFor(t, "node a to lead", svcA.isRunning)
		require.True(t, a.Leading())
		require.NoError(t, b.Start(ctx))
		require.NoError(t, c.Start(ctx))
		waitFor(t, "node b to lead the other leadership", svcC.isRunning)
		require.False(t, svcB.isRunning(), "not while node a leads")
		require.False(t, b.Leading())

		a.Stop() // resigns
		running, starts := svcA.state()
		require.False(t, running, "stopped with its elector")
		require.Equal(t, 1, starts)
		require.False(t, a.Leading())
		waitFor(t, "node b to take over", svcB.isRunning)
		a.Stop() // twice is fine
	})
}

// TestStopResignsAfterStartContextEnded: Stop hands the term over at once,
// even when the context Start was given has ended (a process shutting
// down): the resign runs under Start's context without its cancellation.
// The TTL is an hour, so node b leads at its first attempt only if node a
// resigned.
func TestStopResignsAfterStartContextEnded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ string, st store.Store) {
		svcA, svcB := &probe{}, &probe{}
		a := elector(st, "resign", "node-a", time.Hour, svcA)
		b := elector(st, "resign", "node-b", time.Hour, svcB)
		defer b.Stop()

		startCtx, cancel := context.WithCancel(t.Context())
		require.NoError(t, a.Start(startCtx))
		waitFor(t, "node a to lead", svcA.isRunning)
		cancel()
		a.Stop()
		require.False(t, svcA.isRunning())

		require.NoError(t, b.Start(t.Context()))
		waitFor(t, "node b to lead at its first attempt", svcB.isRunning)
	})
}

// TestHungRenewalEndsTheTerm: a renewal that does not return (here the
// leadership row is locked by another transaction) must end this node's
// term, services stopped, rather than leave it leading past the TTL while
// another node may take over; it leads again once renewals go through.
// Before attempts had a deadline, the elector waited on the lock with its
// services running.
func TestHungRenewalEndsTheTerm(t *testing.T) {
	forEachBackend(t, func(t *testing.T, url string, st store.Store) {
		ctx := t.Context()
		svc := &probe{}
		el := elector(st, "relay", "node-a", 300*time.Millisecond, svc)
		require.NoError(t, el.Start(ctx))
		defer el.Stop()
		waitFor(t, "the node to lead", svc.isRunning)

		release := lockLeadership(t, url, "relay")
		waitFor(t, "the term to end while the renewal hangs", func() bool { return !svc.isRunning() })
		require.False(t, el.Leading())
		release()
		waitFor(t, "the node to lead again", svc.isRunning)
		_, starts := svc.state()
		require.Equal(t, 2, starts)
	})
}

// lockLeadership holds a lock that blocks every write to the leadership
// row name until release is called.
func lockLeadership(t *testing.T, url, name string) (release func()) {
	t.Helper()
	ctx := t.Context()
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		db, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE") // the database's write lock
		require.NoError(t, err)
		return func() {
			_, err := conn.ExecContext(context.Background(), "ROLLBACK")
			require.NoError(t, err)
			require.NoError(t, conn.Close())
			require.NoError(t, db.Close())
		}
	}
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	tag, err := tx.Exec(ctx, "SELECT 1 FROM docket_leader WHERE name = $1 FOR UPDATE", name)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	return func() {
		require.NoError(t, tx.Rollback(context.Background()))
		require.NoError(t, conn.Close(context.Background()))
	}
}

// failing is a service that cannot start.
type failing struct{}

func (failing) Start(context.Context) error { return errors.New("cannot start") }
func (failing) Stop()                       {}

// TestStartFailureGivesTheRowUp: a node whose services cannot start does
// not keep the term (renewing it while doing nothing would starve the
// role, as in the seed-45 chaos finding): another node takes the role.
func TestStartFailureGivesTheRowUp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ string, st store.Store) {
		ctx := t.Context()
		a := leader.New(leader.Config{Name: "relay", NodeID: "node-a", TTL: 300 * time.Millisecond, Store: st,
			Services: []service.Service{failing{}}})
		require.NoError(t, a.Start(ctx))
		defer a.Stop()
		svc := &probe{}
		b := elector(st, "relay", "node-b", 300*time.Millisecond, svc)
		require.NoError(t, b.Start(ctx))
		defer b.Stop()
		waitFor(t, "node b to take the role node a cannot run", svc.isRunning)
		require.False(t, a.Leading())
	})
}
