package task

import "testing"

// BenchmarkValidateJudgment: a typical three-field template (the DESIGN §6
// example: a choice, a text and two boxes).
func BenchmarkValidateJudgment(b *testing.B) {
	c := compileString(b, string(readExample(b)))
	data := []byte(`{"same":"yes","note":"the logo is cropped","boxes":[{"label":"logo","x":0.1,"y":0.1,"w":0.2,"h":0.15},{"label":"barcode","x":0.6,"y":0.7,"w":0.3,"h":0.2}]}`)
	if err := c.ValidateJudgment(data); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.ValidateJudgment(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateJudgmentChoice: the crowd benchmark's judgment, one
// choice (surelyValid decides it without the schema).
func BenchmarkValidateJudgmentChoice(b *testing.B) {
	c := compileString(b, `{"title": "Benchmark: same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}]}`)
	data := []byte(`{"same": "yes"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.ParseJudgment(data); err != nil {
			b.Fatal(err)
		}
	}
}
