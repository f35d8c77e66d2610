package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// A transaction PostgreSQL aborts to break a deadlock comes out of InTx as
// store.ErrContention (the API's 503 with Retry-After), the driver's error
// still in the chain; the other transaction commits.
func TestInTxDeadlockIsContention(t *testing.T) {
	b := setup(t)
	_, err := b.s.pool.Exec(b.ctx, `CREATE TABLE contention_probe (id int PRIMARY KEY); INSERT INTO contention_probe VALUES (1), (2)`)
	require.NoError(t, err)

	var both sync.WaitGroup // each holds its first row before taking the other's
	both.Add(2)
	lockBoth := func(first, second int) error {
		return b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			ptx := tx.(*storeTx).tx
			if _, err := ptx.Exec(ctx, `SELECT 1 FROM contention_probe WHERE id = $1 FOR UPDATE`, first); err != nil {
				both.Done()
				return err
			}
			both.Done()
			both.Wait()
			_, err := ptx.Exec(ctx, `SELECT 1 FROM contention_probe WHERE id = $1 FOR UPDATE`, second)
			return err
		})
	}
	errs := make([]error, 2)
	var done sync.WaitGroup
	for i, order := range [][2]int{{1, 2}, {2, 1}} {
		done.Add(1)
		go func() {
			defer done.Done()
			errs[i] = lockBoth(order[0], order[1])
		}()
	}
	done.Wait()

	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	require.Len(t, failed, 1, "one of the two is the deadlock's victim, the other commits: %v", errs)
	require.ErrorIs(t, failed[0], store.ErrContention)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, failed[0], &pgErr)
	require.Equal(t, "40P01", pgErr.Code)

	other := errors.New("some other failure")
	require.NotErrorIs(t, contended(other), store.ErrContention, "only 40P01 and 40001 are contention")
}
