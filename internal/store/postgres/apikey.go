package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/docket-run/docket/internal/store"
)

const apiKeyColumns = `id, name, role, prefix, contributor_id, queues, created_at, revoked_at`

func scanAPIKey(row pgx.Row) (*store.APIKey, error) {
	var k store.APIKey
	var revoked *time.Time
	var contributor *uuid.UUID
	if err := row.Scan(&k.ID, &k.Name, &k.Role, &k.Prefix, &contributor, &k.Queues, &k.CreatedAt, &revoked); err != nil {
		return nil, err
	}
	if len(k.Queues) == 0 {
		k.Queues = nil
	}
	k.ContributorID = uuidOrNil(contributor)
	k.CreatedAt = k.CreatedAt.UTC()
	if revoked != nil {
		k.RevokedAt = revoked.UTC()
	}
	return &k, nil
}

// APIKeyInsert implements store.Store.
func (s *Store) APIKeyInsert(ctx context.Context, p *store.APIKeyInsertParams) (*store.APIKey, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	k, err := scanAPIKey(s.pool.QueryRow(ctx, `INSERT INTO docket_api_keys (id, name, role, prefix, secret_hash, contributor_id, queues, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+apiKeyColumns,
		p.ID, p.Name, p.Role, p.Prefix, p.SecretHash, nullUUID(p.ContributorID), nullQueues(p.Queues), dbTime(p.Now)))
	if isFKViolation(err) {
		return nil, fmt.Errorf("insert api key: contributor %s: %w", p.ContributorID, store.ErrNotFound)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return nil, fmt.Errorf("insert api key: %w", store.ErrDuplicate)
	}
	if err != nil {
		return nil, fmt.Errorf("insert api key: %w", err)
	}
	return k, nil
}

// APIKeyGetByHash implements store.Store.
func (s *Store) APIKeyGetByHash(ctx context.Context, secretHash string) (*store.APIKey, error) {
	k, err := scanAPIKey(s.pool.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM docket_api_keys
		WHERE secret_hash = $1 AND revoked_at IS NULL`, secretHash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("find api key: %w", err)
	}
	return k, nil
}

// APIKeysGetByHash implements store.Store.
func (s *Store) APIKeysGetByHash(ctx context.Context, secretHashes []string) (map[string]*store.APIKey, error) {
	out := make(map[string]*store.APIKey, len(secretHashes))
	if len(secretHashes) == 0 {
		return out, nil
	}
	rs, err := s.pool.Query(ctx, `SELECT secret_hash, `+apiKeyColumns+` FROM docket_api_keys
		WHERE secret_hash = ANY($1::text[]) AND revoked_at IS NULL`, secretHashes)
	if err != nil {
		return nil, fmt.Errorf("find api keys: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var hash string
		k, err := scanAPIKey(hashScanner{rs, &hash})
		if err != nil {
			return nil, fmt.Errorf("find api keys: %w", err)
		}
		out[hash] = k
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("find api keys: %w", err)
	}
	return out, nil
}

// hashScanner scans a row of a secret hash followed by a key's columns.
type hashScanner struct {
	r    pgx.Row
	hash *string
}

func (h hashScanner) Scan(dest ...any) error { return h.r.Scan(append([]any{h.hash}, dest...)...) }

// APIKeyList implements store.Store.
func (s *Store) APIKeyList(ctx context.Context) ([]*store.APIKey, error) {
	rs, err := s.pool.Query(ctx, `SELECT `+apiKeyColumns+` FROM docket_api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer rs.Close()
	var out []*store.APIKey
	for rs.Next() {
		k, err := scanAPIKey(rs)
		if err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// APIKeyRevoke implements store.Store.
func (s *Store) APIKeyRevoke(ctx context.Context, p *store.APIKeyRevokeParams) error {
	tag, err := s.pool.Exec(ctx, `UPDATE docket_api_keys SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1`,
		p.ID, dbTime(p.Now))
	if err != nil {
		return fmt.Errorf("revoke api key %s: %w", p.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

// SecretGetOrCreate implements store.Store: an insert that yields to a
// secret stored already, then a read in a new snapshot, which sees the
// winner's row whoever it was.
func (s *Store) SecretGetOrCreate(ctx context.Context, p *store.SecretGetOrCreateParams) ([]byte, error) {
	if len(p.Secret) == 0 {
		return nil, fmt.Errorf("secret %q: no secret to store", p.Name)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO docket_secrets (name, secret, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO NOTHING`, p.Name, p.Secret, dbTime(p.Now)); err != nil {
		return nil, fmt.Errorf("store secret %q: %w", p.Name, err)
	}
	var secret []byte
	if err := s.pool.QueryRow(ctx, `SELECT secret FROM docket_secrets WHERE name = $1`, p.Name).Scan(&secret); err != nil {
		return nil, fmt.Errorf("read secret %q: %w", p.Name, err)
	}
	return secret, nil
}

// nullQueues is a key's queues as stored: NULL for none (any queue).
func nullQueues(queues []string) []string {
	if len(queues) == 0 {
		return nil
	}
	return queues
}
