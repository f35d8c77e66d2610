package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

const contributorColumns = `id, external_id, name, skills, channels, state, created_at, updated_at`

func scanContributor(r scanner) (*crowd.Contributor, error) {
	var (
		c                     crowd.Contributor
		id, skills, chans, st string
		created, updated      int64
	)
	if err := r.Scan(&id, &c.ExternalID, &c.Name, &skills, &chans, &st, &created, &updated); err != nil {
		return nil, err
	}
	var err error
	if c.ID, err = parseUUID("contributor", id); err != nil {
		return nil, err
	}
	if c.Skills, err = decodeNames(skills); err != nil {
		return nil, err
	}
	if c.Channels, err = decodeNames(chans); err != nil {
		return nil, err
	}
	c.State = crowd.ContributorState(st)
	c.CreatedAt, c.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &c, nil
}

// ContributorCreate implements store.Store.
func (s *Store) ContributorCreate(ctx context.Context, p *store.ContributorCreateParams) (*crowd.Contributor, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var c *crowd.Contributor
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		c, err = scanContributor(tx.QueryRowContext(ctx, `INSERT INTO docket_contributors (id, external_id, name, skills,
			channels, state, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'active', ?6, ?6) RETURNING `+contributorColumns,
			p.ID.String(), p.ExternalID, p.Name, encodeNames(p.Skills), encodeNames(p.Channels), micros(p.Now)))
		return err
	})
	if isUnique(err) {
		return nil, fmt.Errorf("create contributor %q: %w", p.ExternalID, store.ErrDuplicate)
	}
	if err != nil {
		return nil, fmt.Errorf("create contributor %q: %w", p.ExternalID, err)
	}
	return c, nil
}

// ContributorGet implements store.Store.
func (s *Store) ContributorGet(ctx context.Context, id uuid.UUID) (*crowd.Contributor, error) {
	return contributorGet(ctx, s.reader, id)
}

func contributorGet(ctx context.Context, c conn, id uuid.UUID) (*crowd.Contributor, error) {
	k, err := scanContributor(c.QueryRowContext(ctx, `SELECT `+contributorColumns+` FROM docket_contributors WHERE id = ?`, id.String()))
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
	js, err := uuidsJSON(ids)
	if err != nil {
		return nil, err
	}
	type row struct {
		id    uuid.UUID
		state crowd.ContributorState
	}
	rows, err := queryAll(ctx, s.reader, func(r scanner) (row, error) {
		var id, st string
		if err := r.Scan(&id, &st); err != nil {
			return row{}, err
		}
		u, err := parseUUID("contributor", id)
		return row{u, crowd.ContributorState(st)}, err
	}, `SELECT id, state FROM docket_contributors WHERE id IN (SELECT value FROM json_each(?))`, js)
	if err != nil {
		return nil, fmt.Errorf("read contributors' states: %w", err)
	}
	for _, r := range rows {
		out[r.id] = r.state
	}
	return out, nil
}

// ContributorGetByExternalID implements store.Store.
func (s *Store) ContributorGetByExternalID(ctx context.Context, externalID string) (*crowd.Contributor, error) {
	k, err := scanContributor(s.reader.QueryRowContext(ctx, `SELECT `+contributorColumns+` FROM docket_contributors
		WHERE external_id = ?`, externalID))
	if err != nil {
		return nil, fmt.Errorf("get contributor %q: %w", externalID, notFound(err))
	}
	return k, nil
}

