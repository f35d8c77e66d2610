package task

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// problemsOf returns "field: message" for every problem of a
// *ValidationError (and fails the test for any other error).
func problemsOf(t *testing.T, err error) []string {
	t.Helper()
	var ve *ValidationError
	require.True(t, errors.As(err, &ve), "want a *ValidationError, got %T %v", err, err)
	require.NotEmpty(t, ve.Errors)
	var out []string
	for _, fe := range ve.Errors {
		out = append(out, fe.Field+": "+fe.Message)
	}
	return out
}

func readExample(t testing.TB) []byte {
	data, err := os.ReadFile("testdata/same-product.json")
	require.NoError(t, err)
	return data
}

func TestParseExample(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(readExample(t))
	require.NoError(t, err)
	require.Equal(t, "Same product?", tpl.Title)
	require.Len(t, tpl.Fields, 3)
	require.Equal(t, KindBBox, tpl.Fields[2].Kind)
	require.Equal(t, 10.0, *tpl.Fields[2].Max)
	require.Equal(t, 5, *tpl.Priority)

	d := tpl.WithDefaults()
	require.Equal(t, "auto", d.Fields[0].Aggregation)
	require.Equal(t, "keep_all", d.Fields[1].Aggregation)
	require.Equal(t, 200, d.Fields[1].MaxLength)
	require.Equal(t, 0.5, *d.Fields[2].IoU)
	require.Equal(t, 0.0, *d.Fields[2].Min)
	// WithDefaults does not touch its receiver.
	require.Nil(t, tpl.Fields[2].IoU)
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	tpl, err := Parse([]byte(`{"title":"t","fields":[
		{"name":"c","kind":"choice","options":[{"value":"a"},{"value":"b","label":"B"}]},
		{"name":"m","kind":"multi_choice","options":[{"value":"a"},{"value":"b"},{"value":"c"}]},
		{"name":"x","kind":"text"},
		{"name":"n","kind":"number"},
		{"name":"r","kind":"rating"},
		{"name":"b","kind":"bbox","image":"unit.img","labels":["car"]}]}`))
	require.NoError(t, err)
	d := tpl.WithDefaults()
	require.Equal(t, AssignmentSecondsDefault, d.AssignmentSeconds)
	require.Equal(t, PriorityDefault, *d.Priority)
	require.Equal(t, JudgmentsPerUnit{Min: 3, Max: 3}, d.JudgmentsPerUnit)
	c, m, x, n, r, b := d.Fields[0], d.Fields[1], d.Fields[2], d.Fields[3], d.Fields[4], d.Fields[5]
	require.Equal(t, []Option{{Value: "a", Label: "a"}, {Value: "b", Label: "B"}}, c.Options)
	require.Equal(t, "auto", c.Aggregation)
	require.Equal(t, 0.0, *m.Min)
	require.Equal(t, 3.0, *m.Max)
	require.Equal(t, TextMaxLengthDefault, x.MaxLength)
	require.Equal(t, "keep_all", x.Aggregation)
	require.Nil(t, n.Min)
	require.Nil(t, n.Max)
	require.Equal(t, "median", n.Aggregation)
	require.Equal(t, ScaleDefault, r.Scale)
	require.Equal(t, "auto", r.Aggregation)
	require.Equal(t, float64(BoxesMaxDefault), *b.Max)
	require.Equal(t, IoUDefault, *b.IoU)
	require.Equal(t, "keep_all", b.Aggregation)

	// judgmentsPerUnit.max defaults to min, whatever min is.
	tpl, err = Parse([]byte(`{"title":"t","fields":[{"name":"x","kind":"text"}],"judgmentsPerUnit":{"min":7}}`))
	require.NoError(t, err)
	require.Equal(t, 7, tpl.WithDefaults().JudgmentsPerUnit.Max)
}

