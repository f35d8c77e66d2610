package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/chaos"
	"github.com/docket-run/docket/internal/crowdcheck"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

// qualityCheckTask: 2 judgments per unit; every third assignment a test
// question (every one while suspect), a flag after 2 of them when the
// accuracy is below 0.6 with probability 0.95 (0 of 2 is: 0.96).
const qualityCheckTask = `{"title": "Which?",
 "fields": [{"name": "pick", "kind": "choice", "required": true, "options": [{"value": "a"}, {"value": "b"}]}],
 "judgmentsPerUnit": {"min": 2}, "assignmentSeconds": 30,
 "quality": {"quizSize": 0, "testEvery": 3, "minTests": 2, "minTrust": 0.6}}`

// qualityBundle is a database where quality control flagged two
// spammers, repaired the units they judged, and an admin forgave one.
type qualityBundle struct {
	*crowdBundle
	pool uuid.UUID
	// flagged is the spammer still flagged, forgiven the other.
	flagged, forgiven uuid.UUID
	// honestUnit is a FINALIZED unit judged by honest contributors only.
	honestUnit uuid.UUID
}

// setupQuality runs, through the client on a fresh database, 6 runs of
// one human step (label) with 4 golden units in its pool: two spammers
// (always the wrong answer) judge two units and a test question each;
// honest contributors finalize what they can; the spammers' next test
// question (they are suspect: it comes at once) flags them (their finalized units reopen, with an audit
// and unit.result_changed each); honest contributors finish the work;
// an admin forgives the first spammer (their judgments count again, the
// units are recomputed).
func setupQuality(t *testing.T, backend testdb.Backend) *qualityBundle {
	t.Helper()
	ctx := context.Background()
	url := backend.URL(t)
	client := taskClient(t, url, "qc-which", qualityCheckTask)
	def, err := docket.NewWorkflow("qc").Human("label", "qc-which").Definition()
	require.NoError(t, err)
	v, _, err := client.WorkflowPut(ctx, def)
	require.NoError(t, err)
	pool, _, err := client.PoolEnsure(ctx, "qc", v.Version, "label", "qc-which")
	require.NoError(t, err)
	var golden []docket.GoldenUnit
	for i := range 4 {
		golden = append(golden, docket.GoldenUnit{Input: json.RawMessage(fmt.Sprintf(`{"n": %d}`, i)), Answer: json.RawMessage(`{"pick": "a"}`)})
	}
	_, err = client.GoldenAdd(ctx, pool.ID, golden)
	require.NoError(t, err)
	const runs = 6
	b := &qualityBundle{crowdBundle: &crowdBundle{ctx: ctx, backend: backend.Name, rd: teststore.Open(t, url),
		exp: chaos.Expectations{Runs: map[string]flow.RunState{}}}, pool: pool.ID}
	for i := range runs {
		key := fmt.Sprintf("qc-%d", i)
		_, err := client.RunStart(ctx, "qc", map[string]int{"n": i}, &docket.RunStartOpts{IdempotencyKey: key})
		require.NoError(t, err)
		b.exp.Runs[key] = flow.RunSucceeded
	}
	contributor := func() uuid.UUID { return newContributor(t, client) }
	// work has who take and judge up to n assignments (answer a or b);
	// it returns how many they judged.
	work := func(who uuid.UUID, answer string, n int) int {
		for i := range n {
			taken, err := client.AssignmentTake(ctx, pool.ID, who)
			var ne *docket.NotEligibleError
			if docket.IsNoUnit(err) || errors.As(err, &ne) {
				return i
			}
			require.NoError(t, err)
			_, err = client.JudgmentSubmit(ctx, taken.Assignment.ID, who, json.RawMessage(`{"pick": "`+answer+`"}`))
			require.NoError(t, err)
		}
		return n
	}
	drain := func() {
		for work(contributor(), "a", 100) > 0 {
		}
	}
	s1, s2 := contributor(), contributor()
	require.Equal(t, 3, work(s1, "b", 3))
	require.Equal(t, 3, work(s2, "b", 3))
	work(contributor(), "a", 100)
	for _, s := range []uuid.UUID{s1, s2} {
		require.Equal(t, 1, work(s, "b", 1), "the second test question")
		st, err := client.ContributorQualityGet(ctx, pool.ID, s)
		require.NoError(t, err)
		require.True(t, st.Standing.Flagged, "spammer %s flagged", s)
	}
	drain()
	_, err = client.ContributorForgive(ctx, pool.ID, s1, "admin")
	require.NoError(t, err)
	drain()
	b.flagged, b.forgiven = s2, s1

	units, err := client.UnitList(ctx, pool.ID, docket.UnitListParams{Limit: 100})
	require.NoError(t, err)
	audited := 0
	for _, u := range units {
		if u.Golden {
			continue
		}
		require.Equal(t, docket.UnitFinalized, u.State, "unit %s", u.ID)
		js, err := client.JudgmentList(ctx, u.ID)
		require.NoError(t, err)
		spammed := false
		for _, j := range js {
			spammed = spammed || j.ContributorID == s1 || j.ContributorID == s2
		}
		if !spammed {
			b.honestUnit = u.ID
		}
		audits, err := client.UnitAudits(ctx, u.ID)
		require.NoError(t, err)
		audited += len(audits)
	}
	require.NotEqual(t, uuid.Nil, b.honestUnit)
	require.NotZero(t, audited, "a flag changed a finalized result")
	b.db = openCheckDB(t, url)
	return b
}

