package task

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// Judgment is a validated judgment (or golden answer), keyed by field name,
// with one Go value per field given: string (choice, text), []string
// (multi_choice), float64 (number), int (rating), []Box (bbox). A field
// absent or null in the JSON is absent from the map.
type Judgment map[string]any

// ValidateJudgment checks a judgment's JSON: a flat object keyed by field
// name, every required field given (not null), no unknown field, no key
// twice, every value valid for its field. It returns nil or a
// *ValidationError naming every offending field by its path ("same",
// "boxes[1].w"), in the order of the template's fields.
func (c *Compiled) ValidateJudgment(data []byte) error {
	_, err := c.ParseJudgment(data)
	return err
}

// ParseJudgment validates a judgment as ValidateJudgment does and returns
// its values.
func (c *Compiled) ParseJudgment(data []byte) (Judgment, error) {
	return c.parse(data, c.judgment, subjectJudgment)
}

// ParseAnswer validates the known answer of a golden unit: shaped like a
// judgment, but it may give only some fields (those it gives are the ones
// scored), at least one.
func (c *Compiled) ParseAnswer(data []byte) (Judgment, error) {
	return c.parse(data, c.answer, subjectAnswer)
}

func (c *Compiled) parse(data []byte, schema *jsonschema.Schema, subject string) (Judgment, error) {
	var p problems
	if len(data) > MaxJudgmentBytes {
		p.add("", "the %s exceeds %d bytes", subject, MaxJudgmentBytes)
		return nil, p.err(subject)
	}
	root, ok := parseTree(data, &p)
	if !ok {
		return nil, p.err(subject)
	}
	if root.kind != 'o' {
		p.add("", "a %s must be a JSON object keyed by field name, not %s", subject, root.describe())
		return nil, p.err(subject)
	}
	if schema == c.judgment && p.len() == 0 && c.surelyValid(root) {
		// the schema would pass it: its walk (and root.value's copy)
		// skipped
	} else if err := schema.Validate(root.value()); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, fmt.Errorf("validate %s: %w", subject, err)
		}
		c.schemaProblems(&p, root, ve)
	}
	c.checkBeyondSchema(&p, root)
	j := Judgment{}
	for i, k := range root.keys {
		f, ok := c.Field(k)
		if !ok || root.vals[i].kind == 'z' || p.names(k) {
			continue
		}
		j[k] = value(f, root.vals[i])
	}
	if subject == subjectAnswer && p.len() == 0 && len(j) == 0 {
		p.add("", "a golden answer must give at least one field")
	}
	if p.len() > 0 {
		order := root.order()
		p.sortBy(func(fe FieldError) [2]int { return [2]int{c.rank(fe), position(order, fe.Field)} })
	}
	if err := p.err(subject); err != nil {
		return nil, err
	}
	return j, nil
}

// surelyValid reports whether root, a judgment's object without a
// repeated key, surely passes the judgment schema: every key a field of
// the template, every required field given and not null, and every value
// a choice among the field's options, a text of a field without a pattern
// and of a length within its bounds, or a rating written as a whole number
// of digits within its scale. Anything else (another kind of field, a
// pattern, a rating written 2.0) is left to the schema: false is "not
// sure", never "invalid" (FuzzSurelyValid; sureField says which fields it
// may decide). Most judgments of choice and
// text fields pass here, at a fraction of the schema's cost.
func (c *Compiled) surelyValid(root *node) bool {
	given := 0
	for i, k := range root.keys {
		at, ok := c.index[k]
		if !ok || !c.sure[at] {
			return false
		}
		f, v := &c.Fields[at], root.vals[i]
		if v.kind == 'z' {
			if f.Required {
				return false
			}
			continue
		}
		if f.Required {
			given++
		}
		switch f.Kind {
		case KindChoice:
			if v.kind != 's' || !slices.ContainsFunc(f.Options, func(o Option) bool { return o.Value == v.str }) {
				return false
			}
		case KindText:
			if v.kind != 's' {
				return false
			}
			lo := f.MinLength
			if f.Required {
				lo = max(lo, 1)
			}
			if n := utf8.RuneCountInString(v.str); n < lo || n > f.MaxLength {
				return false
			}
		case KindRating:
			if v.kind != 'n' || len(v.num) > 4 || strings.Trim(string(v.num), "0123456789") != "" {
				return false
			}
			if n, err := strconv.Atoi(string(v.num)); err != nil || n < 1 || n > f.Scale {
				return false
			}
		default:
			return false
		}
	}
	return given == c.required
}

