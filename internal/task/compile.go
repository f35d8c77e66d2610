package task

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/docket-run/docket/internal/jsonappend"
)

// SchemaDraft is the JSON Schema dialect of Compiled.Schema.
const SchemaDraft = "https://json-schema.org/draft/2020-12/schema"

// Compiled is a validated template in the form the API and the web work
// page use: its fields and display blocks with every default filled in, the
// JSON Schema of a judgment, and the validators of judgments and golden
// answers. It is the only compiler of templates; a Compiled is immutable and
// safe for concurrent use.
type Compiled struct {
	// Template is the template with its defaults filled in (Normalize).
	Template *Template
	// Hash is the template's content hash (see Hash).
	Hash string
	// Fields and Display are Template's, in page order.
	Fields  []Field
	Display []Display
	// Schema is the JSON Schema (draft 2020-12) of a judgment. It says
	// everything but what JSON Schema cannot: that a box fits in its image
	// (x + w ≤ 1, y + h ≤ 1) and that a number fits a float64; ValidateJudgment
	// checks those after the schema.
	Schema json.RawMessage

	judgment *jsonschema.Schema
	answer   *jsonschema.Schema // the same without "required"
	index    map[string]int     // field name → index
	required int                // how many fields are required
	sure     []bool             // by field index: surelyValid may decide its values
}

// Compile validates t and compiles it. An invalid template gives the
// *ValidationError of Validate.
func Compile(t *Template) (*Compiled, error) {
	if err := Validate(t); err != nil {
		return nil, err
	}
	return compile(t)
}

// CompileStored compiles a version stored earlier (by this docket or an
// older one): it is validated as Compile does, except for the rules that
// only a new version is held to (a rate of takes below
// MinTakesPerSecond), so that a rule added later does not break the pools
// of a task stored before it.
func CompileStored(t *Template) (*Compiled, error) {
	p := problems{stored: true}
	validateInto(&p, t)
	if err := p.err(subjectTemplate); err != nil {
		return nil, err
	}
	return compile(t)
}

// compile compiles a template that was validated.
func compile(t *Template) (*Compiled, error) {
	n := Normalize(t)
	hash, err := Hash(n)
	if err != nil {
		return nil, err
	}
	c := &Compiled{Template: n, Hash: hash, Fields: n.Fields, Display: n.Display, index: map[string]int{}}
	for i, f := range n.Fields {
		c.index[f.Name] = i
		if f.Required {
			c.required++
		}
		c.sure = append(c.sure, sureField(&f))
	}
	c.Schema, err = marshalSchema(judgmentSchema(n, true))
	if err != nil {
		return nil, err
	}
	if c.judgment, err = compileSchema("judgment.json", c.Schema); err != nil {
		return nil, err
	}
	answer, err := marshalSchema(judgmentSchema(n, false))
	if err != nil {
		return nil, err
	}
	if c.answer, err = compileSchema("answer.json", answer); err != nil {
		return nil, err
	}
	return c, nil
}

// Field returns the field of that name.
func (c *Compiled) Field(name string) (*Field, bool) {
	i, ok := c.index[name]
	if !ok {
		return nil, false
	}
	return &c.Fields[i], true
}

// judgmentSchema builds the schema of a judgment: an object keyed by field
// name, no other keys, the required fields present. An optional field may
// also be null (no answer). With required false, no field is required: the
// schema of a golden answer, which may give only some fields (and any as
// null, which is the same as not giving it).
func judgmentSchema(t *Template, required bool) map[string]any {
	props := map[string]any{}
	need := []string{}
	for _, f := range t.Fields {
		props[f.Name] = fieldSchema(&f, !required || !f.Required)
		if required && f.Required {
			need = append(need, f.Name)
		}
	}
	return map[string]any{
		"$schema":              SchemaDraft,
		"title":                t.Title,
		"type":                 "object",
		"properties":           props,
		"required":             need,
		"additionalProperties": false,
	}
}

// fieldSchema is the schema of one field's value; nullable lets it be null
// (no answer).
func fieldSchema(f *Field, nullable bool) map[string]any {
	s := map[string]any{}
	if f.Label != "" {
		s["title"] = f.Label
	}
	if f.Help != "" {
		s["description"] = f.Help
	}
	var typ string
	switch f.Kind {
	case KindChoice:
		typ = "string"
		s["enum"] = optionValues(f, nullable)
	case KindMultiChoice:
		typ = "array"
		s["items"] = map[string]any{"type": "string", "enum": optionValues(f, false)}
		s["uniqueItems"] = true
		s["minItems"] = int(*f.Min)
		s["maxItems"] = int(*f.Max)
	case KindText:
		typ = "string"
		lo := f.MinLength
		if f.Required {
			lo = max(lo, 1)
		}
		if lo > 0 {
			s["minLength"] = lo
		}
		s["maxLength"] = f.MaxLength
		if f.Pattern != "" {
			s["pattern"] = f.Pattern
		}
	case KindNumber:
		typ = "number"
		if f.Integer {
			typ = "integer"
		}
		if f.Min != nil {
			s["minimum"] = *f.Min
		}
		if f.Max != nil {
			s["maximum"] = *f.Max
		}
	case KindRating:
		typ = "integer"
		s["minimum"] = 1
		s["maximum"] = f.Scale
	case KindBBox:
		typ = "array"
		unit := map[string]any{"type": "number", "minimum": 0, "maximum": 1}
		size := map[string]any{"type": "number", "exclusiveMinimum": 0, "maximum": 1}
		s["items"] = map[string]any{
			"type": "object",
			"properties": map[string]any{
				"label": map[string]any{"type": "string", "enum": f.Labels},
				"x":     unit, "y": unit, "w": size, "h": size,
			},
			"required":             []string{"label", "x", "y", "w", "h"},
			"additionalProperties": false,
		}
		s["minItems"] = int(*f.Min)
		s["maxItems"] = int(*f.Max)
	}
	if nullable {
		s["type"] = []string{typ, "null"}
	} else {
		s["type"] = typ
	}
	return s
}

// sureField reports whether surelyValid knows every keyword of the
// field's schema: a choice's enum, a text's length bounds (no pattern), a
// rating's range. A keyword fieldSchema learns later leaves the field to
// the schema until surelyValid learns it too.
func sureField(f *Field) bool {
	known := map[Kind][]string{
		KindChoice: {"enum"},
		KindText:   {"minLength", "maxLength"},
		KindRating: {"minimum", "maximum"},
	}[f.Kind]
	if known == nil {
		return false
	}
	for k := range fieldSchema(f, !f.Required) {
		if k != "title" && k != "description" && k != "type" && !slices.Contains(known, k) {
			return false
		}
	}
	return true
}

func optionValues(f *Field, null bool) []any {
	var out []any
	for _, o := range f.Options {
		out = append(out, o.Value)
	}
	if null {
		out = append(out, nil)
	}
	return out
}

func marshalSchema(s map[string]any) (json.RawMessage, error) {
	b, err := jsonappend.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode judgment schema: %w", err)
	}
	return b, nil
}

// compileSchema compiles a schema document. A validated template always
// compiles; an error here is a bug of this package.
func compileSchema(name string, doc []byte) (*jsonschema.Schema, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("compile judgment schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "https://docket.dev/schemas/" + name
	if err := c.AddResource(url, v); err != nil {
		return nil, fmt.Errorf("compile judgment schema: %w", err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("compile judgment schema: %w", err)
	}
	return s, nil
}
