package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/docket-run/docket"
)

func (s *Server) healthRoutes() []route {
	return []route{
		{Method: "GET", Path: "/healthz", Perm: permPublic, Handler: http.HandlerFunc(s.healthz)},
	}
}

type healthResponse struct {
	Status string `json:"status"` // "ok" or "unavailable"
	// Database is "ok" or "unreachable"; why is logged, not answered: the
	// endpoint is public and a driver's error names hosts, users and
	// databases.
	Database string `json:"database"`
	Backend  string `json:"backend"`
	// Bus is "ok", or "degraded" while events are not published: the event
	// bus is down, or the relay cannot read the outbox from the database
	// (BusDetail says which; events wait in the outbox; the API works);
	// absent without a bus.
	Bus       string `json:"bus,omitempty"`
	BusDetail string `json:"busDetail,omitempty"`
}

// healthz answers 200 while the database answers, 503 otherwise (the error
// is logged). The bus being down is reported but is not a 503: the API
// still works.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	resp := healthResponse{Status: "ok", Database: "ok", Backend: s.client.Backend()}
	status := http.StatusOK
	if err := s.client.Ping(ctx); err != nil {
		s.cfg.Logger.Warn("health check: the database is unreachable", "error", err)
		resp.Status, resp.Database, status = "unavailable", "unreachable", http.StatusServiceUnavailable
	}
	if s.cfg.BusHealth != nil {
		resp.Bus = "ok"
		if err := s.cfg.BusHealth(); err != nil {
			// The detail (addresses, server names) goes to the log, not to
			// this public endpoint.
			resp.Bus, resp.BusDetail = "degraded", "the event bus is unreachable; events wait in the outbox"
			if errors.Is(err, docket.ErrEventRelayDatabase) && !errors.Is(err, docket.ErrEventBusDown) {
				// The bus is up: the relay could not read the outbox.
				resp.BusDetail = "the event relay cannot read the outbox from the database; events wait in it"
			}
			s.cfg.Logger.Warn("health check: events are not published", "bus_detail", resp.BusDetail, "error", err)
		}
	}
	writeJSON(w, status, resp)
}
