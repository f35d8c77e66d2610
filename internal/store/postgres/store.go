// Package postgres implements store.Store on PostgreSQL with pgx v5 and
// hand-written SQL.
//
// Every state change is one statement (CTEs carry the outbox row, the
// attempt history and the NOTIFY wakeups), so it is one transaction without a
// BEGIN/COMMIT round trip; only a large insert is a COPY plus one statement
// in a transaction. Wakeups travel through LISTEN/NOTIFY: a dedicated
// connection listens on docket_job_available (payload: queue) and
// docket_job_cancel (payload: job id) and fans out through a store.Hub.
// NOTIFY channels belong to the database, not the schema, so stores on
// different schemas of one database see each other's wakeups: spurious
// wakeups, which subscribers tolerate by design.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/docket-run/docket/internal/store"
)

// NOTIFY channels.
const (
	channelJobAvailable = "docket_job_available"
	channelJobCancel    = "docket_job_cancel"
)

// listenerReadyTimeout bounds how long the first Subscribe waits for the
// listener connection to be LISTENing, so that wakeups committed after
// Subscribe returns are not missed.
const listenerReadyTimeout = 5 * time.Second

// Listener reconnect backoff.
const (
	listenerBackoffMin = 100 * time.Millisecond
	listenerBackoffMax = 5 * time.Second
)

// Listener liveness: after listenerPingInterval without a notification the
// listener pings its connection, and reconnects when no answer comes within
// listenerPingTimeout. A half-open connection (the server or a middlebox
// gone without a FIN or RST) would otherwise block the wait forever, and
// every wakeup with it.
const (
	listenerPingInterval = 30 * time.Second
	listenerPingTimeout  = 10 * time.Second
)

var _ store.Store = (*Store)(nil)

// Store is the PostgreSQL backend.
type Store struct {
	pool *pgxpool.Pool
	// baseCtx carries Open's values without its cancellation: the listener
	// lives as long as the store, until Close.
	baseCtx context.Context
	// agingMicros is Options.PriorityAging in microseconds, the unit the
	// SQL uses to compute sort_at.
	agingMicros int64

	hub store.Hub

	mu            sync.Mutex
	closed        bool
	listenStarted bool
	listenReady   chan struct{} // closed once the first LISTEN succeeded or failed
	listenCancel  context.CancelFunc
	listenDone    chan struct{}
	listenPID     uint32 // backend pid of the listener connection, 0 when down
	// pingInterval and pingTimeout are listenerPingInterval and
	// listenerPingTimeout; tests shorten them.
	pingInterval, pingTimeout time.Duration

	analyze analyzeState // AnalyzeGrown's failed tables

	takes  takeGroup  // takes waiting for a batch (crowd_take_group.go)
	judges judgeGroup // judgments waiting for a batch (crowd_judgment_group.go)
}

// Open connects to the database at url (postgres://...). Runtime parameters
// in the URL, such as search_path, apply to every connection, so one database
// can hold several docket schemas; pool settings such as pool_max_conns are
// honoured too. Open does not migrate.
func Open(ctx context.Context, url string, opts store.Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if err := checkExecMode(cfg.ConnConfig.DefaultQueryExecMode); err != nil {
		return nil, err
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		registerUUID(c.TypeMap())
		registerBinaryArrays(c.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	opts = opts.WithDefaults()
	return &Store{
		baseCtx:      context.WithoutCancel(ctx),
		pool:         pool,
		agingMicros:  opts.PriorityAging.Microseconds(),
		pingInterval: listenerPingInterval,
		pingTimeout:  listenerPingTimeout,
	}, nil
}

// checkExecMode refuses the query modes in which pgx does not ask the
// server for a statement's parameter types (default_query_exec_mode=exec
// or simple_protocol in the URL): the store's statements pass JSON as
// bytes, arrays and values whose type only the server's description
// gives, so in those modes some of them would fail at run time (a bulk
// insert's outbox event first), after the process has started. The three
// modes that describe work, the conformance suite having run in
// describe_exec too; describe_exec is the one for a pooler that cannot
// keep prepared statements (PgBouncer's transaction mode before 1.21).
func checkExecMode(m pgx.QueryExecMode) error {
	name := map[pgx.QueryExecMode]string{pgx.QueryExecModeExec: "exec", pgx.QueryExecModeSimpleProtocol: "simple_protocol"}[m]
	if name == "" {
		return nil
	}
	return fmt.Errorf("database url: default_query_exec_mode=%s is not supported: docket's statements need the server to describe their parameters; "+
		"use cache_statement (the default), cache_describe, or describe_exec (no prepared statements kept, for a transaction pooler)", name)
}

// Pool is the connection pool, for tests and for callers that begin their
// own transactions for JobInsertManyTx.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Backend implements store.Store.
func (s *Store) Backend() string { return "postgres" }

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// Close stops the listener (waiting for it) and closes the pool. It is safe
// to call more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	cancel, done := s.listenCancel, s.listenDone
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	s.pool.Close()
	return nil
}

// Subscribe implements store.Store. The first call starts the listener
// connection and waits (briefly) until it is LISTENing.
func (s *Store) Subscribe(topic store.Topic) (<-chan string, func()) {
	ch, cancel := s.hub.Subscribe(topic)
	if ready := s.startListener(); ready != nil {
		select {
		case <-ready:
		case <-time.After(listenerReadyTimeout):
		}
	}
	return ch, cancel
}

// startListener starts the listener goroutine once and returns the channel
// closed when it first got ready; nil when the store is closed.
func (s *Store) startListener() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if !s.listenStarted {
		s.listenStarted = true
		ctx, cancel := context.WithCancel(s.baseCtx)
		s.listenCancel = cancel
		s.listenReady = make(chan struct{})
		s.listenDone = make(chan struct{})
		go s.listen(ctx)
	}
	return s.listenReady
}

