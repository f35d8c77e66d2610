package flow

import (
	"testing"
)

func TestStepInput(t *testing.T) {
	t.Parallel()
	conf := 0.75
	records := map[string]*Record{
		"fetch": {Instances: []Instance{{State: StepSucceeded, Output: []byte(`{"images":["x.png","y.png"],"big":12345678901234567890}`)}}},
		"label": {Instances: []Instance{{State: StepSucceeded, Output: []byte(`{"same":"yes"}`), Confidence: &conf}}},
		"thumbs": {FanOut: true, Instances: []Instance{
			{Index: 0, State: StepSucceeded, Output: []byte(`"x-small.png"`)},
			{Index: 1, State: StepSkipped},
			{Index: 2, State: StepSucceeded, Output: []byte(`"z-small.png"`)},
		}},
		"review": {Instances: []Instance{{State: StepSkipped}}},
		"empty":  {FanOut: true},
	}
	got, err := StepInput([]byte(`{"sku":1}`), records, []string{"fetch", "label", "thumbs", "review", "empty", "later"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"input":{"sku":1},"steps":{` +
		`"empty":{"state":"SUCCEEDED","output":[],"confidence":[]},` +
		`"fetch":{"state":"SUCCEEDED","output":{"images":["x.png","y.png"],"big":12345678901234567890},"confidence":null},` +
		`"label":{"state":"SUCCEEDED","output":{"same":"yes"},"confidence":0.75},` +
		`"later":{"state":"PENDING","output":null,"confidence":null},` +
		`"review":{"state":"SKIPPED","output":null,"confidence":null},` +
		`"thumbs":{"state":"SUCCEEDED","output":["x-small.png",null,"z-small.png"],"confidence":[null,null,null]}}}`
	if string(got) != want {
		t.Fatalf("input\n got %s\nwant %s", got, want)
	}

	got, err = StepInput(nil, nil, nil, &Item{Value: []byte(`"y.png"`), Index: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"input":null,"steps":{},"item":"y.png","index":1}`; string(got) != want {
		t.Fatalf("fan-out instance input %s, want %s", got, want)
	}
	got, err = StepInput(nil, nil, nil, &Item{Value: []byte(`0`), Index: 0})
	if err != nil || string(got) != `{"input":null,"steps":{},"item":0,"index":0}` {
		t.Fatalf("index 0 instance input %s, %v", got, err)
	}
	if _, err := StepInput([]byte(`{`), nil, nil, nil); err == nil {
		t.Fatal("invalid run input accepted")
	}
}

func TestRunOutput(t *testing.T) {
	t.Parallel()
	g, err := NewGraph(&Definition{Name: "w", Steps: []Step{
		{Name: "a", Job: &JobStep{Type: "t"}},
		{Name: "b", Job: &JobStep{Type: "t"}, After: []string{"a"}},
		{Name: "c", Job: &JobStep{Type: "t"}, After: []string{"a"}, ForEach: "steps.a.output"},
		{Name: "d", Job: &JobStep{Type: "t"}, After: []string{"a"}, If: "false"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := RunOutput(g, map[string]*Record{
		"a": {Instances: []Instance{{State: StepSucceeded, Output: []byte(`[1,2]`)}}},
		"b": {Instances: []Instance{{State: StepSucceeded, Output: []byte(`{"ok":true}`)}}},
		"c": {FanOut: true, Instances: []Instance{{Index: 0, State: StepSucceeded, Output: []byte(`2`)}, {Index: 1, State: StepSucceeded, Output: []byte(`4`)}}},
		"d": {Instances: []Instance{{State: StepSkipped}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"b":{"ok":true},"c":[2,4],"d":null}`; string(out) != want {
		t.Fatalf("run output %s, want %s", out, want)
	}
}

// TestInputsInstance: the shared part encoded once gives, per instance,
// what StepInput gives byte for byte, and Len is its length.
func TestInputsInstance(t *testing.T) {
	t.Parallel()
	records := map[string]*Record{"fetch": {Instances: []Instance{{State: StepSucceeded, Output: []byte(`{"a": [1, 2], "b": "<&>"}`)}}}}
	in, err := NewInputs([]byte(`{"sku": 1, "x": 1e3}`), records, []string{"fetch"})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range []*Item{nil, {Value: []byte(`{"u": "a<b"}`), Index: 0}, {Value: nil, Index: 7}, {Value: []byte(` 12 `), Index: 10000}} {
		want, err := StepInput([]byte(`{"sku": 1, "x": 1e3}`), records, []string{"fetch"}, item)
		if err != nil {
			t.Fatal(err)
		}
		got, err := in.Instance(item)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("instance %+v\n got %s\nwant %s", item, got, want)
		}
		tail, err := ItemTail(item)
		if err != nil {
			t.Fatal(err)
		}
		if n := in.Len(tail); n != len(want) {
			t.Fatalf("Len of %+v = %d; want %d", item, n, len(want))
		}
		if got := in.With(tail); string(got) != string(want) {
			t.Fatalf("With of %+v\n got %s\nwant %s", item, got, want)
		}
	}
	if _, err := in.Instance(&Item{Value: []byte(`{`)}); err == nil {
		t.Fatal("an item that is not JSON accepted")
	}
}

// TestInstanceInput: the shape of a step with an `input` expression.
func TestInstanceInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		value []byte
		item  *Item
		want  string
	}{
		{[]byte(`{"url":"a<b"}`), nil, `{"input":{"url":"a<b"}}`},
		{nil, nil, `{"input":null}`},
		{[]byte(`"x"`), &Item{Value: []byte(`{"id":3}`), Index: 2}, `{"input":"x","item":{"id":3},"index":2}`},
		{[]byte(`1`), &Item{Value: []byte(`0`), Index: 0}, `{"input":1,"item":0,"index":0}`},
	} {
		got, err := InstanceInput(c.value, c.item)
		if err != nil || string(got) != c.want {
			t.Fatalf("InstanceInput(%s, %+v) = %s, %v; want %s", c.value, c.item, got, err, c.want)
		}
	}
}
