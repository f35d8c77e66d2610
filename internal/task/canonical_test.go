package task

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func hashOf(t *testing.T, in string) string {
	t.Helper()
	tpl, err := Parse([]byte(in))
	require.NoError(t, err, in)
	h, err := Hash(tpl)
	require.NoError(t, err)
	return h
}

// The hash of the DESIGN §6 example is pinned: a change of the canonical
// form would make every stored template a new version on its next PUT, so
// it must be deliberate (update the figure and say so in the commit).
func TestHashPinned(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(readExample(t))
	require.NoError(t, err)
	canon, err := Canonical(tpl)
	require.NoError(t, err)
	require.Equal(t, `{"title":"Same product?","instructions":"Do the two records describe the same product?",`+
		`"display":[{"kind":"text","from":"unit.left"},{"kind":"image","from":"unit.photo"}],`+
		`"fields":[{"name":"same","kind":"choice","required":true,"options":[{"value":"yes","label":"Same","key":"1"},{"value":"no","label":"Different","key":"2"}],"aggregation":"auto"},`+
		`{"name":"note","kind":"text","maxLength":200,"aggregation":"keep_all"},`+
		`{"name":"boxes","kind":"bbox","min":0,"max":10,"image":"unit.photo","labels":["logo","barcode"],"iou":0.5,"aggregation":"keep_all"}],`+
		`"judgmentsPerUnit":{"min":3,"max":5,"targetConfidence":0.9},"assignmentSeconds":900,"skills":["en"],"priority":5}`, string(canon))
	h, err := Hash(tpl)
	require.NoError(t, err)
	require.Equal(t, "sha256:7e12aa840a47df9d056a9318415697c475242e9a6fd47b95f6dcd619e164170b", h)
}

func TestHashSameContent(t *testing.T) {
	t.Parallel()
	base := hashOf(t, `{"title":"t","fields":[{"name":"a","kind":"choice","options":[{"value":"x"},{"value":"y"}]},{"name":"n","kind":"number","min":0}],"skills":["en","de"]}`)
	for _, same := range []string{
		// Key order and white space.
		"{\n  \"skills\": [\"en\", \"de\"],\n  \"fields\": [{\"options\": [{\"value\": \"x\"}, {\"value\": \"y\"}], \"kind\": \"choice\", \"name\": \"a\"},\n {\"min\": 0, \"name\": \"n\", \"kind\": \"number\"}],\n  \"title\": \"t\"\n}",
		// Skills are a set.
		`{"title":"t","fields":[{"name":"a","kind":"choice","options":[{"value":"x"},{"value":"y"}]},{"name":"n","kind":"number","min":0}],"skills":["de","en"]}`,
		// Defaults spelled out, nulls, empty lists, -0, another spelling of a number.
		`{"title":"t","fields":[{"name":"a","kind":"choice","required":false,"options":[{"value":"x","label":"x"},{"value":"y","key":null}],"aggregation":"auto"},{"name":"n","kind":"number","min":-0.0e3,"tolerance":0,"aggregation":"median"}],"skills":["en","de"],"channels":[],"display":[],
		  "judgmentsPerUnit":{"min":3,"max":3,"targetConfidence":0},"assignmentSeconds":900,"priority":1,"instructions":null}`,
	} {
		require.Equal(t, base, hashOf(t, same), same)
	}
	for _, different := range []string{
		// Field order is the order of the page.
		`{"title":"t","fields":[{"name":"n","kind":"number","min":0},{"name":"a","kind":"choice","options":[{"value":"x"},{"value":"y"}]}],"skills":["en","de"]}`,
		// So is option order.
		`{"title":"t","fields":[{"name":"a","kind":"choice","options":[{"value":"y"},{"value":"x"}]},{"name":"n","kind":"number","min":0}],"skills":["en","de"]}`,
		// A number field without min is not one with min 0.
		`{"title":"t","fields":[{"name":"a","kind":"choice","options":[{"value":"x"},{"value":"y"}]},{"name":"n","kind":"number"}],"skills":["en","de"]}`,
		`{"title":"t ","fields":[{"name":"a","kind":"choice","options":[{"value":"x"},{"value":"y"}]},{"name":"n","kind":"number","min":0}],"skills":["en","de"]}`,
		`{"title":"t","fields":[{"name":"a","kind":"choice","options":[{"value":"x"},{"value":"y"}]},{"name":"n","kind":"number","min":0}],"skills":["en","de"],"priority":2}`,
	} {
		require.NotEqual(t, base, hashOf(t, different), different)
	}
}

// The canonical form decodes to a valid template with the same hash and
// the same canonical form.
func TestCanonicalRoundTrip(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(readExample(t))
	require.NoError(t, err)
	canon, err := Canonical(tpl)
	require.NoError(t, err)
	again, err := Parse(canon)
	require.NoError(t, err)
	canon2, err := Canonical(again)
	require.NoError(t, err)
	require.Equal(t, string(canon), string(canon2))
}
