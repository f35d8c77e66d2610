package servertest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/crowdcheck"
	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/testdb"
)

// TestCrowdRacePostgres: 200 goroutine contributors over HTTP against two
// `docket serve` processes on one PostgreSQL, one pool of 2,000 units × 3
// judgments, each contributor sending every request to the other process
// than the one before; one process takes at random (the default), the
// other through its candidate cache. Afterwards, on the tables: no slot assigned twice,
// no contributor twice on a unit, no lost slot (every unit FINALIZED with
// exactly 3 judgments), every judgment tied to its submitted assignment,
// the pool's counters exact (internal/crowdcheck).
func TestCrowdRacePostgres(t *testing.T) {
	t.Parallel()
	crowdRace(t, testdb.PostgresURL(t), []string{"random", "candidates"}, 2000, 200)
}

// TestCrowdRaceSQLite is the smaller one on SQLite, also with two serve
// processes on one file: SQLite's file lock serializes their writes (each
// waits up to its busy timeout), and the outbox relay and maintenance are
// leaderships in the database, so two processes may share a file; each
// gets its own embedded NATS directory. One process takes in order, the
// other through its candidate cache.
func TestCrowdRaceSQLite(t *testing.T) {
	t.Parallel()
	crowdRace(t, testdb.SQLiteURL(t), []string{"ordered", "candidates"}, 300, 30)
}

// crowdRace runs one serve process per take strategy of strategies on
// databaseURL and races the contributors through them.
func crowdRace(t *testing.T, databaseURL string, strategies []string, units, contributors int) {
	processes := len(strategies)
	ctx := context.Background()
	admin := servertest.NewAdminKey()
	servers := make([]*servertest.Server, processes)
	for i := range servers {
		env := servertest.FastEnv()
		env["DOCKET_ADMIN_KEY"] = admin
		env["DOCKET_TAKE_STRATEGY"] = strategies[i]
		env["DOCKET_NATS_DIR"] = filepath.Join(t.TempDir(), "nats") // one embedded bus each
		servers[i] = servertest.Start(t, servertest.Options{DatabaseURL: databaseURL, Env: env})
	}

	// Setup straight on the database (the servers migrated it).
	c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: databaseURL})
	require.NoError(t, err)
	defer c.Close()
	tmpl, err := docket.ParseTask([]byte(`{"title": "Same product?",
	 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
	 "judgmentsPerUnit": {"min": 3, "max": 3}, "assignmentSeconds": 900}`))
	require.NoError(t, err)
	_, _, err = c.TaskPut(ctx, "race", tmpl)
	require.NoError(t, err)
	def, err := docket.DecodeWorkflow([]byte(`{"name": "race", "steps": [{"name": "label", "human": {"task": "race"}}]}`))
	require.NoError(t, err)
	_, _, err = c.WorkflowPut(ctx, def)
	require.NoError(t, err)
	pool, _, err := c.PoolEnsure(ctx, "race", 1, "label", "race")
	require.NoError(t, err)
	inputs := make([]json.RawMessage, units)
	for i := range inputs {
		inputs[i] = json.RawMessage(`{"n": ` + strconv.Itoa(i) + `}`)
	}
	_, err = c.UnitsAdd(ctx, pool.ID, inputs)
	require.NoError(t, err)
	// The contributors and their keys, eight at a time (setup, not the
	// race: one by one, PostgreSQL's 200 took seconds of round trips).
	keys := make([]string, contributors)
	var setup errgroup.Group
	setup.SetLimit(8)
	for i := range keys {
		setup.Go(func() error {
			who, err := c.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "racer-" + strconv.Itoa(i)})
			if err != nil {
				return err
			}
			keys[i], _, err = c.CreateContributorKey(ctx, who.ID, "racer "+strconv.Itoa(i))
			return err
		})
	}
	require.NoError(t, setup.Wait())

	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConns: 2 * contributors, MaxIdleConnsPerHost: contributors}}
	defer hc.CloseIdleConnections()
	var (
		wg        sync.WaitGroup
		judged    atomic.Int64
		perServer = make([]atomic.Int64, processes)
		errMu     sync.Mutex
		firstErr  error
	)
	rctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	for i, key := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := func() error {
				turn := i
				post := func(path string, body any, out any) (int, error) {
					turn++
					s := turn % processes
					perServer[s].Add(1)
					return racePost(rctx, hc, servers[s].URL+path, key, body, out)
				}
				for {
					var taken struct {
						AssignmentID uuid.UUID `json:"assignmentId"`
					}
					status, err := post("/v1/assignments", map[string]any{"poolId": pool.ID}, &taken)
					if err != nil {
						return err
					}
					if status == http.StatusNotFound {
						return nil // nothing left for this contributor
					}
					if status != http.StatusCreated {
						return fmt.Errorf("take: %d", status)
					}
					status, err = post("/v1/judgments", map[string]any{"assignmentId": taken.AssignmentID, "data": map[string]string{"same": "yes"}}, nil)
					if err != nil {
						return err
					}
					if status != http.StatusAccepted {
						return fmt.Errorf("judgment: %d", status)
					}
					judged.Add(1)
				}
			}()
			if err != nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				errMu.Unlock()
				cancel()
			}
		}()
	}
	wg.Wait()
	require.NoError(t, firstErr)
	require.Equal(t, int64(3*units), judged.Load(), "every slot judged once")
	for i := range perServer {
		require.Positive(t, perServer[i].Load(), "server %d served no request", i)
	}

	db, err := crowdcheck.Open(databaseURL)
	require.NoError(t, err)
	defer db.Close()
	results, err := crowdcheck.Run(ctx, db, pool.ID, 3)
	require.NoError(t, err)
	require.Len(t, results, 10)
	for _, r := range results {
		require.Zero(t, r.Violations, r.Name)
	}
	got, err := c.PoolGet(ctx, pool.ID)
	require.NoError(t, err)
	require.Equal(t, units, got.Counts.Finalized, "the pool's finalized counter")
	require.Equal(t, 3*units, got.Counts.Judgments, "the pool's judgments counter")
	require.Zero(t, got.Counts.Judgable)
	require.Zero(t, got.Counts.ActiveAssignments)
}

// racePost posts body as JSON and decodes a 2xx answer into out; any
// answer but 2xx and 404 is an error with its body.
func racePost(ctx context.Context, hc *http.Client, url, key string, body, out any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err
	}
	switch {
	case res.StatusCode/100 == 2:
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				return 0, fmt.Errorf("%s: decode: %w", url, err)
			}
		}
	case res.StatusCode != http.StatusNotFound:
		return 0, fmt.Errorf("%s: %d %s", url, res.StatusCode, data)
	}
	return res.StatusCode, nil
}
