package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestForgive: on both backends, a spammer flagged by quality control
// (seedQuality) is forgiven from their page by an admin: the form is
// there for an admin only, a missing or wrong confirmation is 400 and
// changes nothing, the forgiveness lifts the flag, un-taints their
// judgments and recomputes the unit (audited), and the page says so; a
// second forgiveness, or one of a contributor never flagged, is 409 with
// a clear message; unknown ids are 404.
func TestForgive(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setupQuality(t, backend)
		s := seedQuality(t, b)
		page := "/pools/" + s.pool.ID.String() + "/contributors/" + s.spm.ID.String()
		admin := b.signIn(t, docket.RoleAdmin)

		r := admin.get(t, page)
		require.Equal(t, http.StatusOK, r.Status)
		form := find(r.Doc, "form", "forgive-form")
		require.NotNil(t, form, "an admin may forgive a flagged contributor")
		require.Equal(t, page+"/forgive", attr(form, "action"))
		require.Equal(t, admin.csrf, formValue(form, "csrf"))
		require.NotNil(t, find(form, "input", "confirm"))

		// Not confirmed: 400 on the page, the field named, nothing changed.
		for _, confirm := range []string{"", "yes", "forgiv"} {
			r = admin.post(t, page+"/forgive", url.Values{"confirm": {confirm}})
			require.Equal(t, http.StatusBadRequest, r.Status, confirm)
			require.Contains(t, text(find(r.Doc, "ul", "errors")), "confirm: type forgive")
			require.NotNil(t, find(r.Doc, "form", "forgive-form"), "the form is shown again")
		}
		st, err := b.client.ContributorQualityGet(ctx, s.pool.ID, s.spm.ID)
		require.NoError(t, err)
		require.True(t, st.Standing.Flagged, "a refused form forgives nobody")

		// Forgiven: back to the page with the message.
		r = admin.post(t, page+"/forgive", url.Values{"confirm": {" Forgive "}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		loc, err := url.Parse(r.Header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, page, loc.Path)
		r = admin.get(t, loc.RequestURI())
		require.Equal(t, http.StatusOK, r.Status)
		msg := text(find(r.Doc, "p", "message"))
		require.Contains(t, msg, "Forgiven: Spam Bot's flag (trust check) is lifted")
		require.Contains(t, msg, "units they judged were repaired")
		require.Contains(t, text(find(r.Doc, "dd", "standing")), "forgiven")
		require.NotContains(t, text(find(r.Doc, "dd", "standing")), "FLAGGED")
		require.Nil(t, find(r.Doc, "form", "forgive-form"), "nothing left to forgive")
		for _, tr := range rows(find(r.Doc, "table", "judgments")) {
			require.Empty(t, attr(tr, "class"), "every judgment of theirs counts again")
		}
		st, err = b.client.ContributorQualityGet(ctx, s.pool.ID, s.spm.ID)
		require.NoError(t, err)
		require.False(t, st.Standing.Flagged)
		require.Equal(t, 0, st.Trust.TestsAnswered, "test counts restart")
		require.Contains(t, text(find(r.Doc, "table", "history")), "forgiven by key test-admin", "the key that forgave")
		// The first unit, recomputed with the spammer's no again: a
		// second audit, caused by the forgiveness.
		audits, err := b.client.UnitAudits(ctx, s.unit.ID)
		require.NoError(t, err)
		require.Len(t, audits, 2)
		require.True(t, audits[1].Cause.Untaint)
		r = admin.get(t, "/units/"+s.unit.ID.String())
		require.Contains(t, text(find(r.Doc, "p", "judgments-clean")), "3 clean judgments count toward the result")

		// Again: not flagged any more, 409 and a clear message.
		r = admin.post(t, page+"/forgive", url.Values{"confirm": {"forgive"}})
		require.Equal(t, http.StatusConflict, r.Status)
		require.Contains(t, text(find(r.Doc, "p", "message")), "Cannot forgive: Spam Bot is not flagged in this pool")
		// Ada was never flagged.
		r = admin.post(t, "/pools/"+s.pool.ID.String()+"/contributors/"+s.ada.ID.String()+"/forgive", url.Values{"confirm": {"forgive"}})
		require.Equal(t, http.StatusConflict, r.Status)
		require.Contains(t, text(find(r.Doc, "p", "message")), "Ada is not flagged in this pool")
		audits, err = b.client.UnitAudits(ctx, s.unit.ID)
		require.NoError(t, err)
		require.Len(t, audits, 2, "a refused forgiveness repairs nothing")

		// Unknown or malformed ids.
		for _, p := range []string{"/pools/" + s.pool.ID.String() + "/contributors/" + uuid.NewString(), "/pools/" + uuid.NewString() + "/contributors/" + s.spm.ID.String(),
			"/pools/x/contributors/" + s.spm.ID.String(), "/pools/" + s.pool.ID.String() + "/contributors/x"} {
			require.Equal(t, http.StatusNotFound, admin.post(t, p+"/forgive", url.Values{"confirm": {"forgive"}}).Status, p)
		}
	})
}