// Decoding is strict, and every problem is reported with its path, all at
// once.
func TestDecodeStrict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"syntax", `{"title":`, []string{": the JSON ends too early"}},
		{"trailing", `{"title":"t"} {}`, []string{": data after the JSON value"}},
		{"not utf-8", "{\"title\":\"\xff\"}", []string{": the JSON text is not valid UTF-8"}},
		{"nul", `{"title":"a\u0000b"}`, []string{`title: a string must not contain the NUL character (\u0000)`}},
		{"nul deep", `{"fields":[{"options":[{"label":"\u0000"}]}]}`, []string{`fields[0].options[0].label: a string must not contain the NUL character (\u0000)`}},
		{"nul in a key", `{"fields":[{"a\u0000":1}]}`, []string{`fields[0]: a string must not contain the NUL character (\u0000)`}},
		{"empty", ``, []string{": the document is empty"}},
		{"unpaired surrogate", `{"title":"a\ud800b"}`, []string{`title: a string must not contain an unpaired UTF-16 surrogate escape (\ud800 to \udfff alone)`}},
		{"too deep", `{"title":"t","fields":[{"help":[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]}]}`, []string{": the JSON is nested more than 16 levels deep"}},
		{"bad escape", `{"title":"\x"}`, []string{`: invalid JSON at byte 12: invalid escape '\x' in a string`}},
		{"not an object", `[1]`, []string{": a task template must be a JSON object, not an array"}},
		{"null", ` null `, []string{": a task template must be a JSON object, not null"}},
		{"every decoding problem at once", `{"title":"t","title":"u","bogus":1,"priority":1.5,
			"fields":[{"name":"a","kind":"choice","required":"yes",
			           "options":[{"value":"x","value":"y"},{"value":1,"color":"red"}]}, null],
			"judgmentsPerUnit":{"min":"3","avg":2},"skills":["en",2],"display":{}}`, []string{
			"title: appears more than once",
			"fields[0].options[0].value: appears more than once",
			"bogus: unknown field",
			"priority: must be an integer, not 1.5",
			"fields[0].required: must be a boolean, not a string",
			"fields[0].options[1].value: must be a string, not the number 1",
			"fields[0].options[1].color: unknown field",
			"fields[1]: must not be null",
			"judgmentsPerUnit.min: must be an integer, not a string",
			"judgmentsPerUnit.avg: unknown field",
			"skills[1]: must be a string, not the number 2",
			"display: must be an array, not an object",
		}},
		{"huge number", `{"title":"t","fields":[{"name":"n","kind":"number","min":1e400}]}`,
			[]string{"fields[0].min: must be a number of float64 range, not 1e400"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Decode([]byte(tc.in))
			require.Equal(t, tc.want, problemsOf(t, err))
		})
	}
}

