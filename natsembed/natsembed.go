// Package natsembed runs a NATS server with JetStream inside the process,
// reached in-process only (it listens on no port): the event bus docket
// serve uses when no external NATS is configured.
//
// It is an explicit opt-in, kept apart from package docket so that a
// program that only inserts and works jobs does not link the NATS server.
// Give a started Server to docket.EventBusConfig.Embedded:
//
//	srv, err := natsembed.Start("docket-nats")
//	defer srv.Close() // after the bus
//	bus, err := docket.OpenEventBus(ctx, docket.EventBusConfig{Embedded: srv})
package natsembed

import (
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartTimeout bounds how long the server may take to accept connections
// (it recovers its JetStream storage first).
const StartTimeout = time.Minute

// Server is a running embedded NATS server with JetStream.
type Server struct {
	dir    string
	srv    *server.Server
	unlock func()
}

// Start starts a server storing its JetStream data in dir (created if
// missing). dir is locked while the server runs: two servers on one
// storage would corrupt it, so a second Start on it fails.
func Start(dir string) (*Server, error) {
	if dir == "" {
		return nil, fmt.Errorf("embedded NATS server: a storage directory is required")
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "docket-embedded",
		DontListen: true,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		unlock()
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	s := &Server{dir: dir, srv: srv, unlock: unlock}
	srv.Start()
	if !srv.ReadyForConnections(StartTimeout) {
		s.Close()
		return nil, fmt.Errorf("embedded NATS server (storage %s) did not start within %v", dir, StartTimeout)
	}
	return s, nil
}

// InProcessConn opens a connection to the server without a socket; the
// NATS client calls it (nats.InProcessServer).
func (s *Server) InProcessConn() (net.Conn, error) { return s.srv.InProcessConn() }

// String describes the server for logs and errors.
func (s *Server) String() string { return "embedded server (storage " + s.dir + ")" }

// Close shuts the server down, waits for it, and unlocks its storage.
// Close the connections to it (the bus) first. Safe to call twice.
func (s *Server) Close() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
	if s.unlock != nil {
		s.unlock()
		s.unlock = nil
	}
}
