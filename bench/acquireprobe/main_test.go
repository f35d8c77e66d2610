package main

import (
	"os"
	"strings"
	"testing"
)

// The probe's "docket" variant is a copy of the store's acquireSQL (the
// other variants change pieces of it): it must stay the statement the
// store runs. This reads the store's source, so an edit of acquireSQL or
// acquiredColumns that the copy does not follow fails here.
func TestDocketVariantIsTheStoresStatement(t *testing.T) {
	src, err := os.ReadFile("../../internal/store/postgres/job_acquire.go")
	if err != nil {
		t.Fatal(err)
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	store := norm(string(src))
	for name, piece := range map[string]string{
		"the UPDATE and its SET list": "UPDATE docket_jobs j SET" + setList,
		"the picking subquery":        "WHERE j.ctid = ANY(ARRAY(" + pick + "))",
		"the returned columns":        "acquiredColumns = `" + returning17 + "`",
	} {
		if !strings.Contains(store, norm(piece)) {
			t.Errorf("%s of the probe's docket variant is not in job_acquire.go's acquireSQL", name)
		}
	}
}
