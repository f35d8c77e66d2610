package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

const contributorColumns = `id, external_id, name, skills, channels, state, created_at, updated_at`

func scanContributor(r rowScanner) (*crowd.Contributor, error) {
	var (
		c     crowd.Contributor
		state string
	)
	if err := r.Scan(&c.ID, &c.ExternalID, &c.Name, &c.Skills, &c.Channels, &state, &c.CreatedAt, &c.UpdatedAt); err != nil {
		return nil, err
	}
	c.Skills, c.Channels = orEmpty(c.Skills), orEmpty(c.Channels)
	c.State = crowd.ContributorState(state)
	c.CreatedAt = c.CreatedAt.UTC()
	c.UpdatedAt = c.UpdatedAt.UTC()
	return &c, nil
}

// ContributorCreate implements store.Store.
func (s *Store) ContributorCreate(ctx context.Context, p *store.ContributorCreateParams) (*crowd.Contributor, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	c, err := scanContributor(s.pool.QueryRow(ctx, `
		INSERT INTO docket_contributors (id, external_id, name, skills, channels, state, created_at, updated_at)
		VALUES ($1, $2, $3, $4::text[], $5::text[], 'active', $6, $6)
		RETURNING `+contributorColumns, p.ID, p.ExternalID, p.Name, orEmpty(p.Skills), orEmpty(p.Channels), dbTime(p.Now)))
	if isUniqueViolation(err) {
		return nil, fmt.Errorf("create contributor %q: %w", p.ExternalID, store.ErrDuplicate)
	}
	if err != nil {
		return nil, fmt.Errorf("create contributor %q: %w", p.ExternalID, err)
	}
	return c, nil
}

// ContributorGet implements store.Store.
func (s *Store) ContributorGet(ctx context.Context, id uuid.UUID) (*crowd.Contributor, error) {
	return contributorGet(ctx, s.pool, id)
}

