package web

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
)

// TestWorkDisplayJSON: a text block showing an object, a list or a
// number shows the JSON as written. It showed "Tom \u0026 Jerry \u003c3"
// for "Tom & Jerry <3" (encoding/json's HTML escaping; the template
// escapes the page already).
func TestWorkDisplayJSON(t *testing.T) {
	t.Parallel()
	input := decodeInput(json.RawMessage(`{"obj": {"a": "Tom & Jerry <3", "b": [1.50, "é"]}, "list": ["<b>"], "s": "x & y"}`))
	blocks := []docket.TaskDisplay{{Kind: task.DisplayText, From: "unit.obj"}, {Kind: task.DisplayText, From: "unit.list"},
		{Kind: task.DisplayText, From: "unit.s"}}
	got := workDisplays(blocks, input)
	require.Len(t, got, 3)
	require.Equal(t, "{\n  \"a\": \"Tom & Jerry <3\",\n  \"b\": [\n    1.50,\n    \"é\"\n  ]\n}", got[0].Text)
	require.True(t, got[0].Block)
	require.Equal(t, "[\n  \"<b>\"\n]", got[1].Text)
	require.Equal(t, "x & y", got[2].Text)
}
