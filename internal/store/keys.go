package store

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// KeyStore is the keys domain: the API keys of the HTTP API. Only a hash
// of each secret is stored.
type KeyStore interface {
	// APIKeyInsert records a key; a secret hash that exists already is an
	// error (ErrDuplicate).
	APIKeyInsert(ctx context.Context, p *APIKeyInsertParams) (*APIKey, error)
	// APIKeyGetByHash finds a key that is not revoked; ErrNotFound otherwise.
	APIKeyGetByHash(ctx context.Context, secretHash string) (*APIKey, error)
	// APIKeysGetByHash finds, in one read, the keys that are not revoked
	// among those of secretHashes, by hash; a hash of no such key is not
	// in the map.
	APIKeysGetByHash(ctx context.Context, secretHashes []string) (map[string]*APIKey, error)
	// APIKeyList lists every key, revoked ones too, oldest first.
	APIKeyList(ctx context.Context) ([]*APIKey, error)
	// APIKeyRevoke revokes a key (revoking twice is fine); ErrNotFound when
	// there is no such key.
	APIKeyRevoke(ctx context.Context, p *APIKeyRevokeParams) error

	// SecretGetOrCreate returns the secret stored under p.Name; when there
	// is none it stores p.Secret first. The first process to store one
	// wins: every process of the installation reads the same secret.
	SecretGetOrCreate(ctx context.Context, p *SecretGetOrCreateParams) ([]byte, error)
}

// SecretGetOrCreateParams name a shared secret and the one to store when
// there is none yet.
type SecretGetOrCreateParams struct {
	Name   string
	Secret []byte // at least one byte
	Now    time.Time
}

// APIKey is one key of the HTTP API.
type APIKey struct {
	ID     uuid.UUID
	Name   string
	Role   string
	Prefix string // first characters of the secret, for people to recognise it
	// ContributorID is the contributor a key of role contributor is bound
	// to; uuid.Nil for other keys.
	ContributorID uuid.UUID
	// Queues are the queues the key may lease from, in the order given;
	// nil for a key of any queue.
	Queues    []string
	CreatedAt time.Time
	RevokedAt time.Time // zero while valid
}

// APIKeyInsertParams records a new key.
type APIKeyInsertParams struct {
	ID         uuid.UUID
	Name       string
	Role       string
	Prefix     string
	SecretHash string // hex SHA-256 of the secret; unique
	// ContributorID binds the key to a contributor, who must exist;
	// uuid.Nil for none.
	ContributorID uuid.UUID
	// Queues scope the key to these queues; nil for any queue (an empty
	// list is stored as nil).
	Queues []string
	Now    time.Time
}

// Validate refuses a name that is not text (checkText).
func (p *APIKeyInsertParams) Validate() error {
	pr := problemsOf("insert API key")
	checkText(pr, "name", p.Name)
	checkTexts(pr, "queues", p.Queues)
	return pr.Err()
}

// APIKeyRevokeParams revokes a key.
type APIKeyRevokeParams struct {
	ID  uuid.UUID
	Now time.Time
}
