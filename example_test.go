package docket_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/docket-run/docket"
)

type WelcomeArgs struct {
	Email string `json:"email"`
}

func (WelcomeArgs) JobType() string { return "email.welcome" }

// Insert a job, run it with a typed handler, and read its result back.
func Example() {
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

	w := docket.NewWorker(client, docket.WorkerConfig{})
	docket.AddHandler(w, func(ctx context.Context, job *docket.Job[WelcomeArgs]) error {
		return docket.SetResult(ctx, map[string]string{"sentTo": job.Args.Email})
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)

	res, err := client.Insert(ctx, WelcomeArgs{Email: "ada@example.com"}, &docket.InsertOpts{IdempotencyKey: "welcome-ada"})
	if err != nil {
		log.Fatal(err)
	}
	again, _ := client.Insert(ctx, WelcomeArgs{Email: "ada@example.com"}, &docket.InsertOpts{IdempotencyKey: "welcome-ada"})
	fmt.Println("same job:", again.Job.ID == res.Job.ID, "duplicate:", again.Duplicate)

	for {
		job, err := client.Get(ctx, res.Job.ID)
		if err != nil {
			log.Fatal(err)
		}
		if job.State == docket.JobStateSuccess {
			fmt.Println(job.State, string(job.Result))
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Output:
	// same job: true duplicate: true
	// SUCCESS {"sentTo":"ada@example.com"}
}

// SQLitePath reads a database URL as NewClient does: the file of a
// sqlite: URL, taken as written, or an error for one NewClient refuses.
func ExampleSQLitePath() {
	for _, url := range []string{"sqlite:data/docket.db", "sqlite:///var/lib/docket/a%23b.db", "postgres://db/docket", "sqlite:docket.db?mode=ro"} {
		path, ok, err := docket.SQLitePath(url)
		fmt.Printf("%q %v %v\n", path, ok, err)
	}
	// Output:
	// "data/docket.db" true <nil>
	// "/var/lib/docket/a%23b.db" true <nil>
	// "" false <nil>
	// "" true database url "sqlite:docket.db?mode=ro": sqlite:PATH takes no options after ? (docket sets SQLite's options itself; a file name with ? is not supported)
}
