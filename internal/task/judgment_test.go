package task

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// allKinds has a field of every kind, with limits.
const allKinds = `{"title":"All kinds","fields":[
	{"name":"same","kind":"choice","required":true,"options":[{"value":"yes"},{"value":"no"}]},
	{"name":"tags","kind":"multi_choice","options":[{"value":"a"},{"value":"b"},{"value":"c"}],"min":1,"max":2},
	{"name":"code","kind":"text","minLength":2,"maxLength":5,"pattern":"^[a-z]+$"},
	{"name":"comment","kind":"text","required":true},
	{"name":"price","kind":"number","min":0,"max":100,"tolerance":0.5},
	{"name":"count","kind":"number","integer":true},
	{"name":"stars","kind":"rating","scale":5},
	{"name":"boxes","kind":"bbox","image":"unit.photo","labels":["car","person"],"max":2}]}`

func compileString(t testing.TB, in string) *Compiled {
	tpl, err := Parse([]byte(in))
	require.NoError(t, err)
	c, err := Compile(tpl)
	require.NoError(t, err)
	return c
}

func TestJudgmentValid(t *testing.T) {
	t.Parallel()
	c := compileString(t, allKinds)
	for _, tc := range []struct {
		in   string
		want Judgment
	}{
		{`{"same":"yes","comment":"ok"}`, Judgment{"same": "yes", "comment": "ok"}},
		{`{"same":"yes","comment":"\"tab\"\t\u00e9\ud83d\ude00\/"}`, Judgment{"same": "yes", "comment": "\"tab\"\té😀/"}},
		{`{"same":"no","comment":"x","tags":["a","c"],"code":"abc","price":99.5,"count":-3,"stars":5,
		   "boxes":[{"label":"car","x":0,"y":0,"w":1,"h":1},{"h":0.3,"w":0.3,"y":0.7,"x":0.7,"label":"person"}]}`,
			Judgment{"same": "no", "comment": "x", "tags": []string{"a", "c"}, "code": "abc", "price": 99.5, "count": -3.0, "stars": 5,
				"boxes": []Box{{"car", 0, 0, 1, 1}, {"person", 0.7, 0.7, 0.3, 0.3}}}},
		// null is no answer for an optional field; an integer may be spelled 2.0.
		{`{"same":"yes","comment":"x","tags":null,"code":null,"price":null,"count":2.0,"stars":null,"boxes":[]}`,
			Judgment{"same": "yes", "comment": "x", "count": 2.0, "boxes": []Box{}}},
	} {
		j, err := c.ParseJudgment([]byte(tc.in))
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, j, tc.in)
		require.NoError(t, c.ValidateJudgment([]byte(tc.in)))
	}
}

