// Package task holds human task templates: what a contributor sees (display
// blocks reading the unit's input) and what they answer (typed fields), with
// the defaults of the pools that use the template (judgments per unit,
// assignment duration, skills, channels, priority, aggregation per field).
//
// It is pure: no I/O, no database, no clock. It decodes a template strictly
// ([Decode], [Parse]), validates it listing every problem with its JSON path
// ([Validate]), fills its defaults in one place ([Template.WithDefaults]),
// gives its canonical form and content hash for versioning ([Canonical],
// [Hash]), and compiles it ([Compile]) into the form the API and the web
// work page share: the fields with their limits, the display blocks, a JSON
// Schema (draft 2020-12) of a judgment and a validator for judgments and
// golden answers. [Compare] and [Compiled.Score] score a judgment against a
// golden unit's known answer, field by field.
package task

import "encoding/json"

// Limits of a template.
const (
	// MaxTemplateBytes is the largest JSON document Decode accepts.
	MaxTemplateBytes = 1 << 20
	// MaxJudgmentBytes is the largest judgment (or golden answer) accepted.
	MaxJudgmentBytes = 256 << 10
	// MaxFields is the most fields one template may have.
	MaxFields = 50
	// MaxDisplay is the most display blocks one template may have.
	MaxDisplay = 50
	// MaxOptions is the most options of a choice or multi_choice field.
	MaxOptions = 100
	// MaxLabels is the most box labels of a bbox field.
	MaxLabels = 50
	// MaxBoxes is the largest `max` of a bbox field.
	MaxBoxes = 1000
	// MaxTags is the most skills, and the most channels, of a template.
	MaxTags = 50
	// MaxTitleLen is the longest title, in bytes.
	MaxTitleLen = 200
	// MaxInstructionsLen is the longest instructions text, in bytes.
	MaxInstructionsLen = 20_000
	// MaxLabelLen is the longest label, help text, option value or box
	// label, in bytes.
	MaxLabelLen = 500
	// MaxTokenLen is the longest option value, option key, box label, skill
	// or channel, in bytes.
	MaxTokenLen = 64
	// MaxPatternLen is the longest text pattern, in bytes.
	MaxPatternLen = 1000
	// MaxTextLength is the largest maxLength of a text field, in characters.
	MaxTextLength = 100_000
	// MaxScale is the largest scale of a rating field.
	MaxScale = 10
	// MaxJudgmentsPerUnit is the largest judgmentsPerUnit.max.
	MaxJudgmentsPerUnit = 100
	// MinTakesPerSecond and MaxTakesPerSecond bound takesPerSecond and
	// takesPerSecondPerContributor when they are not 0 (no limit): at
	// least one take a day (a slower rate answered a take 429 with a
	// Retry-After of centuries), at most a million a second.
	MinTakesPerSecond = 1.0 / 86400
	MaxTakesPerSecond = 1_000_000
	// MinAssignmentSeconds and MaxAssignmentSeconds bound assignmentSeconds.
	MinAssignmentSeconds = 30
	MaxAssignmentSeconds = 24 * 3600
)

// Defaults, filled by [Template.WithDefaults].
const (
	// AssignmentSecondsDefault is how long an assignment lasts when the
	// template does not say.
	AssignmentSecondsDefault = 900
	// PriorityDefault is the priority of a template that gives none. As for
	// jobs, 0 comes first and 9 last.
	PriorityDefault = 1
	// JudgmentsMinDefault is judgmentsPerUnit.min when not given;
	// judgmentsPerUnit.max defaults to min (no dynamic overlap).
	JudgmentsMinDefault = 3
	// ScaleDefault is the scale of a rating field that gives none (1..5).
	ScaleDefault = 5
	// TextMaxLengthDefault is the maxLength of a text field that gives none.
	TextMaxLengthDefault = 10_000
	// BoxesMaxDefault is the `max` of a bbox field that gives none.
	BoxesMaxDefault = 100
	// IoUDefault is the IoU a box must reach to match a golden box.
	IoUDefault = 0.5
	// AggregationKeepAll is the method of text and bbox fields: every answer
	// is kept, none is inferred (aggregate.Text; docket has no box
	// consensus yet).
	AggregationKeepAll = "keep_all"
)

// Template is a task template as the API takes it (`PUT /v1/tasks/{name}`).
// Zero values mean "the default" where a default is documented.
type Template struct {
	// Title is shown to contributors; required.
	Title string `json:"title"`
	// Instructions are shown above the work; plain text.
	Instructions string `json:"instructions,omitempty"`
	// Display lists what the contributor sees of the unit, in order.
	Display []Display `json:"display,omitempty"`
	// Fields lists what the contributor answers, in order; at least one.
	Fields []Field `json:"fields"`
	// JudgmentsPerUnit: how many judgments a unit gets.
	JudgmentsPerUnit JudgmentsPerUnit `json:"judgmentsPerUnit"`
	// AssignmentSeconds is the lease of one assignment; default
	// AssignmentSecondsDefault.
	AssignmentSeconds int `json:"assignmentSeconds,omitempty"`
	// Skills a contributor must all have; a set (canonically sorted).
	Skills []string `json:"skills,omitempty"`
	// Channels a contributor must share one of (none: any); a set.
	Channels []string `json:"channels,omitempty"`
	// Priority orders the work offered to contributors: 0 first … 9 last;
	// default PriorityDefault.
	Priority *int `json:"priority,omitempty"`
	// TakesPerSecond is the pool's safe rate: the most assignments one
	// server node hands out of the pool per second (a token bucket per
	// pool per node, holding one second's worth); a take past it is
	// refused (HTTP 429 with Retry-After). 0, the default: no limit;
	// otherwise between MinTakesPerSecond (one a day) and
	// MaxTakesPerSecond.
	TakesPerSecond float64 `json:"takesPerSecond,omitempty"`
	// TakesPerSecondPerContributor is the same for each contributor in the
	// pool, with the same bounds. 0, the default: no limit.
	TakesPerSecondPerContributor float64 `json:"takesPerSecondPerContributor,omitempty"`
	// Quality are the quality-control settings the task's pools get
	// (docs/quality.md: test questions, trust, behaviour checks), as a
	// JSON object with its keys sorted; none: the defaults. This package
	// keeps them as they are; package quality decodes and validates them
	// (the client refuses a task whose settings do not decode).
	Quality json.RawMessage `json:"quality,omitempty"`
}