// TestForgiveTwiceAtOnce: two admins forgive the same flagged
// contributor at once: neither fails, and there is one forgiveness — one
// repair of the unit, one un-flagging in the trust history.
func TestForgiveTwiceAtOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setupQuality(t, backend)
		s := seedQuality(t, b)
		path := "/pools/" + s.pool.ID.String() + "/contributors/" + s.spm.ID.String() + "/forgive"
		admins := []*browser{b.signIn(t, docket.RoleAdmin), b.signIn(t, docket.RoleAdmin)}
		statuses := make([]int, len(admins))
		var wg sync.WaitGroup
		for i, a := range admins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i] = a.post(t, path, url.Values{"confirm": {"forgive"}}).Status
			}()
		}
		wg.Wait()
		for _, st := range statuses {
			require.Contains(t, []int{http.StatusSeeOther, http.StatusConflict}, st)
		}
		audits, err := b.client.UnitAudits(context.Background(), s.unit.ID)
		require.NoError(t, err)
		require.Len(t, audits, 2, "one forgiveness, one repair")
		history, err := b.client.TrustHistory(context.Background(), s.pool.ID, s.spm.ID)
		require.NoError(t, err)
		forgiven := 0
		for _, e := range history {
			if strings.HasPrefix(e.Reason, "forgiven by") {
				forgiven++
			}
		}
		require.Equal(t, 1, forgiven)
	})
}

// TestForgiveRoles: only an admin key forgives; a viewer, a producer and
// a contributor are refused 403 (and see no form), no session 401, a
// form without the session's CSRF token (none, empty, forged, another
// session's) 403 — the contributor stays flagged.
func TestForgiveRoles(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setupQuality(t, backend)
		s := seedQuality(t, b)
		page := "/pools/" + s.pool.ID.String() + "/contributors/" + s.spm.ID.String()
		for _, role := range []docket.Role{docket.RoleViewer, docket.RoleProducer} {
			br := b.signIn(t, role)
			r := br.get(t, page)
			require.Equal(t, http.StatusOK, r.Status)
			require.Contains(t, text(find(r.Doc, "dd", "standing")), "FLAGGED by the trust check")
			require.Nil(t, find(r.Doc, "form", "forgive-form"), role)
			r = br.post(t, page+"/forgive", url.Values{"confirm": {"forgive"}})
			require.Equal(t, http.StatusForbidden, r.Status, role)
			require.Contains(t, r.Body, "may not open this page")
		}
		contributor := b.signIn(t, RoleContributor)
		require.Equal(t, http.StatusForbidden, contributor.post(t, page+"/forgive", url.Values{"confirm": {"forgive"}}).Status)
		anon := b.browser(t)
		require.Equal(t, http.StatusUnauthorized, anon.do(t, "POST", page+"/forgive", url.Values{"confirm": {"forgive"}}).Status)
		admin := b.signIn(t, docket.RoleAdmin)
		other := b.signIn(t, docket.RoleAdmin)
		for name, token := range map[string][]string{"none": nil, "empty": {""}, "forged": {"forged"}, "another session's": {other.csrf}} {
			form := url.Values{"confirm": {"forgive"}}
			if token != nil {
				form["csrf"] = token
			}
			r := admin.do(t, "POST", page+"/forgive", form)
			require.Equal(t, http.StatusForbidden, r.Status, name)
			require.Contains(t, r.Body, "CSRF", name)
		}
		st, err := b.client.ContributorQualityGet(context.Background(), s.pool.ID, s.spm.ID)
		require.NoError(t, err)
		require.True(t, st.Standing.Flagged, "no refused post forgave them")
		// The admin's own form works.
		require.NotNil(t, find(admin.get(t, page).Doc, "form", "forgive-form"))
		r := admin.post(t, page+"/forgive", url.Values{"confirm": {"forgive"}})
		require.Equal(t, http.StatusSeeOther, r.Status)
		require.Contains(t, admin.get(t, r.Header.Get("Location")).Body, "(trust check) is lifted")
	})
}
