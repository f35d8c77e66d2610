package flow

import (
	"strings"
	"testing"
)

func hashOf(t *testing.T, doc string) string {
	t.Helper()
	def, err := Decode([]byte(doc))
	if err != nil {
		t.Fatalf("decode %s: %v", doc, err)
	}
	h, err := Hash(def)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHashIgnoresFormAndOrder(t *testing.T) {
	t.Parallel()
	base := `{"name":"w","steps":[
		{"name":"a","job":{"type":"t","timeout":"90s"}},
		{"name":"b","after":["a","c"],"human":{"task":"x","overrides":{"k":1,"j":[true]}},"if":"steps.a.output.ok"},
		{"name":"c","signal":{"timeout":"24h"}}]}`
	same := []string{
		// keys reordered, white space, steps and after reordered
		`{"steps":[{"signal":{"timeout":"24h"},"name":"c"},
		  {"human":{"overrides":{ "j":[ true ], "k":1 },"task":"x"},"if":"  steps.a.output.ok ","name":"b","after":["c","a"]},
		  {"job":{"timeout":"1m30s","type":"t"},"name":"a"}],"name":"w"}`,
		// an empty input is none
		strings.Replace(base, `"name":"a",`, `"name":"a","input":"",`, 1),
		// defaults spelled out
		`{"name":"w","steps":[
		{"name":"a","job":{"type":"t","queue":"t","timeout":"90s"},"trigger":"all_success","onFailure":"fail","after":[]},
		{"name":"b","after":["a","c"],"human":{"task":"x","overrides":{"k":1,"j":[true]}},"if":"steps.a.output.ok"},
		{"name":"c","signal":{"timeout":"1440m"}}]}`,
	}
	want := hashOf(t, base)
	if !strings.HasPrefix(want, "sha256:") || len(want) != len("sha256:")+64 {
		t.Fatalf("hash %q", want)
	}
	for i, doc := range same {
		if got := hashOf(t, doc); got != want {
			t.Errorf("variant %d: hash %s, want %s", i, got, want)
		}
	}
	different := []string{
		strings.Replace(base, `"90s"`, `"91s"`, 1),
		strings.Replace(base, `"k":1`, `"k":2`, 1),
		strings.Replace(base, `steps.a.output.ok`, `steps.a.output.ok == true`, 1),
		strings.Replace(base, `"type":"t"`, `"type":"t","priority":1`, 1),
		strings.Replace(base, `"type":"t"`, `"type":"t","queue":"q"`, 1),
		strings.Replace(base, `"name":"c",`, `"name":"c","onFailure":"continue",`, 1),
		strings.Replace(base, `"name":"w"`, `"name":"w2"`, 1),
		strings.Replace(base, `"name":"a",`, `"name":"a","input":"input.x",`, 1),
	}
	for i, doc := range different {
		if got := hashOf(t, doc); got == want {
			t.Errorf("changed variant %d has the same hash", i)
		}
	}
}

func TestCanonicalForm(t *testing.T) {
	t.Parallel()
	def, err := Decode([]byte(`{"name":"w","steps":[{"name":"b","after":["a"],"if":"steps.a.output.n < 3","input":" {'n': steps.a.output.n} ","job":{"type":"t","queue":"t"}},{"name":"a","signal":{"timeout":"60m"},"trigger":"all_done"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Canonical(def)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"w","steps":[{"name":"a","signal":{"timeout":"1h"},"trigger":"all_done"},{"name":"b","job":{"type":"t"},"after":["a"],"if":"steps.a.output.n < 3","input":"{'n': steps.a.output.n}"}]}`
	if string(got) != want {
		t.Fatalf("canonical\n got %s\nwant %s", got, want)
	}
	// Normalize does not touch its argument.
	if def.Steps[0].Name != "b" || def.Steps[0].Job.Queue != "t" {
		t.Fatal("Normalize changed the definition it was given")
	}
	again, err := Decode(got)
	if err != nil {
		t.Fatal(err)
	}
	if h1, _ := Hash(def); h1 != mustHash(t, again) {
		t.Fatal("the canonical form does not hash like the original")
	}
}

func mustHash(t *testing.T, def *Definition) string {
	t.Helper()
	h, err := Hash(def)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
