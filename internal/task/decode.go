package task

import (
	"fmt"
	"math"
	"strconv"
)

// Decode reads a template from its JSON form, strictly: a syntax error,
// trailing data, a repeated key, an unknown key and a value of the wrong
// JSON type are refused with a *ValidationError naming every such field by
// its path ("fields[2].options[0].value"). null stands for an absent value.
// Decode does not validate the content (see Validate, and Parse for both).
// On error the template (nil when the document is not a JSON object) holds
// every field that decoded, so Parse can add the content problems of the
// others.
func Decode(data []byte) (*Template, error) {
	var p problems
	t := decodeInto(data, &p)
	return t, p.err(subjectTemplate)
}

// Parse decodes and validates a template, listing the problems of both in
// one *ValidationError (a field already named by a decoding problem is not
// named again by Validate).
func Parse(data []byte) (*Template, error) {
	var p problems
	t := decodeInto(data, &p)
	if t == nil {
		return nil, p.err(subjectTemplate)
	}
	decoding := problems{list: p.list}
	var v problems
	validateInto(&v, t)
	for _, fe := range v.list {
		if !decoding.names(fe.Field) {
			p.add(fe.Field, "%s", fe.Message)
		}
	}
	p.dropped += v.dropped
	if err := p.err(subjectTemplate); err != nil {
		return nil, err
	}
	return t, nil
}

func decodeInto(data []byte, p *problems) *Template {
	if len(data) > MaxTemplateBytes {
		p.add("", "the template exceeds %d bytes", MaxTemplateBytes)
		return nil
	}
	root, ok := parseTree(data, p)
	if !ok {
		return nil
	}
	if root.kind != 'o' {
		p.add("", "a task template must be a JSON object, not %s", root.describe())
		return nil
	}
	d := decoder{p: p}
	t := new(Template)
	d.object("", root, func(key, path string, v *node) bool {
		switch key {
		case "title":
			d.string(path, v, &t.Title)
		case "instructions":
			d.string(path, v, &t.Instructions)
		case "display":
			d.array(path, v, func(path string, v *node) {
				var b Display
				d.object(path, v, func(key, path string, v *node) bool {
					switch key {
					case "kind":
						d.string(path, v, (*string)(&b.Kind))
					case "from":
						d.string(path, v, &b.From)
					case "label":
						d.string(path, v, &b.Label)
					default:
						return false
					}
					return true
				})
				t.Display = append(t.Display, b)
			})
		case "fields":
			d.array(path, v, func(path string, v *node) {
				t.Fields = append(t.Fields, d.field(path, v))
			})
		case "judgmentsPerUnit":
			j := &t.JudgmentsPerUnit
			d.object(path, v, func(key, path string, v *node) bool {
				switch key {
				case "min":
					d.int(path, v, &j.Min)
				case "max":
					d.int(path, v, &j.Max)
				case "targetConfidence":
					d.float(path, v, &j.TargetConfidence)
				default:
					return false
				}
				return true
			})
		case "assignmentSeconds":
			d.int(path, v, &t.AssignmentSeconds)
		case "skills":
			d.strings(path, v, &t.Skills)
		case "channels":
			d.strings(path, v, &t.Channels)
		case "priority":
			var n int
			if d.int(path, v, &n) {
				t.Priority = &n
			}
		case "takesPerSecond":
			d.float(path, v, &t.TakesPerSecond)
		case "takesPerSecondPerContributor":
			d.float(path, v, &t.TakesPerSecondPerContributor)
		case "quality":
			switch v.kind {
			case 'z':
			case 'o':
				t.Quality = v.canonicalJSON()
			default:
				d.wrongType(path, v, "an object")
			}
		default:
			return false
		}
		return true
	})
	return t
}

