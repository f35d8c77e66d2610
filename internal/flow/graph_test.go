package flow

import (
	"slices"
	"testing"
	"time"
)

func TestGraphOfDesignExample(t *testing.T) {
	t.Parallel()
	g, err := NewGraph(loadExample(t))
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("Order", g.Order(), "fetch", "approve", "label", "review", "thumbs", "publish")
	check("Parents(publish)", g.Parents("publish"), "approve", "label", "review", "thumbs")
	check("Children(fetch)", g.Children("fetch"), "approve", "label", "thumbs")
	check("Ancestors(review)", g.Ancestors("review"), "fetch", "label")
	check("Ancestors(publish)", g.Ancestors("publish"), "fetch", "approve", "label", "review", "thumbs")
	check("Descendants(label)", g.Descendants("label"), "review", "publish")
	check("Roots", g.Roots(), "fetch")
	check("Sinks", g.Sinks(), "publish")
	check("Parents(unknown)", g.Parents("nope"))
	if !g.IsAncestor("fetch", "review") || g.IsAncestor("approve", "review") {
		t.Error("IsAncestor")
	}
}

// TestGraphOrderIgnoresArrayOrder: the same DAG written in another order
// gives the same topological order.
func TestGraphOrderIgnoresArrayOrder(t *testing.T) {
	t.Parallel()
	def := loadExample(t)
	slices.Reverse(def.Steps)
	g, err := NewGraph(def)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Order(); !slices.Equal(got, []string{"fetch", "approve", "label", "review", "thumbs", "publish"}) {
		t.Fatalf("Order = %v", got)
	}
	if _, err := NewGraph(&Definition{Name: "w"}); err == nil {
		t.Fatal("NewGraph of an invalid definition succeeded")
	}
}

func TestDurationSpelling(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]Duration{
		0: "", 24 * time.Hour: "24h", 90 * time.Minute: "1h30m", time.Minute: "1m",
		30 * time.Second: "30s", 1500 * time.Millisecond: "1.5s", time.Hour + time.Second: "1h0m1s",
	} {
		if got := Of(d); got != want {
			t.Errorf("Of(%v) = %q, want %q", d, got, want)
		}
		if back, err := want.Parse(); err != nil || back != d {
			t.Errorf("%q.Parse() = %v, %v", want, back, err)
		}
	}
}
