package docket_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/docket-run/docket"
)

// PriceStep is the job of every step of the pricing workflow. Its payload
// is what docket gives a job step: the run, the run's input and the
// outputs of the step's parents.
type PriceStep struct {
	Input struct {
		Price float64 `json:"price"`
	} `json:"input"`
	Steps map[string]struct {
		Output struct {
			Price float64 `json:"price"`
		} `json:"output"`
	} `json:"steps"`
}

func (PriceStep) JobType() string { return "price.step" }

// Run a diamond — quote, then tax and discount side by side, then total —
// with Go handlers on SQLite: each handler reads its parents' outputs and
// returns its own; the run's output holds the output of total, its only
// step without dependents ({"total": …}).
func ExampleClient_RunStart() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "docket-example")
	defer os.RemoveAll(dir)
	client, err := docket.NewClient(ctx, docket.Config{
		DatabaseURL: "sqlite:" + filepath.Join(dir, "docket.db"),
		AutoMigrate: true,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	def, err := docket.NewWorkflow("pricing").
		Job("quote", "price.step").
		Job("tax", "price.step", docket.After("quote")).
		Job("discount", "price.step", docket.After("quote")).
		Job("total", "price.step", docket.After("tax", "discount")).
		Definition()
	if err != nil {
		log.Fatal(err)
	}
	if _, _, err := client.WorkflowPut(ctx, def); err != nil {
		log.Fatal(err)
	}

	w := docket.NewWorker(client, docket.WorkerConfig{})
	docket.AddHandler(w, func(ctx context.Context, job *docket.Job[PriceStep]) error {
		rc, _ := docket.RunOf(ctx) // which step this job is
		parent := func(name string) float64 { return job.Args.Steps[name].Output.Price }
		var price float64
		switch rc.Step {
		case "quote":
			price = job.Args.Input.Price
		case "tax":
			price = parent("quote") * 0.2
		case "discount":
			price = -parent("quote") * 0.1
		case "total":
			price = parent("tax") + parent("discount")
		}
		return docket.SetResult(ctx, map[string]float64{"price": price})
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)

	res, err := client.RunStart(ctx, "pricing", map[string]float64{"price": 100}, &docket.RunStartOpts{IdempotencyKey: "order-7"})
	if err != nil {
		log.Fatal(err)
	}
	for {
		run, err := client.RunGet(ctx, res.Run.ID)
		if err != nil {
			log.Fatal(err)
		}
		if run.State.Terminal() {
			var out map[string]struct{ Price float64 }
			_ = json.Unmarshal(run.Output, &out)
			fmt.Println(run.State, "total:", out["total"].Price)
			for _, s := range run.Steps {
				fmt.Println(s.Name, s.State, string(s.Output))
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Output:
	// SUCCEEDED total: 10
	// quote SUCCEEDED {"price":100}
	// discount SUCCEEDED {"price":-10}
	// tax SUCCEEDED {"price":20}
	// total SUCCEEDED {"price":10}
}