// checkBeyondSchema checks what the schema cannot say, on every value
// the schema found no fault with: a number fits a float64, a box fits in
// its image.
func (c *Compiled) checkBeyondSchema(p *problems, root *node) {
	for i, k := range root.keys {
		f, ok := c.Field(k)
		v := root.vals[i]
		if !ok {
			continue
		}
		switch {
		case f.Kind == KindNumber && v.kind == 'n' && !p.has(k):
			if x, err := strconv.ParseFloat(string(v.num), 64); err != nil || math.IsInf(x, 0) {
				p.add(k, "must be a number of float64 range, not %s", v.num)
			}
		case f.Kind == KindBBox && v.kind == 'a':
			for n, box := range v.items {
				path := fmt.Sprintf("%s[%d]", k, n)
				// A little slack for decimal fractions that do not add up
				// exactly in binary.
				const slack = 1e-9
				if x, w, ok := coords(p, box, path, "x", "w"); ok && x+w > 1+slack {
					p.add(path+".w", "x + w must be at most 1 (the box ends past the right edge of the image: x %g + w %g)", x, w)
				}
				if y, h, ok := coords(p, box, path, "y", "h"); ok && y+h > 1+slack {
					p.add(path+".h", "y + h must be at most 1 (the box ends past the bottom edge of the image: y %g + h %g)", y, h)
				}
			}
		}
	}
}

// coords returns a position and a size of a box, when both are valid on
// their own (the schema checks them; past MaxProblems its problems are not
// listed, so their ranges are checked here again).
func coords(p *problems, box *node, path, posKey, sizeKey string) (pos, size float64, ok bool) {
	if box.kind != 'o' || p.has(join(path, posKey)) || p.has(join(path, sizeKey)) {
		return 0, 0, false
	}
	vp, vs := box.at([]string{posKey}), box.at([]string{sizeKey})
	if vp == nil || vs == nil || vp.kind != 'n' || vs.kind != 'n' {
		return 0, 0, false
	}
	pos, err1 := strconv.ParseFloat(string(vp.num), 64)
	size, err2 := strconv.ParseFloat(string(vs.num), 64)
	return pos, size, err1 == nil && err2 == nil && pos >= 0 && pos <= 1 && size > 0 && size <= 1
}

// value converts a field's valid value to its Go value.
func value(f *Field, v *node) any {
	num := func(n *node) float64 {
		x, _ := strconv.ParseFloat(string(n.num), 64)
		return x + 0
	}
	switch f.Kind {
	case KindMultiChoice:
		out := make([]string, len(v.items))
		for i, it := range v.items {
			out[i] = it.str
		}
		return out
	case KindNumber:
		return num(v)
	case KindRating:
		return int(num(v))
	case KindBBox:
		boxes := make([]Box, len(v.items))
		for i, it := range v.items {
			boxes[i] = Box{Label: it.at([]string{"label"}).str, X: num(it.at([]string{"x"})),
				Y: num(it.at([]string{"y"})), W: num(it.at([]string{"w"})), H: num(it.at([]string{"h"}))}
		}
		return boxes
	}
	return v.str // choice, text
}

// rank orders problems: the document as a whole first, then by the
// template's field order, unknown fields last; within a field by position.
func (c *Compiled) rank(fe FieldError) int {
	if fe.Field == "" {
		return -1
	}
	name := fe.Field
	if i := strings.IndexAny(name, ".["); i >= 0 {
		name = name[:i]
	}
	if i, ok := c.index[name]; ok {
		return i
	}
	return len(c.Fields)
}

