package task

import (
	"slices"

	"github.com/docket-run/docket/internal/aggregate"
)

// WithDefaults returns a deep copy of t with every default filled in. It is
// the one place defaults are decided; Validate, Canonical and Compile all
// work on its result. Fields of an unknown kind get no defaults.
func (t *Template) WithDefaults() *Template {
	out := t.clone()
	if out.AssignmentSeconds == 0 {
		out.AssignmentSeconds = AssignmentSecondsDefault
	}
	if out.Priority == nil {
		out.Priority = ptr(PriorityDefault)
	}
	j := &out.JudgmentsPerUnit
	if j.Min == 0 {
		j.Min = JudgmentsMinDefault
	}
	if j.Max == 0 {
		j.Max = j.Min
	}
	for i := range out.Fields {
		out.Fields[i].withDefaults()
	}
	return out
}

func (f *Field) withDefaults() {
	switch f.Kind {
	case KindChoice, KindMultiChoice:
		for i := range f.Options {
			if f.Options[i].Label == "" {
				f.Options[i].Label = f.Options[i].Value
			}
		}
		if f.Kind == KindMultiChoice {
			if f.Min == nil {
				f.Min = ptr(0.0)
			}
			if f.Max == nil {
				f.Max = ptr(float64(len(f.Options)))
			}
		}
	case KindText:
		if f.MaxLength == 0 {
			f.MaxLength = TextMaxLengthDefault
		}
	case KindNumber:
	case KindRating:
		if f.Scale == 0 {
			f.Scale = ScaleDefault
		}
	case KindBBox:
		if f.Min == nil {
			f.Min = ptr(0.0)
		}
		if f.Max == nil {
			f.Max = ptr(float64(BoxesMaxDefault))
		}
		if f.IoU == nil {
			f.IoU = ptr(IoUDefault)
		}
	default:
		return
	}
	if f.Aggregation == "" {
		f.Aggregation = DefaultAggregation(f.Kind)
	}
}

// DefaultAggregation is the aggregation method of a field of kind k that
// names none.
func DefaultAggregation(k Kind) string {
	switch k {
	case KindChoice, KindMultiChoice, KindRating:
		return string(aggregate.MethodAuto)
	case KindNumber:
		return string(aggregate.NumericMedian)
	case KindText, KindBBox:
		return AggregationKeepAll
	}
	return ""
}

// AggregationMethods lists the aggregation methods a field of kind k may
// name: the categorical methods of package aggregate for choice, rating
// and multi_choice (a multi_choice field is aggregated option by option),
// the numeric ones for number, keep_all for text and bbox.
func AggregationMethods(k Kind) []string {
	var out []string
	switch k {
	case KindChoice, KindMultiChoice, KindRating:
		for _, m := range aggregate.Methods() {
			out = append(out, string(m))
		}
		out = append(out, string(aggregate.MethodAuto))
	case KindNumber:
		for _, m := range aggregate.NumericMethods() {
			out = append(out, string(m))
		}
	case KindText, KindBBox:
		out = append(out, AggregationKeepAll)
	}
	return out
}

func (t *Template) clone() *Template {
	out := *t
	out.Display = slices.Clone(t.Display)
	out.Skills = slices.Clone(t.Skills)
	out.Channels = slices.Clone(t.Channels)
	out.Priority = clonePtr(t.Priority)
	out.Fields = make([]Field, len(t.Fields))
	for i, f := range t.Fields {
		f.Options = slices.Clone(f.Options)
		f.Labels = slices.Clone(f.Labels)
		f.Min, f.Max, f.IoU = clonePtr(f.Min), clonePtr(f.Max), clonePtr(f.IoU)
		out.Fields[i] = f
	}
	if t.Fields == nil {
		out.Fields = nil
	}
	return &out
}

func ptr[T any](v T) *T { return &v }

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	return ptr(*p)
}
