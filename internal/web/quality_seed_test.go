package web

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

// This file opens the store (the exception docs/dependencies.md lists):
// quality control's decisions — trust scored on test questions, a flag
// with its taint, an audit of a changed result — are written by the
// judgment path itself, which no public call lets a test steer to a
// chosen state. The seed writes them as quality control does, through
// the store's quality operations, on a pool whose judgments are real.

// qualityTask: up to three judgments a unit, one more while the
// confidence is under 0.99 (dynamic overlap).
const qualityTask = `{"title": "Same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": 2, "max": 3, "targetConfidence": 0.99}}`

// qualitySeed is a pool with one unit judged by a spammer (flagged on
// trust, their judgment tainted, the result's audit), Ada (trusted) and
// Bob (forgiven once).
type qualitySeed struct {
	b             *bundle
	st            store.Store
	pool          *docket.Pool
	unit          *docket.Unit
	ada, bob, spm *docket.Contributor
	spamJudgment  uuid.UUID
}

// setupQuality is a dashboard and a store on the same database.
func setupQuality(t *testing.T, backend testdb.Backend) (*bundle, store.Store) {
	t.Helper()
	u := backend.URL(t)
	st := teststore.Open(t, u)
	b := setup(t, testdb.Backend{Name: backend.Name, URL: func(testing.TB) string { return u }})
	return b, st
}

func seedQuality(t *testing.T, b *bundle, st store.Store) *qualitySeed {
	t.Helper()
	ctx := context.Background()
	tmpl, err := docket.ParseTask([]byte(qualityTask))
	require.NoError(t, err)
	_, _, err = b.client.TaskPut(ctx, "same", tmpl)
	require.NoError(t, err)
	putWorkflow(t, b.client, `{"name": "review", "steps": [{"name": "label", "human": {"task": "same"}}]}`)
	pool, _, err := b.client.PoolEnsure(ctx, "review", 1, "label", "same")
	require.NoError(t, err)
	_, err = b.client.UnitsAdd(ctx, pool.ID, []json.RawMessage{json.RawMessage(`{"photo":"p.png"}`)})
	require.NoError(t, err)
	s := &qualitySeed{b: b, st: st, pool: pool, ada: b.contributor}
	s.bob, err = b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "bob", Name: "Bob"})
	require.NoError(t, err)
	s.spm, err = b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "spam", Name: "Spam Bot"})
	require.NoError(t, err)

	// Real judgments: the spammer says no, Ada and Bob yes; the unit
	// finalizes at its third judgment.
	s.spamJudgment = judge(t, b.client, pool.ID, s.spm.ID, "no").Judgment.ID
	judge(t, b.client, pool.ID, s.ada.ID, "yes")
	fin := judge(t, b.client, pool.ID, s.bob.ID, "yes").Finalized
	require.NotNil(t, fin, "the third judgment finalizes the unit")
	s.unit = fin

	// Quality control's record of them, as it writes it.
	now := time.Now().UTC().Truncate(time.Millisecond)
	spamHistory := s.scoreTests(t, s.spm.ID, []bool{true, false, false, false}, now.Add(-time.Hour))
	s.put(t, s.spm.ID, spamHistory, quality.Standing{Flagged: true, Check: quality.CheckTrust},
		"trust 0.300 is below the minimum 0.600 after 4 test questions (1 right)", time.Time{}, 2, now)
	adaHistory := s.scoreTests(t, s.ada.ID, []bool{true, true, true}, now.Add(-time.Hour))
	s.put(t, s.ada.ID, adaHistory, quality.Standing{}, "", time.Time{}, 0, now)
	bobHistory := s.scoreTests(t, s.bob.ID, []bool{true, false}, now.Add(-time.Hour))
	s.put(t, s.bob.ID, bobHistory, quality.Standing{}, "", now.Add(-30*time.Minute), 1, now)

	// The flag tainted the spammer's judgment and the repair recomputed
	// the finalized unit from the two clean ones: the audit of the change.
	cause := quality.Cause{ContributorID: s.spm.ID, Check: quality.CheckTrust, Reason: "trust 0.300 is below the minimum 0.600 after 4 test questions (1 right)"}
	low, high := 0.667, 1.0
	audit, changed := quality.NewAudit(quality.Result{Value: fin.Result, Confidence: &low},
		quality.Result{Value: json.RawMessage(`{"same":"yes"}`), Confidence: &high},
		quality.Repair{Action: quality.RepairRecompute, Reason: "1 judgments changed taint, 2 clean and 1 tainted now: at least the minimum 2 clean, result recomputed"}, cause)
	require.True(t, changed)
	require.NoError(t, st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: pool.ID, ContributorID: s.spm.ID, Now: now}); err != nil {
			return err
		}
		if _, err := tx.JudgmentTaintMany(ctx, &store.JudgmentTaintManyParams{PoolID: pool.ID, ContributorID: s.spm.ID, Tainted: true}); err != nil {
			return err
		}
		_, err := tx.UnitAuditInsert(ctx, &store.UnitAuditInsertParams{ID: uuid.Must(uuid.NewV7()), UnitID: fin.ID, PoolID: pool.ID, Audit: audit, Now: now})
		return err
	}))
	return s
}

// scoreTests appends the trust history of test questions answered right
// or wrong, a minute apart from at, and returns the trust after them.
func (s *qualitySeed) scoreTests(t *testing.T, c uuid.UUID, right []bool, at time.Time) quality.Trust {
	t.Helper()
	settings := quality.Defaults()
	trust := quality.NewTrust()
	require.NoError(t, s.st.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: s.pool.ID, ContributorID: c, Now: at}); err != nil {
			return err
		}
		for i, ok := range right {
			verdict := "wrong"
			if ok {
				verdict = "right"
			}
			trust = settings.ScoreTest(trust, ok, at.Add(time.Duration(i)*time.Minute), fmt.Sprintf("test judgment %d: %s", i+1, verdict))
			e := trust.History[len(trust.History)-1]
			if err := tx.TrustHistoryAppend(ctx, &store.TrustHistoryAppendParams{PoolID: s.pool.ID, ContributorID: c, Entry: e}); err != nil {
				return err
			}
		}
		return nil
	}))
	trust.History = nil
	return trust
}

// put writes a contributor's quality state in the pool.
func (s *qualitySeed) put(t *testing.T, c uuid.UUID, trust quality.Trust, standing quality.Standing, reason string, forgiven time.Time, tooFast int, now time.Time) {
	t.Helper()
	require.NoError(t, s.st.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: s.pool.ID, ContributorID: c, Now: now}); err != nil {
			return err
		}
		_, err := tx.QualityStatePut(ctx, &store.QualityStatePutParams{PoolID: s.pool.ID, ContributorID: c, Trust: trust, Standing: standing,
			FlagReason: reason, ForgivenAt: forgiven, Counts: quality.Counts{Taken: trust.TestsAnswered + 1, TestsTaken: trust.TestsAnswered},
			TooFast: tooFast, Now: now})
		return err
	}))
}

// more adds n contributors the pool keeps a state of (at the prior
// trust), as their first judgment would.
func (s *qualitySeed) more(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		c, err := s.b.client.ContributorCreate(context.Background(), docket.ContributorCreateParams{ExternalID: fmt.Sprintf("extra-%d", i), Name: fmt.Sprintf("Extra %02d", i)})
		require.NoError(t, err)
		require.NoError(t, s.st.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
			_, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: s.pool.ID, ContributorID: c.ID, Now: time.Now()})
			return err
		}))
	}
}
