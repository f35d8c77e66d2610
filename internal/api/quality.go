package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// Quality control (docs/quality.md): what a pool knows of a contributor,
// an admin's forgiveness of a flagged one, and the audit of the results a
// repair changed.
func (s *Server) qualityRoutes() []route {
	return []route{
		{Method: "GET", Path: "/v1/pools/{poolId}/contributors/{contributorId}", Perm: permAdmin, Handler: endpoint(s, s.getContributorQuality)},
		{Method: "POST", Path: "/v1/pools/{poolId}/contributors/{contributorId}/forgive", Perm: permAdmin, Handler: endpoint(s, s.forgiveContributor)},
		{Method: "GET", Path: "/v1/units/{unitId}/audits", Perm: permRead, Handler: endpoint(s, s.listUnitAudits)},
	}
}

// contributorQualityView is a contributor's quality state in a pool.
type contributorQualityView struct {
	PoolID        uuid.UUID  `json:"poolId"`
	ContributorID uuid.UUID  `json:"contributorId"`
	Trust         float64    `json:"trust"`
	TestsAnswered int        `json:"testsAnswered"`
	TestsCorrect  int        `json:"testsCorrect"`
	Flagged       bool       `json:"flagged"`
	FlagCheck     *string    `json:"flagCheck"`
	FlagReason    *string    `json:"flagReason"`
	FlaggedAt     *time.Time `json:"flaggedAt"`
	ForgivenAt    *time.Time `json:"forgivenAt"`
	Assignments   int        `json:"assignments"`
	TestQuestions int        `json:"testQuestions"`
	TooFast       int        `json:"tooFast"`
}

func contributorQualityOf(st *docket.ContributorQuality) *contributorQualityView {
	v := &contributorQualityView{PoolID: st.PoolID, ContributorID: st.ContributorID, Trust: st.Trust.Value,
		TestsAnswered: st.Trust.TestsAnswered, TestsCorrect: st.Trust.TestsCorrect, Flagged: st.Standing.Flagged,
		FlaggedAt: timeOrNull(st.FlaggedAt), ForgivenAt: timeOrNull(st.ForgivenAt),
		Assignments: st.Counts.Taken, TestQuestions: st.Counts.TestsTaken, TooFast: st.TooFast}
	if st.Standing.Flagged {
		check, reason := string(st.Standing.Check), st.FlagReason
		v.FlagCheck, v.FlagReason = &check, &reason
	}
	return v
}

// poolContributor reads the pool and contributor ids of the path.
func poolContributor(r *http.Request) (poolID, contributorID uuid.UUID, err error) {
	poolID, err = pathID(r, "poolId")
	if err != nil {
		return
	}
	contributorID, err = pathID(r, "contributorId")
	return
}

func (s *Server) getContributorQuality(ctx context.Context, r *http.Request, _ *Empty) (int, *contributorQualityView, error) {
	poolID, contributorID, err := poolContributor(r)
	if err != nil {
		return 0, nil, err
	}
	if _, err := s.client.PoolGet(ctx, poolID); errors.Is(err, docket.ErrNotFound) {
		return 0, nil, notFound("no pool " + poolID.String())
	} else if err != nil {
		return 0, nil, err
	}
	if _, err := s.client.ContributorGet(ctx, contributorID); errors.Is(err, docket.ErrNotFound) {
		return 0, nil, notFound("no contributor " + contributorID.String())
	} else if err != nil {
		return 0, nil, err
	}
	st, err := s.client.ContributorQualityGet(ctx, poolID, contributorID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, contributorQualityOf(st), nil
}

func (s *Server) forgiveContributor(ctx context.Context, r *http.Request, _ *Empty) (int, *contributorQualityView, error) {
	poolID, contributorID, err := poolContributor(r)
	if err != nil {
		return 0, nil, err
	}
	by := "an admin"
	if k := principal(ctx); k != nil {
		by = "key " + k.Name
	}
	st, err := s.client.ContributorForgive(ctx, poolID, contributorID, by)
	if errors.Is(err, docket.ErrNotFound) {
		return 0, nil, notFound("no pool " + poolID.String() + " or no contributor " + contributorID.String())
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, contributorQualityOf(st), nil
}

// unitAuditView is one audit record of a unit's changed result.
type unitAuditView struct {
	AuditID       uuid.UUID       `json:"auditId"`
	UnitID        uuid.UUID       `json:"unitId"`
	PoolID        uuid.UUID       `json:"poolId"`
	Action        string          `json:"action"`
	OldResult     json.RawMessage `json:"oldResult"`
	OldConfidence *float64        `json:"oldConfidence"`
	NewResult     json.RawMessage `json:"newResult"`
	NewConfidence *float64        `json:"newConfidence"`
	ContributorID uuid.UUID       `json:"contributorId"`
	Check         string          `json:"check"`
	Untaint       bool            `json:"untaint"`
	Why           string          `json:"why"`
	At            time.Time       `json:"at"`
}

type unitAuditsResponse struct {
	Items []*unitAuditView `json:"items"`
}

func (s *Server) listUnitAudits(ctx context.Context, r *http.Request, _ *Empty) (int, *unitAuditsResponse, error) {
	u, err := s.unit(ctx, r)
	if err != nil {
		return 0, nil, err
	}
	audits, err := s.client.UnitAudits(ctx, u.ID)
	if err != nil {
		return 0, nil, err
	}
	resp := &unitAuditsResponse{Items: []*unitAuditView{}}
	for _, a := range audits {
		resp.Items = append(resp.Items, &unitAuditView{AuditID: a.ID, UnitID: a.UnitID, PoolID: a.PoolID, Action: string(a.Action),
			OldResult: jsonOrNull(a.Old.Value), OldConfidence: a.Old.Confidence, NewResult: jsonOrNull(a.New.Value),
			NewConfidence: a.New.Confidence, ContributorID: a.Cause.ContributorID, Check: string(a.Cause.Check),
			Untaint: a.Cause.Untaint, Why: a.Why, At: a.At.UTC()})
	}
	return http.StatusOK, resp, nil
}
