package task

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/docket-run/docket/internal/flow"
)

// MaxHelpLen is the longest help text of a field, in bytes.
const MaxHelpLen = 2000

// Validate checks a template (its defaults filled in first, see
// WithDefaults) and returns nil or a *ValidationError listing every problem
// with its path.
func Validate(t *Template) error {
	var p problems
	validateInto(&p, t)
	return p.err(subjectTemplate)
}

func validateInto(p *problems, raw *Template) {
	if raw == nil {
		p.add("", "the template is required")
		return
	}
	t := raw.WithDefaults()
	switch {
	case strings.TrimSpace(t.Title) == "":
		p.add("title", "is required")
	case len(t.Title) > MaxTitleLen:
		p.add("title", "must be at most %d bytes", MaxTitleLen)
	}
	if len(t.Instructions) > MaxInstructionsLen {
		p.add("instructions", "must be at most %d bytes", MaxInstructionsLen)
	}
	if len(t.Display) > MaxDisplay {
		p.add("display", "a template has at most %d display blocks, this one has %d", MaxDisplay, len(t.Display))
	}
	for i, b := range t.Display {
		path := fmt.Sprintf("display[%d]", i)
		switch b.Kind {
		case DisplayText, DisplayImage, DisplayLink:
		case "":
			p.add(path+".kind", "is required (text, image or link)")
		default:
			p.add(path+".kind", "must be text, image or link, not %q", b.Kind)
		}
		if msg := checkRef(b.From); msg != "" {
			p.add(path+".from", "%s", msg)
		}
		if len(b.Label) > MaxLabelLen {
			p.add(path+".label", "must be at most %d bytes", MaxLabelLen)
		}
	}
	switch {
	case len(t.Fields) == 0:
		p.add("fields", "a template needs at least one field")
	case len(t.Fields) > MaxFields:
		p.add("fields", "a template has at most %d fields, this one has %d", MaxFields, len(t.Fields))
	}
	names := map[string]int{}
	keys := map[string]string{} // option key → the option that has it
	for i := range t.Fields {
		f := &t.Fields[i]
		path := fmt.Sprintf("fields[%d]", i)
		if msg := flow.CheckStepName(f.Name); msg != "" {
			p.add(path+".name", "%s", msg)
		} else if first, dup := names[f.Name]; dup {
			p.add(path+".name", "duplicate field name %q (also fields[%d])", f.Name, first)
		} else {
			names[f.Name] = i
		}
		validateField(p, path, f, keys)
	}
	j := t.JudgmentsPerUnit
	minOK := j.Min >= 1 && j.Min <= MaxJudgmentsPerUnit
	if !minOK {
		p.add("judgmentsPerUnit.min", "must be between 1 and %d", MaxJudgmentsPerUnit)
	}
	switch {
	case !minOK:
	case j.Max > MaxJudgmentsPerUnit:
		p.add("judgmentsPerUnit.max", "must be at most %d", MaxJudgmentsPerUnit)
	case j.Max < j.Min:
		p.add("judgmentsPerUnit.max", "must be at least min (%d)", j.Min)
	}
	if !(j.TargetConfidence >= 0 && j.TargetConfidence <= 1) {
		p.add("judgmentsPerUnit.targetConfidence", "must be between 0 and 1")
	}
	if t.AssignmentSeconds < MinAssignmentSeconds || t.AssignmentSeconds > MaxAssignmentSeconds {
		p.add("assignmentSeconds", "must be between %d and %d", MinAssignmentSeconds, MaxAssignmentSeconds)
	}
	checkTags(p, "skills", t.Skills)
	checkTags(p, "channels", t.Channels)
	if *t.Priority < 0 || *t.Priority > 9 {
		p.add("priority", "must be between 0 and 9")
	}
	checkRate(p, "takesPerSecond", t.TakesPerSecond)
	checkRate(p, "takesPerSecondPerContributor", t.TakesPerSecondPerContributor)
}

// checkRate records a rate of takes that is negative, below one a day
// (but for 0, no limit), too large or not a number. The lower bound came
// after versions were stored with any positive rate: a stored version is
// held to r > 0 only, so that its pools keep working (CompileStored).
func checkRate(p *problems, field string, r float64) {
	low := MinTakesPerSecond
	if p.stored && r > 0 {
		low = r
	}
	if r != 0 && !(r >= low && r <= MaxTakesPerSecond) {
		p.add(field, "must be 0 (no limit) or between %g (one a day) and %d takes per second", MinTakesPerSecond, MaxTakesPerSecond)
	}
}

