package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/docket-run/docket"
)

// workflowsData is the workflows list's: the latest version of each, by
// name, a page at a time.
type workflowsData struct {
	Workflows []*docket.WorkflowVersion
	Next      string
}

func (h *Handler) workflowsList(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("after")
	list, err := h.client.WorkflowList(r.Context(), docket.WorkflowListParams{After: after, Limit: pageSize + 1})
	if err != nil {
		h.renderFailure(w, r, "Listing workflows failed", err)
		return
	}
	d := &workflowsData{}
	if len(list) > pageSize {
		list = list[:pageSize]
		d.Next = "/workflows?after=" + url.QueryEscape(list[pageSize-1].Name)
	}
	d.Workflows = list
	h.renderPage(w, r, "workflows", "Workflows", d)
}

// workflowData is a workflow page's: one version (?version=, default the
// latest), links to every version, the definition and its DAG.
type workflowData struct {
	Version    *docket.WorkflowVersion
	Latest     int
	Versions   []int // 1 … Latest, newest first
	Definition string
	DAG        *dagChart
}

func (h *Handler) workflowDetail(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	version := 0
	if s := r.URL.Query().Get("version"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			h.renderError(w, r, http.StatusBadRequest, "version: want a version number (1 or more), not "+strconv.Quote(s))
			return
		}
		version = n
	}
	latest, err := h.client.WorkflowGet(r.Context(), name, 0)
	v := latest
	if err == nil && version != 0 && version != latest.Version {
		v, err = h.client.WorkflowGet(r.Context(), name, version)
	}
	if errors.Is(err, docket.ErrNotFound) {
		h.renderError(w, r, http.StatusNotFound, "No workflow "+strconv.Quote(name)+" (of that version).")
		return
	}
	if err != nil {
		h.renderFailure(w, r, "Reading the workflow failed", err)
		return
	}
	def, err := json.MarshalIndent(v.Definition, "", "  ")
	if err != nil {
		h.renderFailure(w, r, "Encoding the definition failed", err)
		return
	}
	d := &workflowData{Version: v, Latest: latest.Version, Definition: string(def), DAG: layoutDAG(definitionSteps(v.Definition))}
	for n := latest.Version; n >= 1; n-- {
		d.Versions = append(d.Versions, n)
	}
	h.renderPage(w, r, "workflow", "Workflow "+name, d)
}
