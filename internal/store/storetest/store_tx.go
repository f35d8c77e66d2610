package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// txJobAndWebhook is an effect spanning two domains: it inserts p's job and
// subscribes w in tx, then reads both back through tx, then returns ret.
func txJobAndWebhook(p *store.JobInsertParams, w *store.WebhookInsertParams, ret error) func(ctx context.Context, tx store.Tx) error {
	return func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{p}, Now: base}); err != nil {
			return err
		}
		if _, err := tx.WebhookInsert(ctx, w); err != nil {
			return err
		}
		// The transaction reads its own writes.
		if _, err := tx.JobGet(ctx, p.ID); err != nil {
			return err
		}
		if _, err := tx.WebhookGet(ctx, w.ID); err != nil {
			return err
		}
		return ret
	}
}

func newWebhookParams() *store.WebhookInsertParams {
	return &store.WebhookInsertParams{
		ID: newID(), URL: "https://example.com/hook", EventTypes: []string{"*"},
		Secret: "0123456789abcdef", Now: base,
	}
}

// testTx is Store.InTx: one transaction across domains.
func testTx(t *testing.T, open opener) {
	t.Run("CommitsEveryDomainTogether", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p, w := newJob(newQueue()), newWebhookParams()
		mark := b.outboxMark(t)
		require.NoError(t, b.s.InTx(b.ctx, txJobAndWebhook(p, w, nil)))
		row := b.get(t, p.ID)
		require.Equal(t, job.StateQueued, row.State)
		got, err := b.s.WebhookGet(b.ctx, w.ID)
		require.NoError(t, err)
		require.Equal(t, w.URL, got.URL)
		b.requireOneStateChanged(t, mark, tr(row, "", job.StateQueued))
	})

	t.Run("ErrorRollsEveryDomainBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p, w := newJob(newQueue()), newWebhookParams()
		mark := b.outboxMark(t)
		boom := errors.New("boom")
		err := b.s.InTx(b.ctx, txJobAndWebhook(p, w, boom))
		require.ErrorIs(t, err, boom)
		b.requireNoJob(t, p.ID)
		_, err = b.s.WebhookGet(b.ctx, w.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		b.requireNoOutbox(t, mark)
	})

	t.Run("RefusedTransitionLeavesTxUsable", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.insertOne(t, newJob(newQueue()))
		w := newWebhookParams()
		mark := b.outboxMark(t)
		err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			// QUEUED → CANCELED is allowed, but the job is not RETRY.
			_, err := tx.JobTransition(ctx, &store.JobTransitionParams{
				ID: row.ID, From: job.StateRetry, To: job.StateCanceled, Now: base,
			})
			requireInvalidTransition(t, err, job.StateQueued, job.StateCanceled)
			_, err = tx.WebhookInsert(ctx, w)
			return err
		})
		require.NoError(t, err)
		_, err = b.s.WebhookGet(b.ctx, w.ID)
		require.NoError(t, err)
		requireUnchanged(t, row, b.get(t, row.ID))
		b.requireNoOutbox(t, mark)
	})

	t.Run("TxUnusableAfterFn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		var kept store.Tx
		require.NoError(t, b.s.InTx(b.ctx, func(_ context.Context, tx store.Tx) error {
			kept = tx
			return nil
		}))
		_, err := kept.WebhookInsert(b.ctx, newWebhookParams())
		require.Error(t, err)
		_, err = kept.JobGet(b.ctx, newID())
		require.Error(t, err)
		require.NotErrorIs(t, err, store.ErrNotFound)
	})
}