// applies lists, per kind, the kind-specific settings a field may give.
var applies = map[Kind][]string{
	KindChoice:      {"options"},
	KindMultiChoice: {"options", "min", "max"},
	KindText:        {"minLength", "maxLength", "pattern"},
	KindNumber:      {"min", "max", "integer", "tolerance"},
	KindRating:      {"scale"},
	KindBBox:        {"image", "labels", "min", "max", "iou"},
}

func validateField(p *problems, path string, f *Field, keys map[string]string) {
	if len(f.Label) > MaxLabelLen {
		p.add(path+".label", "must be at most %d bytes", MaxLabelLen)
	}
	if len(f.Help) > MaxHelpLen {
		p.add(path+".help", "must be at most %d bytes", MaxHelpLen)
	}
	allowed, known := applies[f.Kind]
	switch {
	case f.Kind == "":
		p.add(path+".kind", "is required (one of %s)", kindList())
		return
	case !known:
		p.add(path+".kind", "must be one of %s, not %q", kindList(), f.Kind)
		return
	}
	set := map[string]bool{
		"options": f.Options != nil, "min": f.Min != nil, "max": f.Max != nil,
		"minLength": f.MinLength != 0, "maxLength": f.MaxLength != 0, "pattern": f.Pattern != "",
		"integer": f.Integer, "tolerance": f.Tolerance != 0, "scale": f.Scale != 0,
		"image": f.Image != "", "labels": f.Labels != nil, "iou": f.IoU != nil,
	}
	for _, k := range []string{"options", "min", "max", "minLength", "maxLength", "pattern", "integer", "tolerance", "scale", "image", "labels", "iou"} {
		if set[k] && !slices.Contains(allowed, k) {
			p.add(path+"."+k, "is not a setting of a %s field", f.Kind)
		}
	}
	switch f.Kind {
	case KindChoice, KindMultiChoice:
		enough := validateOptions(p, path, f, keys)
		if f.Kind == KindMultiChoice && enough {
			lo, hi := *f.Min, *f.Max
			okLo := checkCount(p, path+".min", lo, 0, len(f.Options))
			if checkCount(p, path+".max", hi, 1, len(f.Options)) && okLo && hi < lo {
				p.add(path+".max", "must be at least min (%g)", lo)
			}
		}
	case KindText:
		if f.MinLength < 0 || f.MinLength > MaxTextLength {
			p.add(path+".minLength", "must be between 0 and %d", MaxTextLength)
		}
		switch {
		case f.MaxLength < 1 || f.MaxLength > MaxTextLength:
			p.add(path+".maxLength", "must be between 1 and %d", MaxTextLength)
		case f.MaxLength < f.MinLength:
			p.add(path+".maxLength", "must be at least minLength (%d)", f.MinLength)
		}
		switch {
		case len(f.Pattern) > MaxPatternLen:
			p.add(path+".pattern", "must be at most %d bytes", MaxPatternLen)
		case f.Pattern != "":
			if _, err := regexp.Compile(f.Pattern); err != nil {
				p.add(path+".pattern", "is not a valid RE2 regular expression: %v", err)
			}
		}
	case KindNumber:
		if f.Min != nil && f.Max != nil && *f.Max < *f.Min {
			p.add(path+".max", "must be at least min (%g)", *f.Min)
		}
		if f.Integer && f.Min != nil && f.Max != nil && math.Floor(*f.Max) < math.Ceil(*f.Min) {
			p.add(path+".max", "no integer lies between min (%g) and max (%g)", *f.Min, *f.Max)
		}
		if f.Tolerance < 0 {
			p.add(path+".tolerance", "must be at least 0")
		}
	case KindRating:
		if f.Scale < 2 || f.Scale > MaxScale {
			p.add(path+".scale", "must be between 2 and %d", MaxScale)
		}
	case KindBBox:
		if f.Image == "" {
			p.add(path+".image", "is required: the unit field holding the image (\"unit.photo\")")
		} else if msg := checkRef(f.Image); msg != "" {
			p.add(path+".image", "%s", msg)
		}
		switch {
		case len(f.Labels) == 0:
			p.add(path+".labels", "a bbox field needs at least one label")
		case len(f.Labels) > MaxLabels:
			p.add(path+".labels", "a bbox field has at most %d labels", MaxLabels)
		}
		seen := map[string]int{}
		for i, l := range f.Labels {
			lp := fmt.Sprintf("%s.labels[%d]", path, i)
			if msg := checkValue(l); msg != "" {
				p.add(lp, "%s", msg)
			} else if first, dup := seen[l]; dup {
				p.add(lp, "duplicate label %q (also labels[%d])", l, first)
			} else {
				seen[l] = i
			}
		}
		lo, hi := *f.Min, *f.Max
		okLo := checkCount(p, path+".min", lo, 0, MaxBoxes)
		if checkCount(p, path+".max", hi, 1, MaxBoxes) && okLo && hi < lo {
			p.add(path+".max", "must be at least min (%g)", lo)
		}
		if iou := *f.IoU; !(iou > 0 && iou <= 1) {
			p.add(path+".iou", "must be greater than 0 and at most 1")
		}
	}
	if methods := AggregationMethods(f.Kind); !slices.Contains(methods, f.Aggregation) {
		p.add(path+".aggregation", "unknown method %q for a %s field (want one of %s)", f.Aggregation, f.Kind, strings.Join(methods, ", "))
	}
}

