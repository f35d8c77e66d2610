package api

import (
	"context"
	"net/http"
	"time"
)

func (s *Server) healthRoutes() []route {
	return []route{
		{Method: "GET", Path: "/healthz", Perm: permPublic, Handler: http.HandlerFunc(s.healthz)},
	}
}

type healthResponse struct {
	Status   string `json:"status"` // "ok" or "unavailable"
	Database string `json:"database"`
	Backend  string `json:"backend"`
}

// healthz answers 200 while the database answers, 503 otherwise.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	resp := healthResponse{Status: "ok", Database: "ok", Backend: s.client.Backend()}
	status := http.StatusOK
	if err := s.client.Ping(ctx); err != nil {
		resp.Status, resp.Database, status = "unavailable", "unreachable: "+err.Error(), http.StatusServiceUnavailable
	}
	writeJSON(w, status, resp)
}
