package api

import (
	_ "embed"
	"net/http"
)

// openapiDocument describes every route of the table; openapi_test.go
// checks it both ways against Server.routes, so the two cannot drift.
//
//go:embed openapi.json
var openapiDocument []byte

func (s *Server) openapiRoutes() []route {
	return []route{
		{Method: "GET", Path: "/v1/openapi.json", Perm: permPublic, Handler: http.HandlerFunc(serveOpenAPI)},
	}
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openapiDocument)
}
