package task

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The examples of docs/human-work.md are what the code does: the template
// parses, the judgment validates, and the invalid examples give exactly the
// errors the page shows.
func TestDocsHumanWork(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/human-work.md")
	require.NoError(t, err)
	blocks := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)```json ([a-z-]+)\n(.*?)```").FindAllStringSubmatch(string(page), -1) {
		require.NotContains(t, blocks, m[1], "two blocks tagged %s", m[1])
		blocks[m[1]] = m[2]
	}
	for _, tag := range []string{"template", "judgment", "invalid-template", "template-errors", "invalid-judgment", "judgment-errors"} {
		require.Contains(t, blocks, tag)
	}
	// The page's example is DESIGN §6's, the one the tests use.
	require.JSONEq(t, string(readExample(t)), blocks["template"])

	tpl, err := Parse([]byte(blocks["template"]))
	require.NoError(t, err)
	c, err := Compile(tpl)
	require.NoError(t, err)
	require.NoError(t, c.ValidateJudgment([]byte(blocks["judgment"])))

	errorsOf := func(err error) string {
		var ve *ValidationError
		require.ErrorAs(t, err, &ve)
		b, err := json.Marshal(ve.Errors)
		require.NoError(t, err)
		return string(b)
	}
	_, err = Parse([]byte(blocks["invalid-template"]))
	require.JSONEq(t, blocks["template-errors"], errorsOf(err))
	require.JSONEq(t, blocks["judgment-errors"], errorsOf(c.ValidateJudgment([]byte(blocks["invalid-judgment"]))))
}
