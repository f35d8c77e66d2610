package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// testText: text PostgreSQL cannot store (NUL, bytes that are not UTF-8)
// in a parameter of a read or a write is a *crowd.ValidationError naming
// the field, on every backend alike, and nothing is written — never a
// driver error on PostgreSQL where SQLite found nothing or stored it.
func testText(t *testing.T, open opener) {
	for name, bad := range map[string]string{"NUL": "a\x00b", "NotUTF8": "a\xffb"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			c := b.contributor(t)
			bads := []string{bad}
			_, err := b.s.JobList(b.ctx, &store.JobListParams{Types: []string{"ok", bad}, Queues: bads, Limit: 10})
			requireFields(t, err, "types[1]", "queues[0]")
			requireFields(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: bad, Paused: true, Now: base}), "queue")
			_, err = b.s.APIKeyInsert(b.ctx, &store.APIKeyInsertParams{ID: newID(), Name: bad, Role: "admin", Prefix: "dk_x", SecretHash: "00", Now: base})
			requireFields(t, err, "name")
			_, err = b.s.TaskGet(b.ctx, &store.TaskGetParams{Name: bad})
			requireFields(t, err, "name")
			_, err = b.s.TaskList(b.ctx, &store.TaskListParams{AfterName: bad})
			requireFields(t, err, "after")
			_, err = b.s.PoolList(b.ctx, &store.PoolListParams{Workflow: bad, Step: bad})
			requireFields(t, err, "workflow", "step")
			_, err = b.s.ContributorCreate(b.ctx, &store.ContributorCreateParams{ID: newID(), ExternalID: bad, Name: bad, Skills: bads, Channels: bads, Now: base})
			requireFields(t, err, "externalId", "name", "skills[0]", "channels[0]")
			_, err = b.s.ContributorUpdate(b.ctx, &store.ContributorUpdateParams{ID: c.ID, Name: &bad, Skills: &bads, Channels: &bads, Now: base})
			requireFields(t, err, "name", "skills[0]", "channels[0]")
			_, err = b.s.DeadLetterList(b.ctx, &store.DeadLetterListParams{Consumer: bad})
			requireFields(t, err, "consumer")
			_, err = b.s.DeadLetterRequestRetry(b.ctx, &store.DeadLetterRequestRetryParams{Consumer: bad, EventID: bad, Now: base})
			requireFields(t, err, "consumer", "eventId")
			_, err = b.s.RunList(b.ctx, &store.RunListParams{Workflow: bad})
			requireFields(t, err, "workflow")
			_, err = b.s.WorkflowGet(b.ctx, &store.WorkflowGetParams{Name: bad})
			requireFields(t, err, "name")
			_, err = b.s.WorkflowList(b.ctx, &store.WorkflowListParams{AfterName: bad})
			requireFields(t, err, "after")

			// Nothing was written.
			got, err := b.s.ContributorGet(b.ctx, c.ID)
			require.NoError(t, err)
			require.Equal(t, c.Name, got.Name)
			keys, err := b.s.APIKeyList(b.ctx)
			require.NoError(t, err)
			require.Empty(t, keys)
			qs, err := b.s.QueueList(b.ctx)
			require.NoError(t, err)
			require.Empty(t, qs)
		})
	}
}