// Each invalid judgment gives exactly the listed problems, in the order of
// the template's fields, every one at once.
func TestJudgmentInvalid(t *testing.T) {
	t.Parallel()
	c := compileString(t, allKinds)
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"not an object", `["yes"]`, []string{": a judgment must be a JSON object keyed by field name, not an array"}},
		{"syntax", `{"same":"yes"`, []string{": the JSON ends too early"}},
		{"trailing", `{"same":"yes","comment":"x"}]`, []string{": data after the JSON value"}},
		// A string the databases cannot store is named by its field,
		// not only as the judgment's ("data" over HTTP).
		{"NUL", `{"same":"yes","comment":"a\u0000b"}`, []string{`comment: a string must not contain the NUL character (\u0000)`}},
		{"unpaired surrogate in a box", `{"same":"yes","comment":"x","boxes":[{"label":"car\udc00"}]}`, []string{`boxes[0].label: a string must not contain an unpaired UTF-16 surrogate escape (\ud800 to \udfff alone)`}},
		{"too large", `{"comment":"` + strings.Repeat("x", MaxJudgmentBytes) + `"}`, []string{": the judgment exceeds 262144 bytes"}},
		{"required", `{}`, []string{"same: is required", "comment: is required"}},
		{"required null or empty", `{"same":null,"comment":""}`, []string{"same: is required (null is no answer)", "comment: must not be empty"}},
		{"unknown and repeated", `{"same":"yes","comment":"x","same":"no","colour":"red","Same":"yes"}`, []string{
			"same: appears more than once", "colour: is not a field of this task", "Same: is not a field of this task"}},
		{"choice", `{"same":"maybe","comment":"x"}`, []string{`same: must be one of "yes", "no", not "maybe"`}},
		{"choice type", `{"same":1,"comment":"x"}`, []string{"same: must be a string, not the number 1"}},
		{"multi_choice", `{"same":"yes","comment":"x","tags":["a","b","c"]}`, []string{"tags: must select at most 2 options, not 3"}},
		{"multi_choice empty", `{"same":"yes","comment":"x","tags":[]}`, []string{"tags: must select at least 1 option, not 0"}},
		{"multi_choice twice", `{"same":"yes","comment":"x","tags":["a","a"]}`, []string{"tags: selects the same option twice (items 0 and 1)"}},
		{"multi_choice option", `{"same":"yes","comment":"x","tags":["a","z"]}`, []string{`tags[1]: must be one of "a", "b", "c", not "z"`}},
		{"multi_choice type", `{"same":"yes","comment":"x","tags":"a"}`, []string{"tags: must be an array, not a string"}},
		{"text short", `{"same":"yes","comment":"x","code":"a"}`, []string{"code: must be at least 2 characters long, not 1"}},
		{"text long", `{"same":"yes","comment":"x","code":"abcdef"}`, []string{"code: must be at most 5 characters long, not 6"}},
		{"text characters not bytes", `{"same":"yes","comment":"x","code":"ééé"}`, []string{"code: must match the pattern ^[a-z]+$"}},
		{"number range", `{"same":"yes","comment":"x","price":100.5}`, []string{"price: must be between 0 and 100, not the number 100.5"}},
		{"number type", `{"same":"yes","comment":"x","price":"5"}`, []string{"price: must be a number, not a string"}},
		{"integer", `{"same":"yes","comment":"x","count":1.5}`, []string{"count: must be an integer, not the number 1.5"}},
		{"float64 range", `{"same":"yes","comment":"x","count":1e400}`, []string{"count: must be a number of float64 range, not 1e400"}},
		{"rating", `{"same":"yes","comment":"x","stars":0}`, []string{"stars: must be an integer from 1 to 5, not the number 0"}},
		{"rating integer", `{"same":"yes","comment":"x","stars":2.5}`, []string{"stars: must be an integer, not the number 2.5"}},
		{"boxes", `{"same":"yes","comment":"x","boxes":[
			{"label":"car","x":0.5,"y":0.5,"w":0.6,"h":0.5},
			{"label":"cat","x":-0.1,"y":0.2,"w":0,"h":0.9,"z":1},
			{"label":"car","x":0.1}]}`, []string{
			"boxes: must have at most 2 boxes, not 3",
			"boxes[0].w: x + w must be at most 1 (the box ends past the right edge of the image: x 0.5 + w 0.6)",
			`boxes[1].label: must be one of "car", "person", not "cat"`,
			"boxes[1].x: must be between 0 and 1 (a fraction of the image), not the number -0.1",
			"boxes[1].w: must be greater than 0 and at most 1 (a fraction of the image), not the number 0",
			"boxes[1].h: y + h must be at most 1 (the box ends past the bottom edge of the image: y 0.2 + h 0.9)",
			"boxes[1].z: is not a key of a box (label, x, y, w, h)",
			"boxes[2].y: is required", "boxes[2].w: is required", "boxes[2].h: is required",
		}},
		{"box type", `{"same":"yes","comment":"x","boxes":[[0,0,1,1]]}`, []string{"boxes[0]: must be an object, not an array"}},
		{"everything at once", `{"comment":"","same":"perhaps","tags":["q"],"code":"A1","price":-1,"count":0.5,"stars":6,"boxes":[{"label":"car","x":0.2,"y":0.1,"w":0.9,"h":0.5}],"extra":null}`, []string{
			`same: must be one of "yes", "no", not "perhaps"`,
			`tags[0]: must be one of "a", "b", "c", not "q"`,
			"code: must match the pattern ^[a-z]+$",
			"comment: must not be empty",
			"price: must be between 0 and 100, not the number -1",
			"count: must be an integer, not the number 0.5",
			"stars: must be an integer from 1 to 5, not the number 6",
			"boxes[0].w: x + w must be at most 1 (the box ends past the right edge of the image: x 0.2 + w 0.9)",
			"extra: is not a field of this task",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := c.ValidateJudgment([]byte(tc.in))
			require.Equal(t, tc.want, problemsOf(t, err))
			require.Contains(t, err.Error(), "invalid judgment: ")
		})
	}
}

