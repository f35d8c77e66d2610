package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
)

func (s *Server) contributorRoutes() []route {
	return []route{
		{Method: "POST", Path: "/v1/contributors", Perm: permAdmin, Handler: endpoint(s, s.createContributor)},
		{Method: "GET", Path: "/v1/contributors", Perm: permAdmin, Query: []string{"state", "limit", "cursor"}, Lists: []string{"state"}, Handler: endpoint(s, s.listContributors)},
		{Method: "GET", Path: "/v1/contributors/{contributorId}", Perm: permAdmin, Handler: endpoint(s, s.getContributor)},
		{Method: "PATCH", Path: "/v1/contributors/{contributorId}", Perm: permAdmin, Handler: endpoint(s, s.patchContributor)},
		{Method: "POST", Path: "/v1/contributors/{contributorId}/keys", Perm: permAdmin, Handler: endpoint(s, s.createContributorKey)},
		{Method: "GET", Path: "/v1/me", Perm: permWork, Handler: endpoint(s, s.getMe)},
	}
}

// Limits of contributor fields.
const (
	maxTags      = 50
	maxNameBytes = 200
)

type contributorView struct {
	ContributorID uuid.UUID `json:"contributorId"`
	ExternalID    string    `json:"externalId"`
	Name          string    `json:"name"`
	Skills        []string  `json:"skills"`
	Channels      []string  `json:"channels"`
	State         string    `json:"state"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

func contributorViewOf(c *docket.Contributor) *contributorView {
	return &contributorView{
		ContributorID: c.ID, ExternalID: c.ExternalID, Name: c.Name,
		Skills: nonNil(c.Skills), Channels: nonNil(c.Channels), State: string(c.State),
		CreatedAt: c.CreatedAt.UTC(), UpdatedAt: c.UpdatedAt.UTC(),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type contributorsResponse struct {
	Items      []*contributorView `json:"items"`
	NextCursor *string            `json:"nextCursor"`
}

type createContributorRequest struct {
	ExternalID string   `json:"externalId"`
	Name       string   `json:"name"`
	Skills     []string `json:"skills"`
	Channels   []string `json:"channels"`
}

// Validate implements Validator.
func (req *createContributorRequest) Validate() error {
	var errs []FieldError
	switch {
	case req.ExternalID == "":
		errs = append(errs, FieldError{Field: "externalId", Message: "is required: the id you know the person by"})
	case len(req.ExternalID) > maxNameBytes:
		errs = append(errs, FieldError{Field: "externalId", Message: fmt.Sprintf("must be at most %d bytes", maxNameBytes)})
	case hasNUL(req.ExternalID):
		errs = append(errs, FieldError{Field: "externalId", Message: nulProblem})
	}
	errs = append(errs, checkName(req.Name)...)
	errs = append(errs, checkTags("skills", req.Skills)...)
	errs = append(errs, checkTags("channels", req.Channels)...)
	if len(errs) > 0 {
		return invalidFields(errs)
	}
	return nil
}

// checkTags names every bad entry of a list of skills or channels.
func checkTags(field string, tags []string) []FieldError {
	var errs []FieldError
	if len(tags) > maxTags {
		return []FieldError{{Field: field, Message: fmt.Sprintf("lists at most %d", maxTags)}}
	}
	seen := map[string]bool{}
	for i, t := range tags {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case task.CheckToken(t) != "":
			// A template's skills and channels follow this rule (length
			// and characters, NUL among them): a contributor's that did
			// not ("en ", "fr/CA") matched no pool.
			errs = append(errs, FieldError{Field: f, Message: task.CheckToken(t)})
		case seen[t]:
			errs = append(errs, FieldError{Field: f, Message: fmt.Sprintf("%q appears twice", t)})
		}
		seen[t] = true
	}
	return errs
}

// checkName names a contributor's name that is too long or holds NUL.
func checkName(name string) []FieldError {
	switch {
	case len(name) > maxNameBytes:
		return []FieldError{{Field: "name", Message: fmt.Sprintf("must be at most %d bytes", maxNameBytes)}}
	case hasNUL(name):
		return []FieldError{{Field: "name", Message: nulProblem}}
	}
	return nil
}

// nulProblem refuses text holding the NUL character: PostgreSQL cannot
// store it in a text column (SQLite could), so both backends refuse it.
const nulProblem = "must not contain the NUL character, which the database cannot store"

func hasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

func (s *Server) createContributor(ctx context.Context, r *http.Request, req *createContributorRequest) (int, *contributorView, error) {
	c, err := s.client.ContributorCreate(ctx, docket.ContributorCreateParams{
		ExternalID: req.ExternalID, Name: req.Name, Skills: req.Skills, Channels: req.Channels,
	})
	if errors.Is(err, docket.ErrDuplicate) {
		return 0, nil, conflict("duplicate", fmt.Sprintf("a contributor with externalId %q exists already", req.ExternalID))
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, contributorViewOf(c), nil
}

// pathID reads a uuid path value.
func pathID(r *http.Request, name string) (uuid.UUID, error) {
	v := r.PathValue(name)
	id, err := uuid.Parse(v)
	if err != nil || len(v) != 36 {
		return uuid.Nil, invalidField(name, "must be a UUID")
	}
	return id, nil
}

func (s *Server) contributor(ctx context.Context, r *http.Request) (*docket.Contributor, error) {
	id, err := pathID(r, "contributorId")
	if err != nil {
		return nil, err
	}
	c, err := s.client.ContributorGet(ctx, id)
	if errors.Is(err, docket.ErrNotFound) {
		return nil, notFound("no contributor " + id.String())
	}
	return c, err
}

func (s *Server) getContributor(ctx context.Context, r *http.Request, _ *Empty) (int, *contributorView, error) {
	c, err := s.contributor(ctx, r)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, contributorViewOf(c), nil
}

// patchContributorRequest changes the fields it gives.
type patchContributorRequest struct {
	Name     *string   `json:"name"`
	Skills   *[]string `json:"skills"`
	Channels *[]string `json:"channels"`
	State    *string   `json:"state"`
}

// Validate implements Validator.
func (req *patchContributorRequest) Validate() error {
	var errs []FieldError
	if req.Name != nil {
		errs = append(errs, checkName(*req.Name)...)
	}
	if req.Skills != nil {
		errs = append(errs, checkTags("skills", *req.Skills)...)
	}
	if req.Channels != nil {
		errs = append(errs, checkTags("channels", *req.Channels)...)
	}
	if req.State != nil && *req.State != string(docket.ContributorActive) && *req.State != string(docket.ContributorBanned) {
		errs = append(errs, FieldError{Field: "state", Message: fmt.Sprintf("must be active or banned, not %q", *req.State)})
	}
	if req.Name == nil && req.Skills == nil && req.Channels == nil && req.State == nil {
		errs = append(errs, FieldError{Field: "(body)", Message: "changes nothing: give name, skills, channels or state"})
	}
	if len(errs) > 0 {
		return invalidFields(errs)
	}
	return nil
}

func (s *Server) patchContributor(ctx context.Context, r *http.Request, req *patchContributorRequest) (int, *contributorView, error) {
	id, err := pathID(r, "contributorId")
	if err != nil {
		return 0, nil, err
	}
	p := docket.ContributorUpdateParams{Name: req.Name, Skills: req.Skills, Channels: req.Channels}
	if req.State != nil {
		st := docket.ContributorState(*req.State)
		p.State = &st
	}
	c, err := s.client.ContributorUpdate(ctx, id, p)
	s.forgetWorker(id)
	if errors.Is(err, docket.ErrNotFound) {
		return 0, nil, notFound("no contributor " + id.String())
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, contributorViewOf(c), nil
}

// contributorStates are the states GET /v1/contributors filters by: the
// ones a contributor's state takes over HTTP (PATCH sets active or
// banned). "flagged" once passed too and matched nobody: quality control
// flags a contributor in one pool at a time (docket_pool_contributors),
// never in their state, so it is refused with where flags are.
var contributorStates = []string{string(docket.ContributorActive), string(docket.ContributorBanned)}

func (s *Server) listContributors(ctx context.Context, r *http.Request, _ *Empty) (int, *contributorsResponse, error) {
	q, errs := query(r)
	limit, err := queryLimit(q.Get("limit"), q.Has("limit"))
	if err != nil {
		errs = append(errs, problemFor(err).Errors...)
	}
	p := docket.ContributorListParams{Limit: limit + 1}
	for _, st := range splitList(q["state"]) {
		switch {
		case st == string(docket.ContributorFlagged):
			errs = append(errs, FieldError{Field: "state", Message: `"flagged" is no contributor's state: quality control flags a contributor in one pool ` +
				`(GET /v1/pools/{poolId}/contributors/{contributorId}, event contributor.flagged); filter by active or banned`})
		case !slices.Contains(contributorStates, st):
			errs = append(errs, FieldError{Field: "state", Message: fmt.Sprintf("%q is not a contributor state (active or banned)", st)})
		}
		p.States = append(p.States, docket.ContributorState(st))
	}
	if q.Has("cursor") {
		if p.Before, err = decodeCursor(q.Get("cursor")); err != nil {
			errs = append(errs, problemFor(err).Errors...)
		}
	}
	if err := queryErrors(errs); err != nil {
		return 0, nil, err
	}
	list, err := s.client.ContributorList(ctx, p)
	if err != nil {
		return 0, nil, err
	}
	resp := &contributorsResponse{Items: []*contributorView{}}
	if len(list) > limit {
		list = list[:limit]
		next := encodeCursor(list[limit-1].ID)
		resp.NextCursor = &next
	}
	for _, c := range list {
		resp.Items = append(resp.Items, contributorViewOf(c))
	}
	return http.StatusOK, resp, nil
}