// validateOptions checks the options of a choice or multi_choice field; it
// reports whether their number is right.
func validateOptions(p *problems, path string, f *Field, keys map[string]string) bool {
	least := 2
	if f.Kind == KindMultiChoice {
		least = 1
	}
	enough := false
	switch {
	case len(f.Options) < least:
		p.add(path+".options", "a %s field needs at least %s", f.Kind, count(least, "option"))
	case len(f.Options) > MaxOptions:
		p.add(path+".options", "a %s field has at most %d options", f.Kind, MaxOptions)
	default:
		enough = true
	}
	values := map[string]int{}
	for i, o := range f.Options {
		op := fmt.Sprintf("%s.options[%d]", path, i)
		if msg := checkValue(o.Value); msg != "" {
			p.add(op+".value", "%s", msg)
		} else if first, dup := values[o.Value]; dup {
			p.add(op+".value", "duplicate option %q (also options[%d])", o.Value, first)
		} else {
			values[o.Value] = i
		}
		if len(o.Label) > MaxLabelLen {
			p.add(op+".label", "must be at most %d bytes", MaxLabelLen)
		}
		if o.Key == "" {
			continue
		}
		if len(o.Key) != 1 || !(o.Key[0] >= 'a' && o.Key[0] <= 'z' || o.Key[0] >= '0' && o.Key[0] <= '9') {
			p.add(op+".key", "must be one character a-z or 0-9, not %q", o.Key)
		} else if other, dup := keys[o.Key]; dup {
			p.add(op+".key", "key %q is already the key of %s", o.Key, other)
		} else {
			keys[o.Key] = op
		}
	}
	return enough
}

// checkCount checks that v is an integer in [lo, hi]; it reports whether
// it is.
func checkCount(p *problems, path string, v float64, lo, hi int) bool {
	if v != math.Trunc(v) || v < float64(lo) || v > float64(hi) {
		p.add(path, "must be an integer between %d and %d", lo, hi)
		return false
	}
	return true
}

// checkValue checks an option value or a box label: 1–MaxTokenLen bytes,
// not blank, no surrounding white space.
func checkValue(s string) string {
	switch {
	case s == "":
		return "is required"
	case len(s) > MaxTokenLen:
		return fmt.Sprintf("must be at most %d bytes", MaxTokenLen)
	case strings.TrimSpace(s) != s:
		return "must not start or end with white space"
	}
	return ""
}

// checkTags checks a set of skills or channels.
func checkTags(p *problems, path string, tags []string) {
	if len(tags) > MaxTags {
		p.add(path, "at most %d %s", MaxTags, path)
	}
	seen := map[string]int{}
	for i, s := range tags {
		tp := fmt.Sprintf("%s[%d]", path, i)
		if msg := checkToken(s); msg != "" {
			p.add(tp, "%s", msg)
		} else if first, dup := seen[s]; dup {
			p.add(tp, "duplicate %q (also %s[%d])", s, path, first)
		} else {
			seen[s] = i
		}
	}
}

// CheckToken checks a skill or channel as a template's are: "" when it is
// 1–MaxTokenLen bytes of letters, digits and . _ - :, else the problem.
// A contributor's skills and channels follow the same rule, so that each
// can match a pool's.
func CheckToken(s string) string { return checkToken(s) }

// checkToken checks a skill or channel by the one rule (flow.CheckToken).
func checkToken(s string) string { return flow.CheckToken(s) }

// checkRef checks a reference to the unit's input: "unit." and a dotted
// path of segments of letters, digits, _ and -.
func checkRef(ref string) string {
	const hint = `must be "unit." and a path into the unit's input, e.g. "unit.photo" or "unit.product.title"`
	rest, ok := strings.CutPrefix(ref, "unit.")
	if !ok || len(ref) > 256 {
		if ref == "" {
			return "is required: " + hint
		}
		return hint
	}
	for _, seg := range strings.Split(rest, ".") {
		if seg == "" || len(seg) > MaxTokenLen {
			return hint
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
				return fmt.Sprintf("has invalid character %q: %s", r, hint)
			}
		}
	}
	return ""
}

func kindList() string {
	var s []string
	for _, k := range Kinds() {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}
