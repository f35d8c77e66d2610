package webhook

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocumentedEventTypesSubscribable: every event type of the
// catalogue in docs/events.md can be named in a subscription's
// eventTypes, and the catalogue lists every type that can (the crowd's
// unit.finalized was documented but refused: only "*" received it).
func TestDocumentedEventTypesSubscribable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/events.md")
	require.NoError(t, err)
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `docket\\.([a-z_.]+)` \\|").FindAllSubmatch(doc, -1) {
		documented = append(documented, string(m[1]))
	}
	require.NotEmpty(t, documented, "the catalogue's table")
	for _, typ := range documented {
		p := CreateParams{URL: "http://127.0.0.1:9/hook", EventTypes: []string{typ}, Secret: testSecret}
		require.NoError(t, p.Validate(), typ)
	}
	require.ElementsMatch(t, EventTypes, documented, "docs/events.md lists every type a subscription may name")
}