// createKeyRequest names a contributor's key; the body is optional.
type createKeyRequest struct {
	Name string `json:"name"`
}

func (*createKeyRequest) bodyOptional() {}

// Validate implements Validator.
func (req *createKeyRequest) Validate() error {
	switch {
	case len(req.Name) > 128:
		return invalidField("name", "must be at most 128 bytes")
	case hasNUL(req.Name):
		return invalidField("name", nulProblem)
	}
	return nil
}

// contributorKeyView is a new contributor key with its secret, shown once.
type contributorKeyView struct {
	KeyID         uuid.UUID `json:"keyId"`
	Name          string    `json:"name"`
	Role          string    `json:"role"`
	Prefix        string    `json:"prefix"`
	ContributorID uuid.UUID `json:"contributorId"`
	Secret        string    `json:"secret"`
	CreatedAt     time.Time `json:"createdAt"`
}

func (s *Server) createContributorKey(ctx context.Context, r *http.Request, req *createKeyRequest) (int, *contributorKeyView, error) {
	c, err := s.contributor(ctx, r)
	if err != nil {
		return 0, nil, err
	}
	name := req.Name
	if name == "" {
		name = "contributor " + c.ExternalID
		if len(name) > 128 {
			// Cut at a character: half of one is not UTF-8, which
			// PostgreSQL refuses.
			n := 128
			for n > 0 && !utf8.RuneStart(name[n]) {
				n--
			}
			name = name[:n]
		}
	}
	secret, k, err := s.client.CreateContributorKey(ctx, c.ID, name)
	if errors.Is(err, docket.ErrNotFound) {
		return 0, nil, notFound("no contributor " + c.ID.String())
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, &contributorKeyView{
		KeyID: k.ID, Name: k.Name, Role: string(k.Role), Prefix: k.Prefix, ContributorID: k.ContributorID,
		Secret: secret, CreatedAt: k.CreatedAt.UTC(),
	}, nil
}

// me is the contributor of a contributor key.
func (s *Server) me(ctx context.Context) (*docket.Contributor, error) {
	k := principal(ctx)
	if k == nil || k.ContributorID == uuid.Nil {
		return nil, forbidden("this endpoint is for contributor keys")
	}
	c, err := s.client.ContributorGet(ctx, k.ContributorID)
	if errors.Is(err, docket.ErrNotFound) {
		return nil, forbidden("the key's contributor no longer exists")
	}
	return c, err
}

// worker is me for the endpoints that do work — take, heartbeat, extend,
// submit: a banned contributor is refused (403) at once, whatever
// assignment they still hold (its lease lapses and the reaper frees the
// slot). Releasing stays open to them: it gives the slot back sooner.
func (s *Server) worker(ctx context.Context) (*docket.Contributor, error) {
	c, err := s.me(ctx)
	if err == nil && c.State == docket.ContributorBanned {
		return nil, forbidden("you are banned: you may take, heartbeat, extend or submit no assignment")
	}
	return c, err
}

func (s *Server) getMe(ctx context.Context, r *http.Request, _ *Empty) (int, *contributorView, error) {
	c, err := s.me(ctx)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, contributorViewOf(c), nil
}
