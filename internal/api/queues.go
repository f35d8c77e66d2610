package api

func (s *Server) queueRoutes() []route { return nil }
