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
			if p.len() != 1 || p.list[0].Field != "" {
				t.Fatalf("refusal with problems %v", p.list)
			}
			msg := p.list[0].Message
			onPurpose := strings.Contains(msg, "NUL") || strings.Contains(msg, "surrogate") || strings.Contains(msg, "nested")
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