// Each invalid template gives exactly the listed problems.
func TestValidateTemplate(t *testing.T) {
	t.Parallel()
	const ok = `{"name":"ok","kind":"text"}`
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"no title, no fields", `{}`, []string{"title: is required", "fields: a template needs at least one field"}},
		{"field names", `{"title":"t","fields":[{"name":"Same","kind":"text"},{"name":"in","kind":"text"},{"name":"a","kind":"text"},{"name":"a","kind":"text"},{"kind":"text"}]}`, []string{
			"fields[0].name: must start with a lowercase letter (a-z)",
			`fields[1].name: "in" is a reserved word of CEL`,
			`fields[3].name: duplicate field name "a" (also fields[2])`,
			"fields[4].name: is required",
		}},
		{"kinds", `{"title":"t","fields":[{"name":"a"},{"name":"b","kind":"slider"}]}`, []string{
			"fields[0].kind: is required (one of choice, multi_choice, text, number, rating, bbox)",
			`fields[1].kind: must be one of choice, multi_choice, text, number, rating, bbox, not "slider"`,
		}},
		{"settings of another kind", `{"title":"t","fields":[{"name":"a","kind":"text","options":[{"value":"x"}],"scale":3,"integer":true},{"name":"b","kind":"rating","pattern":"x","labels":["y"]}]}`, []string{
			"fields[0].options: is not a setting of a text field",
			"fields[0].integer: is not a setting of a text field",
			"fields[0].scale: is not a setting of a text field",
			"fields[1].pattern: is not a setting of a rating field",
			"fields[1].labels: is not a setting of a rating field",
		}},
		{"choice", `{"title":"t","fields":[
			{"name":"a","kind":"choice","options":[{"value":"x"}]},
			{"name":"b","kind":"choice","options":[{"value":"yes","key":"1"},{"value":"yes","key":"Y"},{"value":"","key":"1"},{"value":" no"}]},
			{"name":"c","kind":"choice","options":[{"value":"p","key":"1"},{"value":"q","key":"22"}]}]}`, []string{
			"fields[0].options: a choice field needs at least 2 options",
			`fields[1].options[1].value: duplicate option "yes" (also options[0])`,
			`fields[1].options[1].key: must be one character a-z or 0-9, not "Y"`,
			"fields[1].options[2].value: is required",
			`fields[1].options[2].key: key "1" is already the key of fields[1].options[0]`,
			"fields[1].options[3].value: must not start or end with white space",
			`fields[2].options[0].key: key "1" is already the key of fields[1].options[0]`,
			`fields[2].options[1].key: must be one character a-z or 0-9, not "22"`,
		}},
		{"multi_choice", `{"title":"t","fields":[
			{"name":"a","kind":"multi_choice","options":[]},
			{"name":"b","kind":"multi_choice","options":[{"value":"x"},{"value":"y"}],"min":3,"max":0},
			{"name":"c","kind":"multi_choice","options":[{"value":"x"},{"value":"y"}],"min":2,"max":1},
			{"name":"d","kind":"multi_choice","options":[{"value":"x"},{"value":"y"}],"min":0.5}]}`, []string{
			"fields[0].options: a multi_choice field needs at least 1 option",
			"fields[1].min: must be an integer between 0 and 2",
			"fields[1].max: must be an integer between 1 and 2",
			"fields[2].max: must be at least min (2)",
			"fields[3].min: must be an integer between 0 and 2",
		}},
		{"text", `{"title":"t","fields":[
			{"name":"a","kind":"text","minLength":-1,"maxLength":200000},
			{"name":"b","kind":"text","minLength":10,"maxLength":5,"pattern":"a(b"}]}`, []string{
			"fields[0].minLength: must be between 0 and 100000",
			"fields[0].maxLength: must be between 1 and 100000",
			"fields[1].maxLength: must be at least minLength (10)",
			"fields[1].pattern: is not a valid RE2 regular expression: error parsing regexp: missing closing ): `a(b`",
		}},
		{"RE2 only", `{"title":"t","fields":[{"name":"a","kind":"text","pattern":"(?=x)"}]}`, []string{
			"fields[0].pattern: is not a valid RE2 regular expression: error parsing regexp: invalid or unsupported Perl syntax: `(?=`",
		}},
		{"number", `{"title":"t","fields":[
			{"name":"a","kind":"number","min":5,"max":1,"tolerance":-1},
			{"name":"b","kind":"number","integer":true,"min":0.2,"max":0.8}]}`, []string{
			"fields[0].max: must be at least min (5)",
			"fields[0].tolerance: must be at least 0",
			"fields[1].max: no integer lies between min (0.2) and max (0.8)",
		}},
		{"rating", `{"title":"t","fields":[{"name":"a","kind":"rating","scale":1},{"name":"b","kind":"rating","scale":11}]}`, []string{
			"fields[0].scale: must be between 2 and 10",
			"fields[1].scale: must be between 2 and 10",
		}},
		{"bbox", `{"title":"t","fields":[
			{"name":"a","kind":"bbox"},
			{"name":"b","kind":"bbox","image":"photo","labels":["car","car",""],"min":5,"max":2,"iou":0},
			{"name":"c","kind":"bbox","image":"unit.a b","labels":["x"],"max":5000,"iou":1.5}]}`, []string{
			`fields[0].image: is required: the unit field holding the image ("unit.photo")`,
			"fields[0].labels: a bbox field needs at least one label",
			`fields[1].image: must be "unit." and a path into the unit's input, e.g. "unit.photo" or "unit.product.title"`,
			`fields[1].labels[1]: duplicate label "car" (also labels[0])`,
			"fields[1].labels[2]: is required",
			"fields[1].max: must be at least min (5)",
			"fields[1].iou: must be greater than 0 and at most 1",
			`fields[2].image: has invalid character ' ': must be "unit." and a path into the unit's input, e.g. "unit.photo" or "unit.product.title"`,
			"fields[2].max: must be an integer between 1 and 1000",
			"fields[2].iou: must be greater than 0 and at most 1",
		}},
		{"aggregation", `{"title":"t","fields":[
			{"name":"a","kind":"choice","options":[{"value":"x"},{"value":"y"}],"aggregation":"median"},
			{"name":"b","kind":"number","aggregation":"ds"},
			{"name":"c","kind":"text","aggregation":"majority"},
			{"name":"d","kind":"rating","aggregation":"glad"},
			{"name":"e","kind":"multi_choice","options":[{"value":"x"}],"aggregation":"wawa"},
			{"name":"f","kind":"number","aggregation":"weighted"}]}`, []string{
			`fields[0].aggregation: unknown method "median" for a choice field (want one of majority, weighted, wawa, zencrowd, ds, glad, ebcc, auto)`,
			`fields[1].aggregation: unknown method "ds" for a number field (want one of mean, median, weighted)`,
			`fields[2].aggregation: unknown method "majority" for a text field (want one of keep_all)`,
		}},
		{"display and settings", `{"title":"t","fields":[` + ok + `],
			"display":[{"kind":"video","from":"unit.v"},{"from":"left"},{"kind":"link","from":"unit..x"}],
			"judgmentsPerUnit":{"min":0,"max":101,"targetConfidence":1.5},
			"assignmentSeconds":10,"skills":["en","en","a b"],"channels":[""],"priority":-1,
			"takesPerSecond":-1,"takesPerSecondPerContributor":1e7}`, []string{
			`display[0].kind: must be text, image or link, not "video"`,
			"display[1].kind: is required (text, image or link)",
			`display[1].from: must be "unit." and a path into the unit's input, e.g. "unit.photo" or "unit.product.title"`,
			`display[2].from: must be "unit." and a path into the unit's input, e.g. "unit.photo" or "unit.product.title"`,
			"judgmentsPerUnit.max: must be at most 100",
			"judgmentsPerUnit.targetConfidence: must be between 0 and 1",
			"assignmentSeconds: must be between 30 and 86400",
			`skills[1]: duplicate "en" (also skills[0])`,
			"skills[2]: has invalid character ' ' (allowed: ASCII letters, digits, . _ - :)",
			"channels[0]: is required",
			"priority: must be between 0 and 9",
			"takesPerSecond: must be 0 (no limit) or between 1.1574074074074073e-05 (one a day) and 1000000 takes per second",
			"takesPerSecondPerContributor: must be 0 (no limit) or between 1.1574074074074073e-05 (one a day) and 1000000 takes per second",
		}},
		// A rate above 0 but under one take a day answered a take 429 with
		// a Retry-After of centuries (1e-300: 292 years, Go's longest
		// duration).
		{"rates under one a day", `{"title":"t","fields":[` + ok + `],"takesPerSecond":1e-300,"takesPerSecondPerContributor":0.00001}`, []string{
			"takesPerSecond: must be 0 (no limit) or between 1.1574074074074073e-05 (one a day) and 1000000 takes per second",
			"takesPerSecondPerContributor: must be 0 (no limit) or between 1.1574074074074073e-05 (one a day) and 1000000 takes per second",
		}},
		{"max below min", `{"title":"t","fields":[` + ok + `],"judgmentsPerUnit":{"min":5,"max":3}}`, []string{
			"judgmentsPerUnit.max: must be at least min (5)",
		}},
		{"sizes", `{"title":"` + strings.Repeat("x", 201) + `","fields":[` + strings.TrimSuffix(strings.Repeat(`{"name":"a","kind":"text"},`, 51), ",") + `]}`, []string{
			"title: must be at most 200 bytes",
			"fields: a template has at most 50 fields, this one has 51",
		}},
		// Parse names a field once: a decoding problem hides what Validate
		// would say about the same field.
		{"decode and validate together", `{"title":"","fields":[{"name":"a","kind":"text","maxLength":"long"},{"name":"b","kind":3}],"priority":"high","judgmentsPerUnit":{"min":200}}`, []string{
			"fields[0].maxLength: must be an integer, not a string",
			"fields[1].kind: must be a string, not the number 3",
			"priority: must be an integer, not a string",
			"title: is required",
			"judgmentsPerUnit.min: must be between 1 and 100",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.in))
			got := problemsOf(t, err)
			if tc.name == "sizes" {
				got = got[:2] // and 51 duplicate names
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestValidateTemplateValid(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`{"title":"t","fields":[{"name":"a","kind":"text"}]}`,
		`{"title":"t","fields":[{"name":"a","kind":"text"}],"takesPerSecond":0.5,"takesPerSecondPerContributor":1000000}`,
		`{"title":"t","fields":[{"name":"a","kind":"text"}],"takesPerSecond":1.1574074074074073e-05,"takesPerSecondPerContributor":0}`,
		`{"title":"t","fields":[{"name":"a","kind":"number","min":-1.5,"max":-1.5}],"priority":0,"judgmentsPerUnit":{"min":1,"max":100,"targetConfidence":1}}`,
		`{"title":"t","fields":[{"name":"a","kind":"multi_choice","options":[{"value":"x","key":"a"}],"min":1,"max":1,"aggregation":"majority"}]}`,
		`{"title":"t","fields":[{"name":"a","kind":"bbox","image":"unit.p.q-r_s","labels":["x"],"min":1,"max":1,"iou":1}]}`,
		`{"title":"t","fields":[{"name":"a","kind":"rating","scale":10,"aggregation":"ebcc"}],"display":[{"kind":"link","from":"unit.url","label":"Page"}],"assignmentSeconds":86400,"skills":["en:native","x.y-z"]}`,
		`{"title":"t","fields":[{"name":"a","kind":"text","pattern":"^[A-Z]{2}\\d+$","minLength":3,"maxLength":3,"label":null,"help":null}],"instructions":null}`,
	} {
		_, err := Parse([]byte(in))
		require.NoError(t, err, in)
	}
}

