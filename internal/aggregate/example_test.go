package aggregate_test

import (
	"fmt"

	"github.com/docket-run/docket/internal/aggregate"
)

// Majority vote over three workers; a gold item keeps its known answer, and
// a tie goes to the class that sorts first.
func ExampleCategorical() {
	judgments := []aggregate.Judgment{
		{Item: "pair-1", Worker: "ana", Label: "same"},
		{Item: "pair-1", Worker: "bo", Label: "same"},
		{Item: "pair-1", Worker: "carl", Label: "different"},
		{Item: "pair-2", Worker: "ana", Label: "different"},
		{Item: "pair-2", Worker: "carl", Label: "same"},
		{Item: "gold-1", Worker: "ana", Label: "same"},
		{Item: "gold-1", Worker: "carl", Label: "different"},
	}
	res, err := aggregate.Categorical(aggregate.MethodMajority, judgments, aggregate.Options{
		Gold: map[string]string{"gold-1": "same"},
	})
	if err != nil {
		panic(err)
	}
	for _, it := range res.Items {
		fmt.Printf("%s: %s (%.2f)\n", it.Item, it.Label, it.Confidence)
	}
	// Output:
	// pair-1: same (0.67)
	// pair-2: different (0.50)
	// gold-1: same (1.00)
}

// A model from a full run answers a new item from its votes alone.
func ExampleModel_Posterior() {
	var judgments []aggregate.Judgment
	for i := range 50 {
		item := fmt.Sprint("item-", i)
		truth, wrong := "yes", "no"
		if i%2 == 1 {
			truth, wrong = "no", "yes"
		}
		judgments = append(judgments,
			aggregate.Judgment{Item: item, Worker: "good-1", Label: truth},
			aggregate.Judgment{Item: item, Worker: "good-2", Label: truth},
			aggregate.Judgment{Item: item, Worker: "contrarian", Label: wrong})
	}
	res, err := aggregate.Categorical(aggregate.MethodDS, judgments, aggregate.Options{})
	if err != nil {
		panic(err)
	}
	// Only the contrarian has judged the new item: their "no" means yes.
	post, err := res.Model.Posterior("new", []aggregate.Vote{{Worker: "contrarian", Label: "no"}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %.2f\n", post.Label, post.Confidence)
	// Output:
	// yes 0.93
}