func TestGoldenAnswer(t *testing.T) {
	t.Parallel()
	c := compileString(t, allKinds)
	// An answer may give only some fields, even required ones.
	a, err := c.ParseAnswer([]byte(`{"stars":3}`))
	require.NoError(t, err)
	require.Equal(t, Judgment{"stars": 3}, a)
	a, err = c.ParseAnswer([]byte(`{"stars":3,"same":null}`))
	require.NoError(t, err)
	require.Equal(t, Judgment{"stars": 3}, a)
	_, err = c.ParseAnswer([]byte(`{"same":null}`))
	require.Equal(t, []string{": a golden answer must give at least one field"}, problemsOf(t, err))
	_, err = c.ParseAnswer([]byte(`{}`))
	require.Equal(t, []string{": a golden answer must give at least one field"}, problemsOf(t, err))
	_, err = c.ParseAnswer([]byte(`{"same":"maybe","nope":1}`))
	require.Equal(t, []string{`same: must be one of "yes", "no", not "maybe"`, "nope: is not a field of this task"}, problemsOf(t, err))
	require.Contains(t, err.Error(), "invalid golden answer: ")
}

// The schema document stands on its own: another validator (here a fresh
// compiler of the same library) reading Compiled.Schema accepts and refuses
// what ValidateJudgment does, but for what the schema cannot say.
func TestSchemaDocument(t *testing.T) {
	t.Parallel()
	c := compileString(t, allKinds)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(c.Schema, &doc))
	require.Equal(t, SchemaDraft, doc["$schema"])
	require.Equal(t, []any{"same", "comment"}, doc["required"])

	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(c.Schema)))
	require.NoError(t, err)
	comp := jsonschema.NewCompiler()
	require.NoError(t, comp.AddResource("https://example.test/s.json", v))
	s, err := comp.Compile("https://example.test/s.json")
	require.NoError(t, err)
	check := func(in string) error {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(in))
		require.NoError(t, err)
		return s.Validate(inst)
	}
	require.NoError(t, check(`{"same":"yes","comment":"x","stars":4}`))
	require.Error(t, check(`{"same":"yes","comment":"x","stars":6}`))
	require.Error(t, check(`{"same":"yes"}`))
	// Beyond the schema: a box past the edge.
	overflow := `{"same":"yes","comment":"x","boxes":[{"label":"car","x":0.5,"y":0,"w":0.6,"h":1}]}`
	require.NoError(t, check(overflow))
	require.Error(t, c.ValidateJudgment([]byte(overflow)))
}

func TestCompiledForm(t *testing.T) {
	t.Parallel()
	c := compileString(t, string(readExample(t)))
	require.Len(t, c.Fields, 3)
	require.Len(t, c.Display, 2)
	require.Equal(t, DisplayImage, c.Display[1].Kind)
	f, ok := c.Field("same")
	require.True(t, ok)
	require.Equal(t, "Different", f.Options[1].Label)
	require.Equal(t, "2", f.Options[1].Key)
	_, ok = c.Field("nope")
	require.False(t, ok)
	h, err := Hash(c.Template)
	require.NoError(t, err)
	require.Equal(t, c.Hash, h)

	// An invalid template does not compile, and says why.
	_, err = Compile(&Template{Title: "t"})
	require.Equal(t, []string{"fields: a template needs at least one field"}, problemsOf(t, err))
}