// ContributorUpdate implements store.Store.
func (s *Store) ContributorUpdate(ctx context.Context, p *store.ContributorUpdateParams) (*crowd.Contributor, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var skills, chans, state any
	if p.Skills != nil {
		skills = encodeNames(*p.Skills)
	}
	if p.Channels != nil {
		chans = encodeNames(*p.Channels)
	}
	if p.State != nil {
		state = string(*p.State)
	}
	var c *crowd.Contributor
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		c, err = scanContributor(tx.QueryRowContext(ctx, `UPDATE docket_contributors SET name = coalesce(?, name),
			skills = coalesce(?, skills), channels = coalesce(?, channels), state = coalesce(?, state), updated_at = ?
			WHERE id = ? RETURNING `+contributorColumns, p.Name, skills, chans, state, micros(p.Now), p.ID.String()))
		return err
	})
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
	if len(p.States) > 0 {
		where = append(where, "state IN ("+placeholders(len(p.States))+")")
		for _, st := range p.States {
			args = append(args, string(st))
		}
	}
	if p.BeforeID != uuid.Nil {
		where, args = append(where, "id < ?"), append(args, p.BeforeID.String())
	}
	q := `SELECT ` + contributorColumns + ` FROM docket_contributors`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	out, err := queryAll(ctx, s.reader, scanContributor, q+" ORDER BY id DESC LIMIT ?", append(args, limit(p.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("list contributors: %w", err)
	}
	return out, nil
}

const poolContributorColumns = `pool_id, contributor_id, trust, tests_answered, tests_correct, flagged,
	flag_reason, flagged_at, updated_at`

func scanPoolContributor(r scanner) (*crowd.PoolContributor, error) {
	var (
		pc          crowd.PoolContributor
		poolID, cID string
		trust       sql.NullFloat64
		flagged     int64
		flaggedAt   sql.NullInt64
		updated     int64
	)
	if err := r.Scan(&poolID, &cID, &trust, &pc.TestsAnswered, &pc.TestsCorrect, &flagged, &pc.FlagReason,
		&flaggedAt, &updated); err != nil {
		return nil, err
	}
	var err error
	if pc.PoolID, err = parseUUID("pool", poolID); err != nil {
		return nil, err
	}
	if pc.ContributorID, err = parseUUID("contributor", cID); err != nil {
		return nil, err
	}
	if trust.Valid {
		t := trust.Float64
		pc.Trust = &t
	}
	pc.Flagged = flagged != 0
	pc.FlaggedAt = fromNullMicros(flaggedAt)
	pc.UpdatedAt = fromMicros(updated)
	return &pc, nil
}

// PoolContributorGet implements store.Store.
func (s *Store) PoolContributorGet(ctx context.Context, poolID, contributorID uuid.UUID) (*crowd.PoolContributor, error) {
	pc, err := scanPoolContributor(s.reader.QueryRowContext(ctx, `SELECT `+poolContributorColumns+`
		FROM docket_pool_contributors WHERE pool_id = ? AND contributor_id = ?`, poolID.String(), contributorID.String()))
	if errors.Is(err, sql.ErrNoRows) {
		return &crowd.PoolContributor{PoolID: poolID, ContributorID: contributorID}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get contributor %s in pool %s: %w", contributorID, poolID, err)
	}
	return pc, nil
}

// PoolContributorPut implements store.Store.
func (s *Store) PoolContributorPut(ctx context.Context, p *store.PoolContributorPutParams) (*crowd.PoolContributor, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var trust, flaggedAt any
	if p.Trust != nil {
		trust = *p.Trust
	}
	if p.Flagged {
		flaggedAt = micros(p.Now)
	}
	var pc *crowd.PoolContributor
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		pc, err = scanPoolContributor(tx.QueryRowContext(ctx, `INSERT INTO docket_pool_contributors (pool_id,
			contributor_id, trust, tests_answered, tests_correct, flagged, flag_reason, flagged_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (pool_id, contributor_id) DO UPDATE SET trust = excluded.trust,
				tests_answered = excluded.tests_answered, tests_correct = excluded.tests_correct,
				flagged = excluded.flagged, flag_reason = excluded.flag_reason,
				flagged_at = CASE WHEN excluded.flagged = 0 THEN NULL
					ELSE coalesce(docket_pool_contributors.flagged_at, excluded.flagged_at) END,
				updated_at = excluded.updated_at
			RETURNING `+poolContributorColumns, p.PoolID.String(), p.ContributorID.String(), trust, p.TestsAnswered,
			p.TestsCorrect, boolInt(p.Flagged), p.FlagReason, flaggedAt, micros(p.Now)))
		return err
	})
	if isForeignKey(err) {
		return nil, fmt.Errorf("put contributor %s in pool %s: %w", p.ContributorID, p.PoolID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("put contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return pc, nil
}
