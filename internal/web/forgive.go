package web

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/quality"
)

// An admin's forgiveness of a contributor flagged in a pool, from the
// contributor's page in the pool (docs/web.md): Client.ContributorForgive,
// as POST /v1/pools/{poolId}/contributors/{contributorId}/forgive. It
// lifts the flag, un-taints every judgment of theirs in the pool and
// repairs the units they judged — finalized results may change — so the
// form is confirmed by typing a word, as the dead letters' retry of a
// filter is.

// forgiveConfirm is the word the forgive form is confirmed with.
const forgiveConfirm = "forgive"

// parseForgive reads the forgive form: confirm must be forgiveConfirm (in
// any case, spaces around it ignored). Every problem names its field.
func parseForgive(form url.Values) []string {
	if strings.ToLower(strings.TrimSpace(form.Get("confirm"))) != forgiveConfirm {
		return []string{"confirm: type " + forgiveConfirm + " to lift the flag and count their judgments again"}
	}
	return nil
}

// contributorForgive is POST /pools/{id}/contributors/{contributor}/forgive
// (admin): a bad confirmation is 400, a contributor not flagged in the
// pool 409, each shown on the contributor's page; a forgiveness goes back
// to the page with a message. ContributorForgive does not say whether it
// was the call that lifted the flag: two admins forgiving at once both
// read "Forgiven", and there is one forgiveness (it leaves a contributor
// no longer flagged as they are).
func (h *Handler) contributorForgive(w http.ResponseWriter, r *http.Request) {
	poolID, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "Not a pool id: "+r.PathValue("id"))
		return
	}
	cID, err := uuid.Parse(r.PathValue("contributor"))
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "Not a contributor id: "+r.PathValue("contributor"))
		return
	}
	if problems := parseForgive(r.PostForm); problems != nil {
		h.showContributor(w, r, http.StatusBadRequest, "", problems)
		return
	}
	ctx := r.Context()
	c, err := h.client.ContributorGet(ctx, cID)
	if errors.Is(err, docket.ErrNotFound) {
		h.renderError(w, r, http.StatusNotFound, "No contributor "+cID.String()+".")
		return
	}
	if err != nil {
		h.renderFailure(w, r, "Reading the contributor failed", err)
		return
	}
	name := c.Name
	if name == "" {
		name = c.ExternalID
	}
	before, err := h.client.ContributorQualityGet(ctx, poolID, cID)
	if err != nil {
		h.renderFailure(w, r, "Reading the contributor's quality failed", err)
		return
	}
	if !before.Standing.Flagged {
		h.showContributor(w, r, http.StatusConflict, "Cannot forgive: "+name+" is not flagged in this pool, so there is nothing to forgive.", nil)
		return
	}
	_, err = h.client.ContributorForgive(ctx, poolID, cID, "key "+sessionOf(ctx).key.Name)
	if errors.Is(err, docket.ErrNotFound) {
		h.renderError(w, r, http.StatusNotFound, "No pool "+poolID.String()+" or no contributor "+cID.String()+".")
		return
	}
	if err != nil {
		h.renderFailure(w, r, "Forgiving failed", err)
		return
	}
	q := url.Values{"done": {"forgiven"}, "check": {string(before.Standing.Check)}}
	http.Redirect(w, r, "/pools/"+poolID.String()+"/contributors/"+cID.String()+"?"+q.Encode(), http.StatusSeeOther)
}

// forgivenChecks are the checks that flag a contributor, those a
// forgiveness's message may name.
var forgivenChecks = []quality.FlagCheck{quality.CheckTrust, quality.CheckTooFast, quality.CheckSameAnswer, quality.CheckFirstOption}

// forgiven words a forgiveness of name (contributorForgive's redirect
// names it by code, ?done=forgiven&check=, so that no link puts words on
// the page): the check only when it is one.
func forgiven(q url.Values, name string) string {
	if q.Get("done") != "forgiven" {
		return ""
	}
	flag := "flag"
	if check := quality.FlagCheck(q.Get("check")); slices.Contains(forgivenChecks, check) {
		flag += " (" + string(check) + " check)"
	}
	return "Forgiven: " + name + "'s " + flag + " is lifted and their test counts restart; " +
		"every judgment of theirs in this pool counts again and the units they judged were repaired — a finalized result that changed is audited on its unit's page."
}
