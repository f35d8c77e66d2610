package task_test

import (
	"errors"
	"fmt"

	"github.com/docket-run/docket/internal/task"
)

// A template is parsed (decoded strictly and validated) and compiled once;
// the compiled form validates judgments and scores them against golden
// answers.
func Example() {
	tpl, err := task.Parse([]byte(`{
		"title": "Same product?",
		"fields": [
			{"name": "same", "kind": "choice", "required": true,
			 "options": [{"value": "yes"}, {"value": "no"}]},
			{"name": "price", "kind": "number", "min": 0, "tolerance": 0.5}]}`))
	if err != nil {
		panic(err)
	}
	c, err := task.Compile(tpl)
	if err != nil {
		panic(err)
	}

	err = c.ValidateJudgment([]byte(`{"same": "maybe", "price": -3, "colour": "red"}`))
	var ve *task.ValidationError
	if errors.As(err, &ve) {
		for _, fe := range ve.Errors {
			fmt.Printf("%s: %s\n", fe.Field, fe.Message)
		}
	}

	answer, _ := c.ParseAnswer([]byte(`{"same": "yes", "price": 10}`))
	judgment, _ := c.ParseJudgment([]byte(`{"same": "yes", "price": 10.25}`))
	fmt.Printf("%+v\n", c.Score(answer, judgment))
	// Output:
	// same: must be one of "yes", "no", not "maybe"
	// price: must be at least 0, not the number -3
	// colour: is not a field of this task
	// {Correct:true Fields:[{Field:same Correct:true} {Field:price Correct:true}]}
}