func TestMaxProblems(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(`{"title":"t","fields":[{"name":"a","kind":"text"}],"skills":[`)
	for i := range 150 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"a b"`)
	}
	b.WriteString(`]}`)
	_, err := Parse([]byte(b.String()))
	got := problemsOf(t, err)
	require.Len(t, got, MaxProblems+1)
	require.Equal(t, ": and 51 more problems", got[MaxProblems])
}

// TestCompileStoredKeepsOlderRates: a version stored before the rate of
// takes had its lower bound (one a day) is loaded again by CompileStored
// (what a pool's takes, judgments and close do), so the rule does not
// break its pools; a new version (Compile) is held to it, and a stored
// version is still refused what was never allowed.
func TestCompileStoredKeepsOlderRates(t *testing.T) {
	t.Parallel()
	decode := func(s string) *Template {
		tpl, err := Decode([]byte(s))
		require.NoError(t, err)
		return tpl
	}
	old := decode(`{"title":"t","fields":[{"name":"a","kind":"text"}],"takesPerSecond":1e-6,"takesPerSecondPerContributor":1e-300}`)
	_, err := Compile(old)
	require.Equal(t, []string{
		"takesPerSecond: must be 0 (no limit) or between 1.1574074074074073e-05 (one a day) and 1000000 takes per second",
		"takesPerSecondPerContributor: must be 0 (no limit) or between 1.1574074074074073e-05 (one a day) and 1000000 takes per second",
	}, problemsOf(t, err), "a new version")
	c, err := CompileStored(old)
	require.NoError(t, err, "a stored version")
	require.Equal(t, 1e-6, c.Template.TakesPerSecond)
	for _, bad := range []string{
		`{"title":"t","fields":[{"name":"a","kind":"text"}],"takesPerSecond":-1}`,
		`{"title":"t","fields":[{"name":"a","kind":"text"}],"takesPerSecond":1e7}`,
		`{"title":"","fields":[{"name":"a","kind":"text"}],"takesPerSecond":1e-6}`,
	} {
		_, err := CompileStored(decode(bad))
		require.Error(t, err, bad)
	}
}
