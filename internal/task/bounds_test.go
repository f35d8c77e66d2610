package task

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/flow"
)

// A human step's overrides are bounded as a template's settings are.
func TestOverrideBoundsAgree(t *testing.T) {
	require.Equal(t, MaxJudgmentsPerUnit, flow.OverrideMaxJudgments)
	require.Equal(t, MinAssignmentSeconds, flow.OverrideMinAssignmentSeconds)
	require.Equal(t, MaxAssignmentSeconds, flow.OverrideMaxAssignmentSeconds)
	require.Equal(t, MaxTags, flow.OverrideMaxTags)
	require.Equal(t, MaxTokenLen, flow.OverrideMaxTagLen)
}