// order numbers every path of the tree in document order.
func (n *node) order() map[string]int {
	out := map[string]int{}
	var walk func(n *node, path string)
	walk = func(n *node, path string) {
		out[path] = len(out)
		for i, k := range n.keys {
			walk(n.vals[i], join(path, k))
		}
		for i, it := range n.items {
			walk(it, fmt.Sprintf("%s[%d]", path, i))
		}
	}
	walk(n, "")
	return out
}

// position is a path's place in document order; a path the document does
// not have (a missing key) takes its parent's.
func position(order map[string]int, path string) int {
	for {
		if i, ok := order[path]; ok {
			return i
		}
		cut := strings.LastIndexAny(path, ".[")
		if cut < 0 {
			return 0
		}
		path = path[:cut]
	}
}

// schemaProblems turns the schema's errors into field problems, one per
// path, worded for the field they concern.
func (c *Compiled) schemaProblems(p *problems, root *node, ve *jsonschema.ValidationError) {
	var leaves []*jsonschema.ValidationError
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
		}
		for _, cause := range e.Causes {
			walk(cause)
		}
	}
	walk(ve)
	// A value of the wrong type may fail other keywords too (enum): say the
	// type.
	slices.SortStableFunc(leaves, func(a, b *jsonschema.ValidationError) int {
		_, ta := a.ErrorKind.(*kind.Type)
		_, tb := b.ErrorKind.(*kind.Type)
		return cmp.Compare(btoi(!ta), btoi(!tb))
	})
	var got problems
	for _, e := range leaves {
		if len(got.list) >= MaxProblems {
			got.dropped++ // past the cap, only counted
			continue
		}
		path := instancePath(e.InstanceLocation)
		v := root.at(e.InstanceLocation)
		var field *Field
		if len(e.InstanceLocation) > 0 {
			field, _ = c.Field(e.InstanceLocation[0])
		}
		inBox := field != nil && field.Kind == KindBBox && len(e.InstanceLocation) >= 2
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, m := range k.Missing {
				got.add(join(path, m), "is required")
			}
			continue
		case *kind.AdditionalProperties:
			for _, name := range k.Properties {
				if inBox {
					got.add(join(path, name), "is not a key of a box (label, x, y, w, h)")
				} else {
					got.add(join(path, name), "is not a field of this task")
				}
			}
			continue
		}
		if slices.ContainsFunc(got.list, func(fe FieldError) bool { return fe.Field == path }) {
			continue // one problem per path: the type, when it is wrong
		}
		got.add(path, "%s", c.message(e.ErrorKind, field, e.InstanceLocation, v))
	}
	for _, fe := range got.list {
		p.add(fe.Field, "%s", fe.Message)
	}
	p.dropped += got.dropped
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// message words one schema error for the field it concerns.
func (c *Compiled) message(k jsonschema.ErrorKind, f *Field, loc []string, v *node) string {
	what := "a value"
	if v != nil {
		what = v.describe()
	}
	switch k := k.(type) {
	case *kind.Type:
		if v != nil && v.kind == 'z' && len(loc) == 1 {
			return "is required (null is no answer)"
		}
		var want []string
		for _, w := range k.Want {
			if w != "null" {
				want = append(want, article(w))
			}
		}
		return fmt.Sprintf("must be %s, not %s", strings.Join(want, " or "), what)
	case *kind.Enum:
		var want []string
		for _, w := range k.Want {
			if w != nil {
				want = append(want, strconv.Quote(fmt.Sprint(w)))
			}
		}
		return fmt.Sprintf("must be one of %s, not %s", strings.Join(want, ", "), quoted(v))
	case *kind.MinItems:
		if f != nil && f.Kind == KindBBox {
			return fmt.Sprintf("must have at least %s, not %d", count(k.Want, "box"), k.Got)
		}
		return fmt.Sprintf("must select at least %s, not %d", count(k.Want, "option"), k.Got)
	case *kind.MaxItems:
		if f != nil && f.Kind == KindBBox {
			return fmt.Sprintf("must have at most %s, not %d", count(k.Want, "box"), k.Got)
		}
		return fmt.Sprintf("must select at most %s, not %d", count(k.Want, "option"), k.Got)
	case *kind.UniqueItems:
		return fmt.Sprintf("selects the same option twice (items %d and %d)", k.Duplicates[0], k.Duplicates[1])
	case *kind.MinLength:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("must be at least %d characters long, not %d", k.Want, k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long, not %d", k.Want, k.Got)
	case *kind.Pattern:
		return fmt.Sprintf("must match the pattern %s", k.Want)
	case *kind.Minimum, *kind.Maximum, *kind.ExclusiveMinimum:
		switch {
		case f != nil && f.Kind == KindRating:
			return fmt.Sprintf("must be an integer from 1 to %d, not %s", f.Scale, what)
		case f != nil && f.Kind == KindBBox:
			if coord := loc[len(loc)-1]; coord == "w" || coord == "h" {
				return fmt.Sprintf("must be greater than 0 and at most 1 (a fraction of the image), not %s", what)
			}
			return fmt.Sprintf("must be between 0 and 1 (a fraction of the image), not %s", what)
		case f != nil && f.Min != nil && f.Max != nil:
			return fmt.Sprintf("must be between %g and %g, not %s", *f.Min, *f.Max, what)
		case f != nil && f.Min != nil:
			return fmt.Sprintf("must be at least %g, not %s", *f.Min, what)
		case f != nil && f.Max != nil:
			return fmt.Sprintf("must be at most %g, not %s", *f.Max, what)
		}
	}
	return "is not valid (" + strings.Join(k.KeywordPath(), "/") + ")"
}

// count spells n things: "1 option", "2 options", "3 boxes".
func count(n int, thing string) string {
	switch {
	case n == 1:
		return "1 " + thing
	case strings.HasSuffix(thing, "x"):
		return fmt.Sprintf("%d %ses", n, thing)
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func article(jsonType string) string {
	switch jsonType {
	case "integer", "array", "object":
		return "an " + jsonType
	}
	return "a " + jsonType
}

func quoted(v *node) string {
	if v != nil && v.kind == 's' {
		return strconv.Quote(v.str)
	}
	if v == nil {
		return "this value"
	}
	return v.describe()
}

// instancePath spells a JSON pointer's tokens as a path: "boxes[1].w".
func instancePath(tokens []string) string {
	var b strings.Builder
	for i, t := range tokens {
		if i > 0 {
			if _, err := strconv.Atoi(t); err == nil {
				b.WriteString("[" + t + "]")
				continue
			}
			b.WriteByte('.')
		}
		b.WriteString(t)
	}
	return b.String()
}

// at returns the node at a JSON pointer's tokens, or nil.
func (n *node) at(tokens []string) *node {
	for _, t := range tokens {
		switch n.kind {
		case 'o':
			i := slices.Index(n.keys, t)
			if i < 0 {
				return nil
			}
			n = n.vals[i]
		case 'a':
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(n.items) {
				return nil
			}
			n = n.items[i]
		default:
			return nil
		}
	}
	return n
}

// SameJudgment reports whether a and b give the same answers: the same
// fields (a null is no answer, as an absent key), each with the same
// value, a multi_choice's options and a bbox's boxes in any order. It is
// how a judgment sent again in another spelling is told from other data.
func SameJudgment(a, b Judgment) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok {
			return false
		}
		switch va := va.(type) {
		case []string:
			vb, ok := vb.([]string)
			if !ok || len(va) != len(vb) {
				return false
			}
			sa, sb := slices.Clone(va), slices.Clone(vb)
			slices.Sort(sa)
			slices.Sort(sb)
			if !slices.Equal(sa, sb) {
				return false
			}
		case []Box:
			vb, ok := vb.([]Box)
			if !ok || len(va) != len(vb) {
				return false
			}
			order := func(x, y Box) int {
				return cmp.Or(cmp.Compare(x.Label, y.Label), cmp.Compare(x.X, y.X), cmp.Compare(x.Y, y.Y), cmp.Compare(x.W, y.W), cmp.Compare(x.H, y.H))
			}
			sa, sb := slices.Clone(va), slices.Clone(vb)
			slices.SortFunc(sa, order)
			slices.SortFunc(sb, order)
			if !slices.Equal(sa, sb) {
				return false
			}
		default:
			if va != vb {
				return false
			}
		}
	}
	return true
}