// listen keeps a dedicated connection LISTENing and publishes notifications
// to the hub until ctx ends. After a reconnect it publishes "" on every topic:
// wakeups may have been missed while it was down.
func (s *Store) listen(ctx context.Context) {
	defer close(s.listenDone)
	var readyOnce sync.Once
	ready := func() { readyOnce.Do(func() { close(s.listenReady) }) }
	defer ready()

	backoff := listenerBackoffMin
	for first := true; ; first = false {
		// A failed or broken connection is retried with backoff: there is
		// no caller to report it to, and subscribers poll anyway.
		if conn, err := s.listenConnect(ctx); err == nil {
			s.setListenerPID(conn.PgConn().PID())
			ready()
			if !first {
				s.hub.Publish(store.TopicJobAvailable, "")
				s.hub.Publish(store.TopicJobCancel, "")
				s.hub.Publish(store.TopicOutboxPublished, "")
			}
			backoff = listenerBackoffMin
			s.receive(ctx, conn)
			s.setListenerPID(0)
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
		}
		ready()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, listenerBackoffMax)
	}
}

func (s *Store) setListenerPID(pid uint32) {
	s.mu.Lock()
	s.listenPID = pid
	s.mu.Unlock()
}

// listenerPID is the listener connection's backend pid (0 when down).
func (s *Store) listenerPID() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listenPID
}

// listenConnect opens the listener connection (outside the pool) and
// LISTENs on every channel.
func (s *Store) listenConnect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("connect listener: %w", err)
	}
	for _, ch := range []string{channelJobAvailable, channelJobCancel, channelOutboxPublished} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("listen on %s: %w", ch, err)
		}
	}
	return conn, nil
}

// receive publishes notifications until the connection fails or ctx ends.
// A connection quiet for pingInterval is pinged; one that does not answer
// within pingTimeout counts as failed.
func (s *Store) receive(ctx context.Context, conn *pgx.Conn) {
	for {
		waitCtx, cancel := context.WithTimeout(ctx, s.pingInterval)
		n, err := conn.WaitForNotification(waitCtx)
		quiet := waitCtx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil {
			if !quiet || !s.pingListener(ctx, conn) {
				return
			}
			continue
		}
		switch n.Channel {
		case channelJobAvailable:
			s.hub.Publish(store.TopicJobAvailable, n.Payload)
		case channelJobCancel:
			s.hub.Publish(store.TopicJobCancel, n.Payload)
		case channelOutboxPublished:
			s.hub.Publish(store.TopicOutboxPublished, n.Payload)
		}
	}
}

// pingListener reports whether the listener connection answers a ping
// within pingTimeout.
func (s *Store) pingListener(ctx context.Context, conn *pgx.Conn) bool {
	pingCtx, cancel := context.WithTimeout(ctx, s.pingTimeout)
	defer cancel()
	return conn.Ping(pingCtx) == nil
}

// notFound translates pgx.ErrNoRows into store.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// limitOrNull maps a non-positive limit to NULL (LIMIT NULL = no limit).
func limitOrNull(n int) *int {
	if n <= 0 {
		return nil
	}
	return &n
}
