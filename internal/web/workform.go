package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
)

// The work page's form is drawn from the compiled task's fields (the same
// definitions the API's JSON Schema comes from) and read back into a
// judgment by judgmentFromForm; the judgment then goes through
// Client.JudgmentSubmit, the API's validation, so a form can accept nothing
// the API would refuse.

// formPrefix prefixes the form name of a field's input: a field may be
// named "csrf".
const formPrefix = "f."

// workField is one answer field as the work page draws it.
type workField struct {
	docket.TaskField
	// Input is the name of the field's form control(s); ID the id of the
	// first one (for its label).
	Input, ID string
	// Choices are the options of choice and multi_choice fields, and the
	// points 1..Scale of a rating field.
	Choices []workChoice
	// Value is the entered value of text and number fields, and the boxes
	// of a bbox field as JSON.
	Value string
	// ImageURL is the image a bbox field's boxes are drawn on; ImageError
	// says why there is none.
	ImageURL   string
	ImageError string
	// Step of a number input: "1" for integers, else "any".
	Step string
	// MinText, MaxText are a number field's bounds as attributes ("" when
	// none).
	MinText, MaxText string
	// BoxesMax is the most boxes of a bbox field.
	BoxesMax int
	// Errors are the problems of the field's last submitted value.
	Errors []string
	// Autofocus: the field's first control takes the focus when the page
	// opens (the first field in error after a refused answer).
	Autofocus bool
}

// workChoice is one option (or rating point) of a field.
type workChoice struct {
	ID, Value, Label string
	// Key is the keyboard shortcut that picks it; "" for none.
	Key     string
	Checked bool
}

// workDisplay is one display block with the value it reads from the unit.
type workDisplay struct {
	Kind  string // text, image, link
	Label string
	// Text is a text block's value (strings as they are, other JSON as
	// JSON); Block marks a multi-line (object or array) value.
	Text  string
	Block bool
	// URL is an image's or a link's address; Problem says why a block
	// shows nothing.
	URL     string
	Problem string
}

// unitValue reads a "unit.a.b" path from a unit's input.
func unitValue(input map[string]any, from string) (any, bool) {
	path, ok := strings.CutPrefix(from, "unit.")
	if !ok {
		return nil, false
	}
	var cur any = input
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// webURL returns u when it is an http(s) URL or a path of this site: the
// only addresses an image or a link of a unit may have.
func webURL(v any) (string, string) {
	s, ok := v.(string)
	if !ok {
		return "", "not a URL but " + jsonKind(v)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", "not a URL"
	case u.Scheme == "http" || u.Scheme == "https":
		if u.Host == "" {
			return "", "a URL without a host"
		}
		return s, ""
	case u.Scheme == "" && u.Host == "" && strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "//") && !strings.Contains(s, "\\"):
		return s, ""
	}
	return "", "only http and https URLs are shown"
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	}
	return "an object"
}

// decodeInput parses a unit's input for display; a unit's input is a JSON
// object (anything else shows nothing).
func decodeInput(raw json.RawMessage) map[string]any {
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil
	}
	return m
}

