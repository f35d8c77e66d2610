package docket_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/docket-run/docket"
)

// A workflow built in Go is the same definition as its JSON form: fetch a
// product pair, have people label it, review uncertain labels, wait for an
// approval, make thumbnails of every image, then publish.
func ExampleNewWorkflow() {
	def, err := docket.NewWorkflow("product-match").
		Job("fetch", "fetch-pair", docket.StepMaxAttempts(5)).
		Human("label", "same-product", docket.After("fetch")).
		Human("review", "qa-review", docket.After("label"), docket.If("steps.label.confidence < 0.8")).
		Signal("approve", docket.After("fetch"), docket.StepTimeout(24*time.Hour)).
		Job("thumbs", "thumbnail", docket.After("fetch"), docket.ForEach("steps.fetch.output.images")).
		Job("publish", "publish", docket.After("label", "review", "approve", "thumbs"), docket.OnAllDone()).
		Definition()
	if err != nil {
		fmt.Println(err)
		return
	}
	// The JSON form, one step a line.
	fmt.Printf("{\"name\": %q,\n \"steps\": [\n", def.Name)
	for i, step := range def.Steps {
		var line strings.Builder
		enc := json.NewEncoder(&line)
		enc.SetEscapeHTML(false) // keep "<" readable
		if err := enc.Encode(step); err != nil {
			fmt.Println(err)
			return
		}
		sep := ","
		if i == len(def.Steps)-1 {
			sep = "]}"
		}
		fmt.Printf("  %s%s\n", strings.TrimSpace(line.String()), sep)
	}
	// Output:
	// {"name": "product-match",
	//  "steps": [
	//   {"name":"fetch","job":{"type":"fetch-pair","maxAttempts":5}},
	//   {"name":"label","human":{"task":"same-product"},"after":["fetch"]},
	//   {"name":"review","human":{"task":"qa-review"},"after":["label"],"if":"steps.label.confidence < 0.8"},
	//   {"name":"approve","signal":{"timeout":"24h"},"after":["fetch"]},
	//   {"name":"thumbs","job":{"type":"thumbnail"},"after":["fetch"],"forEach":"steps.fetch.output.images"},
	//   {"name":"publish","job":{"type":"publish"},"after":["label","review","approve","thumbs"],"trigger":"all_done"}]}
}
