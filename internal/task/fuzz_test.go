package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// FuzzTemplateDecode: arbitrary bytes never panic Parse, Compile or Hash;
// every refusal is a *ValidationError with at least one problem; a valid
// template compiles, and its canonical form parses to a valid template with
// the same hash and the same canonical form.
func FuzzTemplateDecode(f *testing.F) {
	f.Add(readExample(f))
	f.Add([]byte(allKinds))
	f.Add([]byte(`{"title":"t","fields":[{"name":"a","kind":"text","pattern":"(?i)^a+$","minLength":1}]}`))
	f.Add([]byte(`{"title":"t","fields":[{"name":"a","kind":"number","min":-0,"max":1e308,"tolerance":1e-300}]}`))
	f.Add([]byte(`{"title":"t","title":"t","fields":[null,{"name":"a","kind":"bbox","iou":0}]}`))
	f.Add([]byte(`{"title":"t","fields":[{"name":"a","kind":"multi_choice","options":[{"value":"x","key":"1"}],"min":1,"max":1}],"skills":["b","a"]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tpl, err := Parse(data)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("error %T %v", err, err)
			}
			return
		}
		c, err := Compile(tpl)
		if err != nil {
			t.Fatalf("a valid template does not compile: %v\n%s", err, data)
		}
		canon, err := Canonical(tpl)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(canon)
		if err != nil {
			t.Fatalf("canonical form %s is invalid: %v", canon, err)
		}
		h, _ := Hash(again)
		if h != c.Hash {
			t.Fatalf("hash changed through the canonical form %s", canon)
		}
		canon2, _ := Canonical(again)
		if string(canon2) != string(canon) {
			t.Fatalf("canonical form is not stable:\n%s\n%s", canon, canon2)
		}
	})
}

// FuzzJudgmentValidate: arbitrary bytes never panic ParseJudgment or
// ParseAnswer; every refusal is a *ValidationError with at least one
// problem; an accepted judgment gives every required field, scores
// correct against itself, and is accepted by the published schema document
// read by a validator of its own (what the web page checks is never
// stricter than the API).
func FuzzJudgmentValidate(f *testing.F) {
	c := compileString(f, allKinds)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(c.Schema))
	if err != nil {
		f.Fatal(err)
	}
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource("https://example.test/judgment.json", doc); err != nil {
		f.Fatal(err)
	}
	published, err := comp.Compile("https://example.test/judgment.json")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"same":"yes","comment":"x"}`,
		`{"same":"no","comment":"x","tags":["a","c"],"code":"abc","price":99.5,"count":-3,"stars":5,"boxes":[{"label":"car","x":0,"y":0,"w":1,"h":1}]}`,
		`{"same":"yes","comment":"x","boxes":[{"label":"car","x":0.7,"y":0.7,"w":0.3,"h":0.3},{"label":"person","x":0.1,"y":0.2,"w":0.9,"h":0.1}]}`,
		`{"same":null,"same":1,"count":1e400,"tags":["a","a"],"x":{}}`,
		`[]`, `"x"`, `{"comment":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, answer := range []bool{false, true} {
			parse := c.ParseJudgment
			if answer {
				parse = c.ParseAnswer
			}
			j, err := parse(data)
			if err != nil {
				var ve *ValidationError
				if !errors.As(err, &ve) || len(ve.Errors) == 0 {
					t.Fatalf("error %T %v", err, err)
				}
				continue
			}
			if !answer {
				inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
				if err != nil {
					t.Fatalf("accepted, but not JSON for the schema's reader: %v\n%s", err, data)
				}
				if err := published.Validate(inst); err != nil {
					t.Fatalf("accepted, but the published schema refuses it: %v\n%s", err, data)
				}
				for _, f := range c.Fields {
					if _, ok := j[f.Name]; f.Required && !ok {
						t.Fatalf("accepted without required field %q: %s", f.Name, data)
					}
				}
			}
			if s := c.Score(j, j); !s.Correct || len(s.Fields) != len(j) {
				t.Fatalf("a judgment does not match itself: %+v\n%s", s, data)
			}
		}
	})
}

// FuzzParseTree checks the JSON parser against encoding/json: it accepts
// exactly the valid JSON texts, but for the ones it refuses on purpose (NUL,
// unpaired surrogates, nesting past MaxDepth), and reads the same values.
func FuzzParseTree(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,-0.5e+3,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"],"b":{}}`,
		`[]`, ` 0 `, `"\ud800"`, `"\udc00\ud800"`, `"\u0000"`, `[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]`,
		`{"a":1,"a":2}`, `01`, `1.`, `-`, `1e`, `"\x"`, "\"\x01\"", `{"a" 1}`, `[1,]`, `{,}`, `nul`, `"é"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p problems
		root, ok := parseTree(data, &p)
		valid := json.Valid(data) && utf8.Valid(data)
		if !ok {
			if p.len() != 1 {
				t.Fatalf("refusal with problems %v", p.list)
			}
			msg := p.list[0].Message
			onPurpose := strings.Contains(msg, "NUL") || strings.Contains(msg, "surrogate") || strings.Contains(msg, "nested")
			// A syntax error has no path; a string refused on purpose is
			// named by the path of its value.
			if p.list[0].Field != "" && !strings.Contains(msg, "NUL") && !strings.Contains(msg, "surrogate") {
				t.Fatalf("refusal with problems %v", p.list)
			}
			if valid && !onPurpose {
				t.Fatalf("refuses valid JSON %q: %s", data, msg)
			}
			return
		}
		if !valid {
			t.Fatalf("accepts invalid JSON %q", data)
		}
		if p.len() > 0 {
			return // repeated keys: encoding/json keeps the last, we the first
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		if got := root.value(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: got %#v, want %#v", data, got, want)
		}
	})
}

// surelyTemplates are the templates FuzzSurelyValid and TestSurelyValid
// try: every kind, and ones surelyValid can decide whole.
var surelyTemplates = []string{allKinds,
	`{"title":"t","fields":[{"name":"same","kind":"choice","required":true,"options":[{"value":"yes"},{"value":"n\u00f6"},{"value":"<&>"}]},
	  {"name":"note","kind":"text","minLength":2,"maxLength":4},{"name":"why","kind":"text","required":true},
	  {"name":"stars","kind":"rating","scale":10,"required":true},{"name":"opt","kind":"choice","options":[{"value":"a"},{"value":"b"}]}]}`}

// FuzzSurelyValid: what surelyValid accepts, the judgment schema accepts
// (it is a shortcut past the schema, never a second opinion).
func FuzzSurelyValid(f *testing.F) {
	var cs []*Compiled
	for _, s := range surelyTemplates {
		cs = append(cs, compileString(f, s))
	}
	for _, s := range []string{`{"same":"yes","comment":"x"}`, `{"same":"no","comment":"xy","stars":5,"code":"ab"}`,
		`{"same":"yes","why":"é","stars":10,"note":null,"opt":"a"}`, `{"same":"nö","why":"\u00e9\ud83d\ude00","stars":1,"note":"abcd"}`,
		`{"same":"<&>","why":" ","stars":10.0}`, `{"same":"yes","why":"x","stars":1e1}`, `{"same":null,"why":"x","stars":3}`,
		`{"same":"yes","why":"","stars":3}`, `{"same":"yes","why":"x","stars":11}`, `{"same":"yes","why":"x","stars":0}`} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		c := cs[int(which)%len(cs)]
		var p problems
		root, ok := parseTree(data, &p)
		if !ok || root.kind != 'o' || p.len() > 0 || !c.surelyValid(root) {
			return
		}
		if err := c.judgment.Validate(root.value()); err != nil {
			t.Fatalf("surelyValid, but the schema refuses it: %v\n%s", err, data)
		}
		if _, err := c.ParseJudgment(data); err != nil {
			t.Fatalf("surelyValid, but ParseJudgment refuses it: %v\n%s", err, data)
		}
	})
}

// surelyValid decides the common judgments of choice, text and rating
// fields (so the schema's walk is skipped for them), and leaves the rest
// to the schema.
func TestSurelyValid(t *testing.T) {
	t.Parallel()
	all, simple := compileString(t, surelyTemplates[0]), compileString(t, surelyTemplates[1])
	for _, tc := range []struct {
		c    *Compiled
		data string
		want bool
	}{
		{all, `{"same":"yes","comment":"x"}`, true},
		{all, `{"same":"no","comment":"x","stars":5,"same2":1}`, false}, // unknown
		{all, `{"same":"yes","comment":"x","code":"ab"}`, false},        // a pattern: the schema's
		{all, `{"same":"yes","comment":"x","price":3}`, false},          // a number: the schema's
		{all, `{"same":"maybe","comment":"x"}`, false},
		{all, `{"comment":"x"}`, false}, // same is required
		{simple, `{"same":"nö","why":"😀","stars":10,"note":null,"opt":"a"}`, true},
		{simple, `{"same":"<&>","why":"x","stars":1,"note":"ab"}`, true},
		{simple, `{"same":"yes","why":"x","stars":1,"note":"a"}`, false},     // too short
		{simple, `{"same":"yes","why":"x","stars":1,"note":"abcde"}`, false}, // too long
		{simple, `{"same":"yes","why":"","stars":1}`, false},                 // required text is at least 1
		{simple, `{"same":"yes","why":"x","stars":10.0}`, false},             // valid, but the schema decides
		{simple, `{"same":"yes","why":"x","stars":11}`, false},
		{simple, `{"same":"yes","why":"x","stars":null}`, false},
		{simple, `{"same":"yes","why":"x"}`, false},
		{simple, `{"same":"yes","why":"x","stars":2,"opt":"c"}`, false},
	} {
		var p problems
		root, ok := parseTree([]byte(tc.data), &p)
		require.True(t, ok, tc.data)
		require.Equal(t, tc.want, tc.c.surelyValid(root), tc.data)
		_, err := tc.c.ParseJudgment([]byte(tc.data))
		if tc.want {
			require.NoError(t, err, tc.data)
		}
	}
}
