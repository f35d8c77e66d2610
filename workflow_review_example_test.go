package docket_test

import (
	"encoding/json"
	"fmt"

	"github.com/docket-run/docket"
)

// A review step checks another human step's answer: here the labels the
// crowd was unsure of, and one run in twenty besides, drawn the same way
// every time for a run. Its task's verdict approves, corrects or rejects
// the label; publish reads the reviewed answer as steps.label.output.
func ExampleReviews() {
	def, err := docket.NewWorkflow("product-match").
		Human("label", "same-product").
		Human("review", "qa-review", docket.After("label"), docket.Reviews("label"),
			docket.If("steps.label.confidence < 0.8 || sample(0.05)")).
		Job("publish", "publish", docket.After("label", "review")).
		Definition()
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := json.Marshal(def.Steps[1])
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(b))

	// A review of a step that is not an ancestor is refused.
	_, err = docket.NewWorkflow("broken").
		Human("label", "same-product").
		Human("review", "qa-review", docket.Reviews("label")).
		Definition()
	fmt.Println(err)
	// Output:
	// {"name":"review","human":{"task":"qa-review","review":"label"},"after":["label"],"if":"steps.label.confidence \u003c 0.8 || sample(0.05)"}
	// invalid workflow definition: steps[1].human.review: step "review": review names step "label", which is not an ancestor of "review" (add it to after)
}
