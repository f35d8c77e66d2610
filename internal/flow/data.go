package flow

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Item is the element a fan-out instance works on, and its position.
type Item struct {
	Value []byte // JSON
	Index int
}

// Input is the document a step instance sees, both as its job payload (or
// unit input) and as the variables of its CEL expressions:
//
//	{"input": <run input>,
//	 "steps": {"<name>": {"state": "SUCCEEDED", "output": …, "confidence": …}},
//	 "item": …, "index": 0}
//
// For a fan-out parent, output and confidence are lists in index order
// (null for an instance without one, e.g. a skipped one). confidence is
// null for job and signal steps. item and index are present only in a
// fan-out instance. A step with an `input` expression carries
// InstanceInput's shape instead: the expression's value as "input", and
// no "steps".
type Input struct {
	Input json.RawMessage     `json:"input"`
	Steps map[string]StepView `json:"steps"`
	Item  json.RawMessage     `json:"item,omitempty"`
	Index *int                `json:"index,omitempty"`
}

// StepView is what dependents see of one step.
type StepView struct {
	State      StepState       `json:"state"`
	Output     json.RawMessage `json:"output"`
	Confidence json.RawMessage `json:"confidence"`
}

// View returns what dependents see of the step recorded in r.
func (r *Record) View() StepView {
	v := StepView{State: r.State()}
	if !r.FanOut {
		if len(r.Instances) > 0 {
			v.Output = jsonOrNull(r.Instances[0].Output)
			v.Confidence = confidenceJSON(r.Instances[0].Confidence)
		} else {
			v.Output, v.Confidence = jsonNull, jsonNull
		}
		return v
	}
	outs := make([]json.RawMessage, len(r.Instances))
	confs := make([]json.RawMessage, len(r.Instances))
	for i, in := range r.Instances {
		outs[i] = jsonOrNull(in.Output)
		confs[i] = confidenceJSON(in.Confidence)
	}
	v.Output = joinArray(outs)
	v.Confidence = joinArray(confs)
	return v
}

var jsonNull = json.RawMessage("null")

func jsonOrNull(b []byte) json.RawMessage {
	if len(b) == 0 {
		return jsonNull
	}
	return b
}

func confidenceJSON(c *float64) json.RawMessage {
	if c == nil {
		return jsonNull
	}
	return json.RawMessage(strconv.FormatFloat(*c, 'g', -1, 64))
}

func joinArray(elems []json.RawMessage) json.RawMessage {
	b := []byte{'['}
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, ']')
}

// StepInput builds the Input of one step instance from the run's input, the
// records of the steps named in include (the parents for a payload, the
// ancestors for CEL — see Graph), and item for a fan-out instance (nil
// otherwise). It returns the JSON document; outputs are copied byte for
// byte, so numbers keep their precision. A missing record counts as a
// PENDING step; an output that is not valid JSON is an error.
func StepInput(runInput []byte, records map[string]*Record, include []string, item *Item) ([]byte, error) {
	in, err := NewInputs(runInput, records, include)
	if err != nil {
		return nil, err
	}
	return in.Instance(item)
}

// Inputs builds the step inputs of the instances of one step (StepInput):
// the part they share, "input" and "steps", is encoded once, so a fan-out
// costs its shared part once and each instance only its item.
type Inputs struct {
	shared []byte // {"input":…,"steps":{…}}
}

// NewInputs encodes the part of the step input the instances share.
func NewInputs(runInput []byte, records map[string]*Record, include []string) (*Inputs, error) {
	in := Input{Input: jsonOrNull(runInput), Steps: make(map[string]StepView, len(include))}
	for _, name := range include {
		r := records[name]
		if r == nil {
			r = &Record{}
		}
		in.Steps[name] = r.View()
	}
	b, err := marshal(in)
	if err != nil {
		return nil, fmt.Errorf("build step input: %w", err)
	}
	return &Inputs{shared: b}, nil
}

// Instance returns the step input of the instance of item (nil: the one
// instance of a step without forEach).
func (s *Inputs) Instance(item *Item) ([]byte, error) {
	tail, err := ItemTail(item)
	if err != nil {
		return nil, err
	}
	return s.With(tail), nil
}

// With is the step input of the instance whose ItemTail is tail.
func (s *Inputs) With(tail []byte) []byte { return splice(s.shared, tail) }

// Len is len(With(tail)), without building it.
func (s *Inputs) Len(tail []byte) int {
	if tail == nil {
		return len(s.shared)
	}
	return len(s.shared) + len(tail) - 1
}

// ItemTail is an instance's own part of its step input,
// {"item":…,"index":N}; nil without item.
func ItemTail(item *Item) ([]byte, error) {
	if item == nil {
		return nil, nil
	}
	b, err := marshal(struct {
		Item  json.RawMessage `json:"item"`
		Index int             `json:"index"`
	}{jsonOrNull(item.Value), item.Index})
	if err != nil {
		return nil, fmt.Errorf("build step input: item %d: %w", item.Index, err)
	}
	return b, nil
}

// splice joins two JSON objects' members: {a} and {b} make {a,b}; a nil
// tail leaves head as it is.
func splice(head, tail []byte) []byte {
	if tail == nil {
		return head
	}
	b := make([]byte, 0, len(head)+len(tail))
	b = append(b, head[:len(head)-1]...)
	b = append(b, ',')
	return append(b, tail[1:]...)
}

// InstanceInput is the step input of an instance of a step with an `input`
// expression: value (its JSON) in place of the run's input, no "steps",
// and the item and index of a fan-out instance:
//
//	{"input": <value>, "item": …, "index": 0}
func InstanceInput(value []byte, item *Item) ([]byte, error) {
	doc := struct {
		Input json.RawMessage `json:"input"`
		Item  json.RawMessage `json:"item,omitempty"`
		Index *int            `json:"index,omitempty"`
	}{Input: jsonOrNull(value)}
	if item != nil {
		doc.Item, doc.Index = jsonOrNull(item.Value), &item.Index
	}
	b, err := marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("build step input: %w", err)
	}
	return b, nil
}

// RunOutput is the output of a finished run: an object with, for each sink
// (a step without dependents), its output as dependents would see it
// (null when skipped, a list for a fan-out step).
func RunOutput(g *Graph, records map[string]*Record) ([]byte, error) {
	out := map[string]json.RawMessage{}
	for _, name := range g.Sinks() {
		r := records[name]
		if r == nil {
			r = &Record{}
		}
		out[name] = r.View().Output
	}
	b, err := marshal(out)
	if err != nil {
		return nil, fmt.Errorf("build run output: %w", err)
	}
	return b, nil
}
