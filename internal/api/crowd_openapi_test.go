package api

import (
	"reflect"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
)

// TestOpenAPICrowdSchemas checks that each schema of human work has
// exactly the JSON fields of the Go type the handlers decode or encode
// (TestOpenAPISchemasMatchTypes does the same for the others).
func TestOpenAPICrowdSchemas(t *testing.T) {
	t.Parallel()
	_, raw := parseOpenAPI(t, openapiDocument)
	for schema, v := range map[string]any{
		"TaskTemplate":          docket.TaskTemplate{},
		"TaskVersion":           taskView{},
		"TaskList":              tasksResponse{},
		"ContributorRequest":    createContributorRequest{},
		"ContributorPatch":      patchContributorRequest{},
		"Contributor":           contributorView{},
		"ContributorList":       contributorsResponse{},
		"ContributorKeyRequest": createKeyRequest{},
		"ContributorKey":        contributorKeyView{},
		"PoolCounts":            poolCountsView{},
		"Pool":                  poolView{},
		"PoolList":              poolsResponse{},
		"GoldenRequest":         goldenRequest{},
		"Unit":                  unitView{},
		"UnitList":              unitsResponse{},
		"UnitResult":            unitResultView{},
		"MyPool":                myPoolView{},
		"MyPoolList":            myPoolsResponse{},
		"TakeRequest":           takeRequest{},
		"TakenAssignment":       takeResponse{},
		"Assignment":            assignmentView{},
		"ExtendRequest":         extendRequest{},
		"JudgmentRequest":       judgmentRequest{},
		"JudgmentAccepted":      judgmentResponse{},
		"TestResult":            testResultView{},
	} {
		s := resolveRef(t, raw, "#/components/schemas/"+schema).(map[string]any)
		props, _ := s["properties"].(map[string]any)
		var documented []string
		for name := range props {
			documented = append(documented, name)
		}
		sort.Strings(documented)
		require.Equal(t, jsonFields(reflect.TypeOf(v)), documented, "schema %s against %T", schema, v)
	}
}
