package web

import "time"

// opsRoutes are the operator pages beyond the first ones: live streams,
// job search and bulk actions, webhook deliveries on the dead letters
// page.
func (h *Handler) opsRoutes() {
	h.mux.Handle("GET /overview/events", h.authed([]access{accessOperate}, h.liveSlot(h.overviewEvents)))
	h.mux.Handle("GET /runs/{id}/events", h.authed([]access{accessOperate}, h.liveSlot(h.runEvents)))
	h.mux.Handle("GET /runs/{id}/live", h.authed([]access{accessOperate}, h.runLive))
	h.mux.Handle("POST /jobs/bulk", h.authed([]access{accessOperate, accessActJobs}, h.jobsBulk))
	h.mux.Handle("POST /dead/deliveries/retry", h.authed([]access{accessOperate, accessAdmin}, h.deadDeliveriesRetry))
}

// dashboardTimeout bounds the queries of one dashboard request (a context
// deadline: pgx cancels the running statement on PostgreSQL), as the
// overview and the metrics' count do.
const dashboardTimeout = 5 * time.Second
