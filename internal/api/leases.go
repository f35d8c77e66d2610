package api

func (s *Server) leaseRoutes() []route { return nil }