func (d *decoder) field(path string, v *node) Field {
	var f Field
	d.object(path, v, func(key, path string, v *node) bool {
		switch key {
		case "name":
			d.string(path, v, &f.Name)
		case "kind":
			d.string(path, v, (*string)(&f.Kind))
		case "required":
			d.bool(path, v, &f.Required)
		case "label":
			d.string(path, v, &f.Label)
		case "help":
			d.string(path, v, &f.Help)
		case "options":
			d.array(path, v, func(path string, v *node) {
				var o Option
				d.object(path, v, func(key, path string, v *node) bool {
					switch key {
					case "value":
						d.string(path, v, &o.Value)
					case "label":
						d.string(path, v, &o.Label)
					case "key":
						d.string(path, v, &o.Key)
					default:
						return false
					}
					return true
				})
				f.Options = append(f.Options, o)
			})
		case "min":
			d.floatPtr(path, v, &f.Min)
		case "max":
			d.floatPtr(path, v, &f.Max)
		case "minLength":
			d.int(path, v, &f.MinLength)
		case "maxLength":
			d.int(path, v, &f.MaxLength)
		case "pattern":
			d.string(path, v, &f.Pattern)
		case "integer":
			d.bool(path, v, &f.Integer)
		case "tolerance":
			d.float(path, v, &f.Tolerance)
		case "scale":
			d.int(path, v, &f.Scale)
		case "image":
			d.string(path, v, &f.Image)
		case "labels":
			d.strings(path, v, &f.Labels)
		case "iou":
			d.floatPtr(path, v, &f.IoU)
		case "aggregation":
			d.string(path, v, &f.Aggregation)
		default:
			return false
		}
		return true
	})
	return f
}

// decoder reads typed values out of a tree, recording every problem.
type decoder struct{ p *problems }

func (d *decoder) wrongType(path string, v *node, want string) {
	d.p.add(path, "must be %s, not %s", want, v.describe())
}

// object calls fn for each key of an object in document order; fn returns
// false for a key it does not know, which is reported as unknown.
func (d *decoder) object(path string, v *node, fn func(key, path string, v *node) bool) {
	if v.kind == 'z' {
		return
	}
	if v.kind != 'o' {
		d.wrongType(path, v, "an object")
		return
	}
	for i, k := range v.keys {
		if !fn(k, join(path, k), v.vals[i]) {
			d.p.add(join(path, k), "unknown field")
		}
	}
}

func (d *decoder) array(path string, v *node, fn func(path string, v *node)) {
	if v.kind == 'z' {
		return
	}
	if v.kind != 'a' {
		d.wrongType(path, v, "an array")
		return
	}
	for i, item := range v.items {
		// Every item is passed on, null too, so that the decoded slice keeps
		// the document's indices.
		p := fmt.Sprintf("%s[%d]", path, i)
		if item.kind == 'z' {
			d.p.add(p, "must not be null")
		}
		fn(p, item)
	}
}

func (d *decoder) string(path string, v *node, into *string) {
	switch v.kind {
	case 'z':
	case 's':
		*into = v.str
	default:
		d.wrongType(path, v, "a string")
	}
}

func (d *decoder) strings(path string, v *node, into *[]string) {
	d.array(path, v, func(path string, v *node) {
		var s string
		d.string(path, v, &s)
		*into = append(*into, s)
	})
}

func (d *decoder) bool(path string, v *node, into *bool) {
	switch v.kind {
	case 'z':
	case 'b':
		*into = v.bool
	default:
		d.wrongType(path, v, "a boolean")
	}
}

// int reads an integer; it reports whether one was read.
func (d *decoder) int(path string, v *node, into *int) bool {
	switch v.kind {
	case 'z':
		return false
	case 'n':
		f, err := strconv.ParseFloat(string(v.num), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			d.p.add(path, "must be an integer, not %s", v.num)
			return false
		}
		*into = int(f)
		return true
	}
	d.wrongType(path, v, "an integer")
	return false
}

func (d *decoder) float(path string, v *node, into *float64) bool {
	switch v.kind {
	case 'z':
		return false
	case 'n':
		f, err := strconv.ParseFloat(string(v.num), 64)
		if err != nil {
			d.p.add(path, "must be a number of float64 range, not %s", v.num)
			return false
		}
		*into = f + 0 // no -0
		return true
	}
	d.wrongType(path, v, "a number")
	return false
}

func (d *decoder) floatPtr(path string, v *node, into **float64) {
	var f float64
	if d.float(path, v, &f) {
		*into = &f
	}
}
