package web

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

func TestDeadLettersPage(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		img := []*docket.JobRow{dead(t, b.client, "images"), dead(t, b.client, "images"), dead(t, b.client, "images")}
		mail := dead(t, b.client, "mail")
		insert(t, b.client, "email", "mail", `{}`) // not DEAD: not listed
		state := func(id uuid.UUID) docket.JobState {
			row, err := b.client.Get(ctx, id)
			require.NoError(t, err)
			return row.State
		}

		viewer := b.signIn(t, docket.RoleViewer)
		r := viewer.get(t, "/dead")
		require.Equal(t, http.StatusOK, r.Status)
		listed := text(find(r.Doc, "table", "dead-jobs"))
		for _, row := range append(img, mail) {
			require.Contains(t, listed, row.ID.String())
		}
		require.Contains(t, listed, "disk full")
		require.Empty(t, inputs(r.Doc, "id"), "a viewer ticks nothing")
		require.Nil(t, find(r.Doc, "table", "dead-events"), "event dead letters are for admin keys")
		require.Equal(t, http.StatusForbidden, viewer.post(t, "/dead/retry", url.Values{"scope": {"selected"}, "id": {mail.ID.String()}}).Status)
		r = viewer.get(t, "/dead?queue=mail")
		require.Contains(t, text(find(r.Doc, "table", "dead-jobs")), mail.ID.String())
		require.NotContains(t, text(find(r.Doc, "table", "dead-jobs")), img[0].ID.String())
		require.Equal(t, http.StatusBadRequest, viewer.get(t, "/dead?cursor=zz").Status)

		// A producer retries a selection.
		producer := b.signIn(t, docket.RoleProducer)
		r = producer.get(t, "/dead")
		require.Len(t, inputs(r.Doc, "id"), 4)
		r = producer.post(t, "/dead/retry", url.Values{"scope": {"selected"}, "id": {mail.ID.String(), mail.ID.String()}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		r = producer.get(t, r.Header.Get("Location"))
		require.Contains(t, text(find(r.Doc, "p", "dead-message")), "Retried 1 DEAD jobs")
		require.Equal(t, docket.JobStateQueued, state(mail.ID))
		// Bad forms name their fields and change nothing.
		for form, field := range map[string]string{
			"scope=selected":                          "id:",
			"scope=selected&id=nope":                  "id:",
			"scope=filter&confirm=retry":              "filter:",
			"scope=filter&queue=images":               "confirm:",
			"scope=filter&queue=images&confirm=retri": "confirm:",
			"scope=everything":                        "scope:",
		} {
			v, err := url.ParseQuery(form)
			require.NoError(t, err)
			r = producer.post(t, "/dead/retry", v)
			require.Equal(t, http.StatusBadRequest, r.Status, form)
			require.Contains(t, text(find(r.Doc, "ul", "")), field, form)
		}
		require.Equal(t, docket.JobStateDead, state(img[0].ID))
		// Every DEAD job of the filter, confirmed.
		r = producer.post(t, "/dead/retry", url.Values{"scope": {"filter"}, "queue": {"images"}, "confirm": {"retry"}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		r = producer.get(t, r.Header.Get("Location"))
		require.Contains(t, text(find(r.Doc, "p", "dead-message")), "Retried 3 DEAD jobs")
		for _, row := range img {
			require.Equal(t, docket.JobStateQueued, state(row.ID))
		}
		require.Contains(t, text(find(r.Doc, "table", "dead-jobs")), "No DEAD jobs match")

		// Admin: the consumers' dead letters (none here) and their retry
		// form's checks.
		admin := b.signIn(t, docket.RoleAdmin)
		r = admin.get(t, "/dead")
		require.Contains(t, text(find(r.Doc, "table", "dead-events")), "No dead letters")
		require.Equal(t, http.StatusForbidden, producer.post(t, "/dead/events/retry", url.Values{"event": {"c/e"}}).Status)
		require.Equal(t, http.StatusBadRequest, admin.post(t, "/dead/events/retry", url.Values{}).Status)
		require.Equal(t, http.StatusBadRequest, admin.post(t, "/dead/events/retry", url.Values{"event": {"no-slash"}}).Status)
		r = admin.post(t, "/dead/events/retry", url.Values{"event": {"mailer/gone"}})
		require.Equal(t, http.StatusSeeOther, r.Status)
		require.Equal(t, "/dead?requested=0", r.Header.Get("Location"), "an unknown dead letter is not retried")
	})
}

func TestQueuesPage(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		insert(t, b.client, "email", "mail", `{}`)
		dead(t, b.client, "images")
		insert(t, b.client, "resize", "images", `{}`) // a queue is listed with waiting or running jobs
		paused := func(name string) bool {
			qs, err := b.client.Queues(ctx)
			require.NoError(t, err)
			for _, q := range qs {
				if q.Name == name {
					return q.Paused
				}
			}
			return false
		}

		viewer := b.signIn(t, docket.RoleViewer)
		r := viewer.get(t, "/queues")
		require.Equal(t, http.StatusOK, r.Status)
		table := text(find(r.Doc, "table", "queues"))
		require.Contains(t, table, "mail")
		require.Contains(t, table, "images")
		require.Nil(t, find(r.Doc, "form", "pause-other"), "only admin pauses")
		require.Equal(t, http.StatusForbidden, viewer.post(t, "/queues/pause", url.Values{"queue": {"mail"}}).Status)
		producer := b.signIn(t, docket.RoleProducer)
		require.Equal(t, http.StatusForbidden, producer.post(t, "/queues/pause", url.Values{"queue": {"mail"}}).Status)
		require.False(t, paused("mail"))

		admin := b.signIn(t, docket.RoleAdmin)
		admin.get(t, "/queues")
		r = admin.post(t, "/queues/pause", url.Values{"queue": {"mail"}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		require.True(t, paused("mail"))
		r = admin.get(t, r.Header.Get("Location"))
		require.Contains(t, text(find(r.Doc, "p", "queues-message")), "Queue mail paused")
		require.Contains(t, r.Body, `action="/queues/resume"`)
		require.Equal(t, http.StatusSeeOther, admin.post(t, "/queues/resume", url.Values{"queue": {"mail"}}).Status)
		require.False(t, paused("mail"))
		for _, bad := range []string{"", "a b", "<x>"} {
			r = admin.post(t, "/queues/pause", url.Values{"queue": {bad}})
			require.Equal(t, http.StatusBadRequest, r.Status, bad)
			require.Contains(t, text(find(r.Doc, "ul", "")), "queue:")
		}
		// The message names only a queue name that could be one.
		r = admin.get(t, "/queues?done=paused&queue=%3Cfree+text%3E")
		require.Nil(t, find(r.Doc, "p", "queues-message"))
	})
}

// TestDeadRetrySkipsStepJobs: a DEAD job of a workflow step is not
// retried on its own (Client.Retry refuses it: its run is retried), and a
// bulk retry that meets one goes on without it instead of failing, and
// says how many it skipped and why (it had said nothing).
func TestDeadRetrySkipsStepJobs(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		def, err := docket.NewWorkflow("deadstep").Job("a", "deadstep.a", docket.StepMaxAttempts(1)).Definition()
		require.NoError(t, err)
		_, _, err = b.client.WorkflowPut(ctx, def)
		require.NoError(t, err)
		_, err = b.client.RunStart(ctx, "deadstep", nil, nil)
		require.NoError(t, err)
		ls, err := b.client.Lease(ctx, docket.LeaseParams{Queues: []string{"deadstep.a"}, Max: 1, Duration: time.Minute, WorkerID: "w"})
		require.NoError(t, err)
		require.Len(t, ls, 1)
		_, err = b.client.LeaseFail(ctx, ls[0].ID, "broken", false)
		require.NoError(t, err)
		plain := dead(t, b.client, "deadstep.a")

		producer := b.signIn(t, docket.RoleProducer)
		// Ticked: the step's job is skipped, and the page says so.
		r := producer.post(t, "/dead/retry", url.Values{"scope": {"selected"}, "id": {ls[0].Job.ID.String()}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		require.Equal(t, "/dead?retried=0&skipped=1", r.Header.Get("Location"))
		r = producer.get(t, r.Header.Get("Location"))
		msg := text(find(r.Doc, "p", "dead-message"))
		require.Contains(t, msg, "Retried 0 DEAD jobs")
		require.Contains(t, msg, "Skipped 1 workflow step job", "not silently")
		require.Contains(t, msg, "retry its run")

		r = producer.post(t, "/dead/retry", url.Values{"scope": {"filter"}, "queue": {"deadstep.a"}, "confirm": {"retry"}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		loc, err := url.Parse(r.Header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, "1", loc.Query().Get("retried"))
		require.Equal(t, "1", loc.Query().Get("skipped"))
		r = producer.get(t, r.Header.Get("Location"))
		msg = text(find(r.Doc, "p", "dead-message"))
		require.Contains(t, msg, "Retried 1 DEAD jobs")
		require.Contains(t, msg, "Skipped 1 workflow step job")
		row, err := b.client.Get(ctx, ls[0].Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateDead, row.State, "the step's job stays DEAD")
		row, err = b.client.Get(ctx, plain.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateQueued, row.State)
		// Nothing skipped: nothing said of it.
		r = producer.get(t, "/dead?retried=2")
		require.NotContains(t, text(find(r.Doc, "p", "dead-message")), "Skipped")
	})
}
