package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/store"
)

const apiKeyColumns = `id, name, role, prefix, contributor_id, queues, created_at, revoked_at`

func scanAPIKey(row scanner) (*store.APIKey, error) {
	var k store.APIKey
	var id string
	var created int64
	var revoked sql.NullInt64
	var contributor, queues sql.NullString
	if err := row.Scan(&id, &k.Name, &k.Role, &k.Prefix, &contributor, &queues, &created, &revoked); err != nil {
		return nil, err
	}
	var err error
	if queues.Valid {
		if err := json.Unmarshal([]byte(queues.String), &k.Queues); err != nil {
			return nil, fmt.Errorf("api key queues %q: %w", queues.String, err)
		}
		if len(k.Queues) == 0 {
			k.Queues = nil
		}
	}
	if k.ID, err = uuid.Parse(id); err != nil {
		return nil, fmt.Errorf("api key id %q: %w", id, err)
	}
	if k.ContributorID, err = parseNullUUID(contributor); err != nil {
		return nil, fmt.Errorf("api key contributor id %q: %w", contributor.String, err)
	}
	k.CreatedAt, k.RevokedAt = fromMicros(created), fromNullMicros(revoked)
	return &k, nil
}

// APIKeyInsert implements store.Store.
func (s *Store) APIKeyInsert(ctx context.Context, p *store.APIKeyInsertParams) (*store.APIKey, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var queues sql.NullString
	if len(p.Queues) > 0 {
		js, err := json.Marshal(p.Queues)
		if err != nil {
			return nil, fmt.Errorf("insert api key: %w", err)
		}
		queues = sql.NullString{String: string(js), Valid: true}
	}
	var k *store.APIKey
	err := s.write(ctx, func(tx *sql.Tx) error {
		if p.ContributorID != uuid.Nil {
			// The column has no foreign key (see 0010_crowd.up.sql).
			if _, err := contributorGet(ctx, tx, p.ContributorID); err != nil {
				return err
			}
		}
		var err error
		k, err = scanAPIKey(tx.QueryRowContext(ctx, `INSERT INTO docket_api_keys (id, name, role, prefix, secret_hash, contributor_id, queues, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+apiKeyColumns,
			p.ID.String(), p.Name, p.Role, p.Prefix, p.SecretHash, nullUUID(p.ContributorID), queues, micros(p.Now)))
		return err
	})
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
		return nil, fmt.Errorf("insert api key: %w", store.ErrDuplicate)
	}
	if err != nil {
		return nil, fmt.Errorf("insert api key: %w", err)
	}
	return k, nil
}

// APIKeyGetByHash implements store.Store.
func (s *Store) APIKeyGetByHash(ctx context.Context, secretHash string) (*store.APIKey, error) {
	k, err := scanAPIKey(s.reader.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM docket_api_keys
		WHERE secret_hash = ? AND revoked_at IS NULL`, secretHash))
	if errors.Is(err, sql.ErrNoRows) {
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
	js, err := json.Marshal(secretHashes)
	if err != nil {
		return nil, fmt.Errorf("find api keys: %w", err)
	}
	type row struct {
		hash string
		key  *store.APIKey
	}
	rows, err := queryAll(ctx, s.reader, func(r scanner) (row, error) {
		var hash string
		k, err := scanAPIKey(hashScanner{r, &hash})
		return row{hash, k}, err
	}, `SELECT secret_hash, `+apiKeyColumns+` FROM docket_api_keys
		WHERE secret_hash IN (SELECT value FROM json_each(?)) AND revoked_at IS NULL`, string(js))
	if err != nil {
		return nil, fmt.Errorf("find api keys: %w", err)
	}
	for _, r := range rows {
		out[r.hash] = r.key
	}
	return out, nil
}

// hashScanner scans a row of a secret hash followed by a key's columns.
type hashScanner struct {
	r    scanner
	hash *string
}

func (h hashScanner) Scan(dest ...any) error { return h.r.Scan(append([]any{h.hash}, dest...)...) }

// APIKeyList implements store.Store.
func (s *Store) APIKeyList(ctx context.Context) ([]*store.APIKey, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+apiKeyColumns+` FROM docket_api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer rows.Close()
	var out []*store.APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// APIKeyRevoke implements store.Store.
func (s *Store) APIKeyRevoke(ctx context.Context, p *store.APIKeyRevokeParams) error {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE docket_api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`,
			micros(p.Now), p.ID.String())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke api key %s: %w", p.ID, err)
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// SecretGetOrCreate implements store.Store: inserted unless stored
// already, and read, in one write transaction.
func (s *Store) SecretGetOrCreate(ctx context.Context, p *store.SecretGetOrCreateParams) ([]byte, error) {
	if len(p.Secret) == 0 {
		return nil, fmt.Errorf("secret %q: no secret to store", p.Name)
	}
	var secret []byte
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO docket_secrets (name, secret, created_at) VALUES (?, ?, ?)`,
			p.Name, p.Secret, micros(p.Now)); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT secret FROM docket_secrets WHERE name = ?`, p.Name).Scan(&secret)
	})
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", p.Name, err)
	}
	return secret, nil
}
