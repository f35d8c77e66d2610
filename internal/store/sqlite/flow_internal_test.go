package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
)

// lookupFails is a real write transaction whose plain reads of one row
// (SELECT … FROM table WHERE id = ? or run_id = ?) fail, as when the
// connection breaks between a guarded UPDATE and the read that explains why
// it matched nothing. Every other statement runs on the transaction.
type lookupFails struct {
	*sql.Tx
	table string
}

func (l lookupFails) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if strings.HasPrefix(query, "SELECT") && strings.Contains(query, "FROM "+l.table+" WHERE") {
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		ctx = canceled
	}
	return l.Tx.QueryRowContext(ctx, query, args...)
}

// flowFixture is a migrated store with one RUNNING run of a one-step
// workflow.
func flowFixture(t *testing.T) (*Store, *flow.Run) {
	t.Helper()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "docket.db"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	_, err = s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	def := &flow.Definition{Name: "wf", Steps: []flow.Step{{Name: "a", Job: &flow.JobStep{Type: "fetch"}}}}
	canon, err := flow.Canonical(def)
	require.NoError(t, err)
	hash, err := flow.Hash(def)
	require.NoError(t, err)
	_, _, err = s.WorkflowPut(ctx, &store.WorkflowPutParams{Name: "wf", Definition: canon, Hash: hash, Now: now})
	require.NoError(t, err)
	res, err := s.RunInsertMany(ctx, &store.RunInsertManyParams{Now: now, Runs: []*store.RunInsertParams{{
		ID: uuid.Must(uuid.NewV7()), Workflow: "wf", Version: 1, Input: json.RawMessage(`{}`),
	}}})
	require.NoError(t, err)
	return s, res[0].Run
}

// A refused run transition whose follow-up read fails reports that
// failure, not ErrNotFound: the run exists, and a caller must not take a
// broken connection for a missing row.
func TestRunTransitionKeepsLookupError(t *testing.T) {
	t.Parallel()
	s, r := flowFixture(t)
	err := s.write(t.Context(), func(tx *sql.Tx) error {
		_, err := runTransition(t.Context(), lookupFails{Tx: tx, table: "docket_runs"}, &store.RunTransitionParams{
			ID: r.ID, From: flow.RunPaused, To: flow.RunRunning, Now: time.Now(),
		})
		return err
	})
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, store.ErrNotFound)
}