// JudgmentsPerUnit is the overlap of a unit: it gets Min judgments, and one
// more at a time while its confidence is below TargetConfidence, up to Max.
type JudgmentsPerUnit struct {
	// Min: default JudgmentsMinDefault.
	Min int `json:"min,omitempty"`
	// Max: default Min.
	Max int `json:"max,omitempty"`
	// TargetConfidence in [0,1]; 0 (the default) finalizes at Min.
	TargetConfidence float64 `json:"targetConfidence,omitempty"`
}

// DisplayKind is how a display block shows its value.
type DisplayKind string

// The display kinds.
const (
	DisplayText  DisplayKind = "text"
	DisplayImage DisplayKind = "image"
	DisplayLink  DisplayKind = "link"
)

// Display is one block of what a contributor sees.
type Display struct {
	Kind DisplayKind `json:"kind"`
	// From is "unit." and a dotted path into the unit's input
	// ("unit.left", "unit.product.photo").
	From string `json:"from"`
	// Label is shown above the block.
	Label string `json:"label,omitempty"`
}

// Kind is the kind of a field.
type Kind string

// The field kinds.
const (
	KindChoice      Kind = "choice"
	KindMultiChoice Kind = "multi_choice"
	KindText        Kind = "text"
	KindNumber      Kind = "number"
	KindRating      Kind = "rating"
	KindBBox        Kind = "bbox"
)

// Kinds lists the field kinds.
func Kinds() []Kind {
	return []Kind{KindChoice, KindMultiChoice, KindText, KindNumber, KindRating, KindBBox}
}

// Field is one answer a contributor gives. Which options apply depends on
// Kind; an option of another kind is a validation error.
type Field struct {
	// Name is the key of the answer in a judgment: 1–64 bytes matching
	// [a-z][a-z0-9_]*, not a CEL reserved word, unique in the template.
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Required: a judgment must give the field (not null).
	Required bool `json:"required,omitempty"`
	// Label is the question shown; Help a longer hint.
	Label string `json:"label,omitempty"`
	Help  string `json:"help,omitempty"`

	// Options of choice and multi_choice fields, in display order.
	Options []Option `json:"options,omitempty"`
	// Min and Max: for multi_choice, how many options may be selected
	// (default 0 and all of them); for number, the bounds of the value
	// (default none); for bbox, how many boxes (default 0 and
	// BoxesMaxDefault).
	Min *float64 `json:"min,omitempty"`
	Max *float64 `json:"max,omitempty"`
	// MinLength and MaxLength bound a text answer, in characters (Unicode
	// code points); MaxLength defaults to TextMaxLengthDefault.
	MinLength int `json:"minLength,omitempty"`
	MaxLength int `json:"maxLength,omitempty"`
	// Pattern is an RE2 regular expression a text answer must match
	// (anywhere: anchor it with ^…$ to match the whole answer).
	Pattern string `json:"pattern,omitempty"`
	// Integer: a number answer must be a whole number.
	Integer bool `json:"integer,omitempty"`
	// Tolerance: a number answer within this of the golden answer is
	// correct; default 0 (exact).
	Tolerance float64 `json:"tolerance,omitempty"`
	// Scale: a rating answer is an integer 1..Scale; default ScaleDefault.
	Scale int `json:"scale,omitempty"`
	// Image ("unit.<path>") is the image a bbox field's boxes are drawn on.
	Image string `json:"image,omitempty"`
	// Labels are the labels a box may have; at least one.
	Labels []string `json:"labels,omitempty"`
	// IoU: a box matches a golden box of the same label when their
	// intersection over union is at least this; default IoUDefault.
	IoU *float64 `json:"iou,omitempty"`

	// Aggregation is the method that turns the field's judgments into the
	// unit's result: a categorical method of package aggregate for choice,
	// rating and multi_choice (default "auto"), a numeric one for number
	// (default "median"), AggregationKeepAll for text and bbox.
	Aggregation string `json:"aggregation,omitempty"`
}

// Option is one answer of a choice or multi_choice field.
type Option struct {
	// Value is what a judgment holds: 1–64 bytes, unique in the field.
	Value string `json:"value"`
	// Label is what the contributor sees; default Value.
	Label string `json:"label,omitempty"`
	// Key is an optional keyboard shortcut: one character a-z or 0-9,
	// unique in the template (one key does one thing on the page).
	Key string `json:"key,omitempty"`
}

// Box is one bounding box of a bbox answer, in fractions of the image: x, y
// is the top-left corner, w, h the size; x+w ≤ 1 and y+h ≤ 1.
type Box struct {
	Label string  `json:"label"`
	X     float64 `json:"x"`
	Y     float64 `json:"y"`
	W     float64 `json:"w"`
	H     float64 `json:"h"`
}
