// Command insertonly is the smallest program on package docket: it inserts
// one job into a fresh SQLite file, works it with a Go handler, and prints
// "worked". deps_test.go runs it and checks it does not link the NATS
// server, which only docket serve (or a program that imports natsembed)
// needs.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/docket-run/docket"
)

type pingArgs struct{}

func (pingArgs) JobType() string { return "ping" }

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "docket-insertonly")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: "sqlite:" + filepath.Join(dir, "docket.db"), AutoMigrate: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	worked := make(chan struct{})
	w := docket.NewWorker(client, docket.WorkerConfig{PollInterval: 10 * time.Millisecond})
	docket.AddHandler(w, func(context.Context, *docket.Job[pingArgs]) error {
		close(worked)
		return nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)
	if _, err := client.Insert(ctx, pingArgs{}, nil); err != nil {
		log.Fatal(err)
	}
	select {
	case <-worked:
		fmt.Println("worked")
	case <-ctx.Done():
		log.Fatal("the job was not worked within a minute")
	}
}
