package docket_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/docket-run/docket"
)

// Enqueue jobs in your own SQLite transaction, with the rows they are
// about: the jobs exist if and only if the transaction commits.
func ExampleClient_InsertManySQLTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "docket-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "app.db")

	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: "sqlite:" + path, AutoMigrate: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	// The application's own handle on the same file. Its transactions
	// take the write lock when they begin (_txlock=immediate), waiting for
	// it up to 10 s: a transaction that read first and then writes is
	// refused at once (SQLITE_BUSY_SNAPSHOT) if docket wrote in between.
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE signups (email TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	var jobs []docket.InsertParams
	for _, email := range []string{"ada@example.com", "alan@example.com"} {
		if _, err := tx.ExecContext(ctx, `INSERT INTO signups (email) VALUES (?)`, email); err != nil {
			log.Fatal(err)
		}
		jobs = append(jobs, docket.InsertParams{Args: WelcomeArgs{Email: email}})
	}
	res, err := client.InsertManySQLTx(ctx, tx, jobs)
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	// Committed: wake this client's workers now rather than at their next
	// poll (SQLite cannot tell docket about your commit).
	client.NotifyInserted(res...)

	for _, r := range res {
		job, err := client.Get(ctx, r.Job.ID)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(job.Type, job.State, string(job.Payload))
	}
	// Output:
	// email.welcome QUEUED {"email":"ada@example.com"}
	// email.welcome QUEUED {"email":"alan@example.com"}
}
