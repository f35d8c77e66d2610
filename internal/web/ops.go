package web

// opsRoutes are the operator pages beyond the first ones: live streams,
// job search and bulk actions.
func (h *Handler) opsRoutes() {
	h.mux.Handle("GET /overview/events", h.authed([]access{accessOperate}, h.overviewEvents))
	h.mux.Handle("GET /runs/{id}/events", h.authed([]access{accessOperate}, h.runEvents))
	h.mux.Handle("GET /runs/{id}/live", h.authed([]access{accessOperate}, h.runLive))
	h.mux.Handle("POST /jobs/bulk", h.authed([]access{accessOperate, accessActJobs}, h.jobsBulk))
}