func contributorGet(ctx context.Context, c conn, id uuid.UUID) (*crowd.Contributor, error) {
	k, err := scanContributor(c.QueryRow(ctx, `SELECT `+contributorColumns+` FROM docket_contributors WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("get contributor %s: %w", id, notFound(err))
	}
	return k, nil
}

// ContributorStates implements store.Store.
func (s *Store) ContributorStates(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]crowd.ContributorState, error) {
	out := make(map[uuid.UUID]crowd.ContributorState, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rs, err := s.pool.Query(ctx, `SELECT id, state FROM docket_contributors WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("read contributors' states: %w", err)
	}
	var (
		id    uuid.UUID
		state string
	)
	_, err = pgx.ForEachRow(rs, []any{&id, &state}, func() error {
		out[id] = crowd.ContributorState(state)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read contributors' states: %w", err)
	}
	return out, nil
}

// ContributorGetByExternalID implements store.Store.
func (s *Store) ContributorGetByExternalID(ctx context.Context, externalID string) (*crowd.Contributor, error) {
	k, err := scanContributor(s.pool.QueryRow(ctx, `SELECT `+contributorColumns+` FROM docket_contributors
		WHERE external_id = $1`, externalID))
	if err != nil {
		return nil, fmt.Errorf("get contributor %q: %w", externalID, notFound(err))
	}
	return k, nil
}

// ContributorUpdate implements store.Store: one UPDATE setting the fields
// given (coalesce keeps the others).
func (s *Store) ContributorUpdate(ctx context.Context, p *store.ContributorUpdateParams) (*crowd.Contributor, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var skills, channels, state any
	if p.Skills != nil {
		skills = orEmpty(*p.Skills)
	}
	if p.Channels != nil {
		channels = orEmpty(*p.Channels)
	}
	if p.State != nil {
		state = string(*p.State)
	}
	c, err := scanContributor(s.pool.QueryRow(ctx, `
		UPDATE docket_contributors SET name = coalesce($2, name), skills = coalesce($3::text[], skills),
			channels = coalesce($4::text[], channels), state = coalesce($5, state), updated_at = $6
		WHERE id = $1
		RETURNING `+contributorColumns, p.ID, p.Name, skills, channels, state, dbTime(p.Now)))
	if err != nil {
		return nil, fmt.Errorf("update contributor %s: %w", p.ID, notFound(err))
	}
	return c, nil
}

// ContributorList implements store.Store.
func (s *Store) ContributorList(ctx context.Context, p *store.ContributorListParams) ([]*crowd.Contributor, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(p.States) > 0 {
		st := make([]string, len(p.States))
		for i, s := range p.States {
			st[i] = string(s)
		}
		where = append(where, "state = ANY("+arg(st)+"::text[])")
	}
	if p.BeforeID != uuid.Nil {
		where = append(where, "id < "+arg(p.BeforeID))
	}
	q := `SELECT ` + contributorColumns + ` FROM docket_contributors`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT " + arg(limitOrNull(p.Limit))
	rs, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list contributors: %w", err)
	}
	out, err := collect(rs, scanContributor)
	if err != nil {
		return nil, fmt.Errorf("list contributors: %w", err)
	}
	return out, nil
}

const poolContributorColumns = `pool_id, contributor_id, trust, tests_answered, tests_correct, flagged,
	flag_reason, flagged_at, updated_at`

func scanPoolContributor(r rowScanner) (*crowd.PoolContributor, error) {
	var (
		pc      crowd.PoolContributor
		flagged *time.Time
	)
	if err := r.Scan(&pc.PoolID, &pc.ContributorID, &pc.Trust, &pc.TestsAnswered, &pc.TestsCorrect, &pc.Flagged,
		&pc.FlagReason, &flagged, &pc.UpdatedAt); err != nil {
		return nil, err
	}
	pc.FlaggedAt = utcOrZero(flagged)
	pc.UpdatedAt = pc.UpdatedAt.UTC()
	return &pc, nil
}

// PoolContributorGet implements store.Store.
func (s *Store) PoolContributorGet(ctx context.Context, poolID, contributorID uuid.UUID) (*crowd.PoolContributor, error) {
	pc, err := scanPoolContributor(s.pool.QueryRow(ctx, `SELECT `+poolContributorColumns+`
		FROM docket_pool_contributors WHERE pool_id = $1 AND contributor_id = $2`, poolID, contributorID))
	if errors.Is(err, pgx.ErrNoRows) {
		return &crowd.PoolContributor{PoolID: poolID, ContributorID: contributorID}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get contributor %s in pool %s: %w", contributorID, poolID, err)
	}
	return pc, nil
}

// PoolContributorPut implements store.Store. flagged_at keeps the time of
// the first flag while the contributor stays flagged.
func (s *Store) PoolContributorPut(ctx context.Context, p *store.PoolContributorPutParams) (*crowd.PoolContributor, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	pc, err := scanPoolContributor(s.pool.QueryRow(ctx, `
		INSERT INTO docket_pool_contributors AS pc (pool_id, contributor_id, trust, tests_answered, tests_correct,
			flagged, flag_reason, flagged_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, CASE WHEN $6 THEN $8::timestamptz END, $8)
		ON CONFLICT (pool_id, contributor_id) DO UPDATE SET trust = excluded.trust,
			tests_answered = excluded.tests_answered, tests_correct = excluded.tests_correct,
			flagged = excluded.flagged, flag_reason = excluded.flag_reason,
			flagged_at = CASE WHEN NOT excluded.flagged THEN NULL ELSE coalesce(pc.flagged_at, excluded.flagged_at) END,
			updated_at = excluded.updated_at
		RETURNING `+poolContributorColumns,
		p.PoolID, p.ContributorID, p.Trust, p.TestsAnswered, p.TestsCorrect, p.Flagged, p.FlagReason, dbTime(p.Now)))
	if isFKViolation(err) {
		return nil, fmt.Errorf("put contributor %s in pool %s: %w", p.ContributorID, p.PoolID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("put contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return pc, nil
}