// TestCheckQuality: a real history of quality control — two spammers
// flagged, their units repaired, one forgiven — holds every invariant;
// then the database is broken by hand once for each of quality
// control's invariants, and the checker must report it.
func TestCheckQuality(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			b := setupQuality(t, backend)
			require.Empty(t, b.check(t), "a correct history has no violation")
			qc := crowdcheck.QualityChecks(b.pool, 2)
			results, err := crowdcheck.RunChecks(b.ctx, b.db, qc)
			require.NoError(t, err)
			require.Empty(t, crowdcheck.Failed(results), "crowdcheck's quality checks hold too")

			judgmentOf := func(who uuid.UUID) (id, unit string) {
				id = b.scalar(t, fmt.Sprintf(`SELECT j.id FROM docket_judgments j JOIN docket_units u ON u.id = j.unit_id
					WHERE j.contributor_id = '%s' AND NOT u.golden ORDER BY j.id LIMIT 1`, who))
				return id, b.scalar(t, fmt.Sprintf(`SELECT unit_id FROM docket_judgments WHERE id = '%s'`, id))
			}
			cases := []struct {
				name    string
				kind    string
				breakIt func() (unit uuid.UUID, detail string)
			}{
				{"a flagged contributor's judgment not tainted", chaos.KindFlaggedUntainted, func() (uuid.UUID, string) {
					id, unit := judgmentOf(b.flagged)
					b.exec(t, fmt.Sprintf(`UPDATE docket_judgments SET tainted = %s WHERE id = '%s'`, b.falseSQL(), id))
					return uuid.MustParse(unit), ""
				}},
				{"a finalized unit decided on a judgment tainted since", chaos.KindDecidedOnTainted, func() (uuid.UUID, string) {
					b.exec(t, fmt.Sprintf(`UPDATE docket_judgments SET tainted = %s WHERE id = (SELECT id FROM docket_judgments WHERE unit_id = '%s' ORDER BY id LIMIT 1)`,
						b.trueSQL(), b.honestUnit))
					return b.honestUnit, ""
				}},
				{"an assignment taken after the flag", chaos.KindFlaggedTake, func() (uuid.UUID, string) {
					a := b.scalar(t, fmt.Sprintf(`SELECT id FROM docket_assignments WHERE contributor_id = '%s' ORDER BY id LIMIT 1`, b.flagged))
					b.exec(t, fmt.Sprintf(`UPDATE docket_assignments SET started_at = started_at + %s WHERE id = '%s'`, b.hourSQL(), a))
					return uuid.MustParse(b.scalar(t, fmt.Sprintf(`SELECT unit_id FROM docket_assignments WHERE id = '%s'`, a))), ""
				}},
				{"an assignment taken while flagged, forgiven since", chaos.KindFlaggedTake, func() (uuid.UUID, string) {
					// The forgiveness moves two hours on, one of the
					// contributor's takes one: it falls inside the flag.
					b.exec(t, fmt.Sprintf(`UPDATE docket_outbox SET created_at = created_at + %s + %s
						WHERE event_type = 'contributor.unflagged' AND CAST(data AS TEXT) LIKE '%%%s%%'`, b.hourSQL(), b.hourSQL(), b.forgiven))
					a := b.scalar(t, fmt.Sprintf(`SELECT id FROM docket_assignments WHERE contributor_id = '%s' ORDER BY id LIMIT 1`, b.forgiven))
					b.exec(t, fmt.Sprintf(`UPDATE docket_assignments SET started_at = started_at + %s WHERE id = '%s'`, b.hourSQL(), a))
					return uuid.MustParse(b.scalar(t, fmt.Sprintf(`SELECT unit_id FROM docket_assignments WHERE id = '%s'`, a))), "forgiven at"
				}},
				{"a flag written twice", chaos.KindQualityEvents, func() (uuid.UUID, string) {
					b.exec(t, fmt.Sprintf(`INSERT INTO docket_outbox (event_type, data, created_at)
						SELECT event_type, data, created_at FROM docket_outbox WHERE event_type = 'contributor.flagged' AND CAST(data AS TEXT) LIKE '%%%s%%'`, b.flagged))
					return uuid.Nil, b.flagged.String()
				}},
				{"a forgiveness without its event", chaos.KindQualityEvents, func() (uuid.UUID, string) {
					b.exec(t, fmt.Sprintf(`DELETE FROM docket_outbox WHERE event_type = 'contributor.unflagged' AND CAST(data AS TEXT) LIKE '%%%s%%'`, b.forgiven))
					return uuid.Nil, b.forgiven.String()
				}},
				{"an audit row written twice", chaos.KindQualityEvents, func() (uuid.UUID, string) {
					id := b.scalar(t, fmt.Sprintf(`SELECT a.id FROM docket_unit_audits a WHERE a.pool_id = '%s' ORDER BY a.id LIMIT 1`, b.pool))
					b.exec(t, fmt.Sprintf(`INSERT INTO docket_unit_audits (id, unit_id, pool_id, old_result, new_result, old_confidence, new_confidence,
							action, cause_contributor_id, cause_check, cause_untaint, cause_reason, why, at)
						SELECT '%s', unit_id, pool_id, old_result, new_result, old_confidence, new_confidence,
							action, cause_contributor_id, cause_check, cause_untaint, cause_reason, why, at FROM docket_unit_audits WHERE id = '%s'`,
						uuid.Must(uuid.NewV7()), id))
					return uuid.MustParse(b.scalar(t, fmt.Sprintf(`SELECT unit_id FROM docket_unit_audits WHERE id = '%s'`, id))), ""
				}},
			}
			for _, c := range cases {
				unit, detail := c.breakIt()
				caught := false
				for _, v := range b.check(t) {
					caught = caught || v.Kind == c.kind && v.UnitID == unit && strings.Contains(v.Detail, detail)
				}
				require.True(t, caught, "%s: the checker must catch a %s violation (unit %s, naming %q)", c.name, c.kind, unit, detail)
			}
			// The unit short of clean judgments fails crowdcheck's count.
			results, err = crowdcheck.RunChecks(b.ctx, b.db, qc)
			require.NoError(t, err)
			var failed []string
			for _, r := range crowdcheck.Failed(results) {
				failed = append(failed, r.Name)
			}
			require.Contains(t, failed, qc[3].Name)
		})
	}
}