// jsonText is v as JSON for a person to read, indented by indent: as
// written, without encoding/json's HTML escapes ("Tom \u0026 Jerry"),
// since the page's template escapes what it shows.
func jsonText(v any, indent string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// workDisplays resolves the task's display blocks against the unit's input.
func workDisplays(blocks []docket.TaskDisplay, input map[string]any) []workDisplay {
	out := make([]workDisplay, 0, len(blocks))
	for _, b := range blocks {
		d := workDisplay{Kind: string(b.Kind), Label: b.Label}
		v, ok := unitValue(input, b.From)
		switch {
		case !ok:
			d.Problem = "the unit has no " + b.From
		case b.Kind == task.DisplayText:
			switch v := v.(type) {
			case string:
				d.Text = v
			case map[string]any, []any:
				d.Text, d.Block = jsonText(v, "  "), true
			default:
				d.Text = jsonText(v, "")
			}
		default: // image, link
			d.URL, d.Problem = webURL(v)
		}
		out = append(out, d)
	}
	return out
}

// shortcutKeys gives every option its keyboard shortcut: the key the
// template gives it, else — in the first choice, multi_choice or rating
// field that gives none — the digits 1–9 by position (a digit another
// option already uses is skipped).
func shortcutKeys(fields []docket.TaskField) map[string][]string {
	used := map[string]bool{}
	for _, f := range fields {
		for _, o := range f.Options {
			if o.Key != "" {
				used[o.Key] = true
			}
		}
	}
	keys := map[string][]string{}
	digits := false
	for _, f := range fields {
		var n int
		switch f.Kind {
		case task.KindChoice, task.KindMultiChoice:
			n = len(f.Options)
		case task.KindRating:
			n = f.Scale
		default:
			continue
		}
		ks := make([]string, n)
		explicit := false
		for i := range min(n, len(f.Options)) {
			ks[i] = f.Options[i].Key
			explicit = explicit || ks[i] != ""
		}
		if !explicit && !digits {
			digits = true
			for i := range min(n, 9) {
				if d := strconv.Itoa(i + 1); !used[d] {
					ks[i] = d
				}
			}
		}
		keys[f.Name] = ks
	}
	return keys
}

// workFields draws the fields, filled with the submitted form (nil: a
// fresh page) and with each field's errors.
func workFields(fields []docket.TaskField, input map[string]any, form url.Values, errs map[string][]string) []workField {
	keys := shortcutKeys(fields)
	out := make([]workField, 0, len(fields))
	for _, f := range fields {
		w := workField{TaskField: f, Input: formPrefix + f.Name, ID: "f-" + f.Name, Errors: errs[f.Name]}
		vals := form[w.Input]
		picked := func(v string) bool {
			for _, x := range vals {
				if x == v {
					return true
				}
			}
			return false
		}
		first := ""
		if len(vals) > 0 {
			first = vals[0]
		}
		switch f.Kind {
		case task.KindChoice, task.KindMultiChoice:
			for i, o := range f.Options {
				label := o.Label
				if label == "" {
					label = o.Value
				}
				w.Choices = append(w.Choices, workChoice{ID: fmt.Sprintf("%s-%d", w.ID, i), Value: o.Value, Label: label,
					Key: keys[f.Name][i], Checked: picked(o.Value)})
			}
		case task.KindRating:
			for i := range f.Scale {
				v := strconv.Itoa(i + 1)
				w.Choices = append(w.Choices, workChoice{ID: fmt.Sprintf("%s-%d", w.ID, i), Value: v, Label: v,
					Key: keys[f.Name][i], Checked: picked(v)})
			}
		case task.KindText:
			w.Value = first
		case task.KindNumber:
			w.Value, w.Step = first, "any"
			if f.Integer {
				w.Step = "1"
			}
			if f.Min != nil {
				w.MinText = strconv.FormatFloat(*f.Min, 'g', -1, 64)
			}
			if f.Max != nil {
				w.MaxText = strconv.FormatFloat(*f.Max, 'g', -1, 64)
			}
		case task.KindBBox:
			w.Value = first
			if w.Value == "" {
				w.Value = "[]"
			}
			w.BoxesMax = task.BoxesMaxDefault
			if f.Max != nil {
				w.BoxesMax = int(*f.Max)
			}
			if v, ok := unitValue(input, f.Image); !ok {
				w.ImageError = "the unit has no " + f.Image
			} else {
				w.ImageURL, w.ImageError = webURL(v)
			}
		}
		out = append(out, w)
	}
	return out
}

// judgmentFromForm reads a judgment from the work page's form: one entry
// per field the form gives, in field order. A field left empty is not
// given (the task's validation then says whether it was required), but a
// required multi_choice with nothing ticked is [] and a required bbox with
// no box [] (which the field's minimum may allow). What no
// judgment could hold — two values for one choice, a number that is not
// one — is returned as problems keyed by field name, and the field is left
// out of the judgment. Form keys that name no field are ignored.
func judgmentFromForm(fields []docket.TaskField, form url.Values) (json.RawMessage, map[string][]string) {
	var b bytes.Buffer
	b.WriteByte('{')
	problems := map[string][]string{}
	put := func(name string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			problems[name] = append(problems[name], "cannot be encoded: "+err.Error())
			return
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		key, _ := json.Marshal(name)
		b.Write(key)
		b.WriteByte(':')
		b.Write(data)
	}
	for _, f := range fields {
		vals := form[formPrefix+f.Name]
		single := func() (string, bool) {
			switch {
			case len(vals) == 0 || len(vals) == 1 && vals[0] == "":
				return "", false
			case len(vals) > 1:
				problems[f.Name] = append(problems[f.Name], "must be one value, not "+strconv.Itoa(len(vals)))
				return "", false
			}
			return vals[0], true
		}
		switch f.Kind {
		case task.KindChoice:
			if v, ok := single(); ok {
				put(f.Name, v)
			}
		case task.KindMultiChoice:
			sel := []string{}
			for _, v := range vals {
				if v != "" {
					sel = append(sel, v)
				}
			}
			if len(sel) > 0 || f.Required {
				put(f.Name, sel)
			}
		case task.KindText:
			if v, ok := single(); ok {
				// Browsers send a textarea's line breaks as CRLF; a
				// judgment's text counts characters, and a line break is one.
				put(f.Name, strings.ReplaceAll(v, "\r\n", "\n"))
			}
		case task.KindNumber:
			if v, ok := single(); ok {
				x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
					problems[f.Name] = append(problems[f.Name], "must be a number")
					continue
				}
				put(f.Name, x)
			}
		case task.KindRating:
			if v, ok := single(); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					problems[f.Name] = append(problems[f.Name], fmt.Sprintf("must be a whole number from 1 to %d", f.Scale))
					continue
				}
				put(f.Name, n)
			}
		case task.KindBBox:
			v, ok := single()
			if !ok {
				if len(vals) > 1 {
					continue
				}
				v = "[]"
			}
			if strings.TrimSpace(v) == "[]" && !f.Required {
				continue
			}
			if !json.Valid([]byte(v)) || !strings.HasPrefix(strings.TrimSpace(v), "[") {
				problems[f.Name] = append(problems[f.Name], "the boxes must be a JSON list of {label, x, y, w, h}")
				continue
			}
			put(f.Name, json.RawMessage(v))
		}
	}
	b.WriteByte('}')
	return b.Bytes(), problems
}

// fieldOf is the field a problem's path names ("boxes[1].w" → "boxes");
// "" for the judgment as a whole.
func fieldOf(path string) string {
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return path
}