// Hostile judgments are refused cheaply: deep nesting at once, a huge
// array with at most MaxProblems problems listed.
func TestJudgmentHostile(t *testing.T) {
	t.Parallel()
	c := compileString(t, allKinds)
	err := c.ValidateJudgment([]byte(strings.Repeat("[", 100_000)))
	require.Equal(t, []string{": the JSON is nested more than 16 levels deep"}, problemsOf(t, err))
	_, err = Parse([]byte(`{"title":"t","fields":[{"name":"a","kind":"text","help":` + strings.Repeat(`{"a":`, 20) + `}]}`))
	require.Equal(t, []string{": the JSON is nested more than 16 levels deep"}, problemsOf(t, err))

	boxes := `{"same":"yes","comment":"x","boxes":[` + strings.TrimSuffix(strings.Repeat(`{"label":"car","x":2,"y":0,"w":0.5,"h":0.5},`, 5000), ",") + `]}`
	got := problemsOf(t, c.ValidateJudgment([]byte(boxes)))
	require.Len(t, got, MaxProblems+1)
	require.Equal(t, "boxes: must have at most 2 boxes, not 5000", got[0])
	require.Equal(t, "boxes[0].x: must be between 0 and 1 (a fraction of the image), not the number 2", got[1])
	require.Equal(t, ": and 4901 more problems", got[MaxProblems])
}

// TestSameJudgment: a null is no answer, and a multi_choice's options and
// a bbox's boxes may come in any order; any other difference is other data.
func TestSameJudgment(t *testing.T) {
	t.Parallel()
	c := compileString(t, allKinds)
	parse := func(s string) Judgment {
		j, err := c.ParseJudgment([]byte(s))
		require.NoError(t, err, s)
		return j
	}
	base := `{"same":"yes","comment":"x","tags":["a","b"],"price":2,"boxes":[{"label":"car","x":0,"y":0,"w":0.5,"h":0.5},{"label":"person","x":0.5,"y":0.5,"w":0.5,"h":0.5}]}`
	for _, same := range []string{
		base,
		`{"boxes":[{"label":"person","x":0.5,"y":0.5,"w":0.5,"h":0.5},{"label":"car","x":0,"y":0,"w":0.5,"h":0.5}],"price":2.0,"tags":["b","a"],"comment":"x","same":"yes","code":null,"stars":null}`,
	} {
		require.True(t, SameJudgment(parse(base), parse(same)), same)
	}
	for _, other := range []string{
		`{"same":"no","comment":"x","tags":["a","b"],"price":2,"boxes":[{"label":"car","x":0,"y":0,"w":0.5,"h":0.5},{"label":"person","x":0.5,"y":0.5,"w":0.5,"h":0.5}]}`,
		`{"same":"yes","comment":"x","tags":["a"],"price":2,"boxes":[{"label":"car","x":0,"y":0,"w":0.5,"h":0.5},{"label":"person","x":0.5,"y":0.5,"w":0.5,"h":0.5}]}`,
		`{"same":"yes","comment":"x","tags":["a","b"],"boxes":[{"label":"car","x":0,"y":0,"w":0.5,"h":0.5},{"label":"person","x":0.5,"y":0.5,"w":0.5,"h":0.5}]}`,
		`{"same":"yes","comment":"x","tags":["a","b"],"price":2,"boxes":[{"label":"car","x":0,"y":0,"w":0.5,"h":0.5}]}`,
		`{"same":"yes","comment":"x","tags":["a","b"],"price":2,"stars":3,"boxes":[{"label":"car","x":0,"y":0,"w":0.5,"h":0.5},{"label":"person","x":0.5,"y":0.5,"w":0.5,"h":0.5}]}`,
	} {
		require.False(t, SameJudgment(parse(base), parse(other)), other)
	}
}
