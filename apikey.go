package docket

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/store"
)

// Role is what an API key may do.
type Role string

// Roles of API keys.
const (
	RoleAdmin    Role = "admin"    // everything
	RoleProducer Role = "producer" // submit, read, cancel and retry jobs
	RoleWorker   Role = "worker"   // the remote-worker lease protocol only
	RoleViewer   Role = "viewer"   // read only
	// RoleContributor keys are bound to one contributor (CreateContributorKey)
	// and reach only the contributor endpoints, for their own work.
	RoleContributor Role = "contributor"
)

// Roles lists every role an operator gives a key (CreateAPIKey); contributor
// keys are made by CreateContributorKey.
var Roles = []Role{RoleAdmin, RoleProducer, RoleWorker, RoleViewer}

// Valid reports whether r is a known role, contributor included.
func (r Role) Valid() bool {
	switch r {
	case RoleAdmin, RoleProducer, RoleWorker, RoleViewer, RoleContributor:
		return true
	}
	return false
}

// ReadsPayloads reports whether keys of role r may read job payloads:
// admin keys only (GET /v1/jobs/{id}?include=payload, the dashboard's job
// page). Whatever reveals a payload's content is refused to the others,
// the search by payload value included (GET /v1/jobs?search=, the
// dashboard's Args filter): its matches would confirm a guessed value.
// Worker keys receive the payloads of the jobs they lease, and nothing
// else.
func (r Role) ReadsPayloads() bool { return r == RoleAdmin }

// APIKey is a key of the HTTP API. Only a hash of its secret is stored; the
// secret is shown once, when the key is created.
type APIKey struct {
	ID   uuid.UUID
	Name string
	Role Role
	// Prefix is the first characters of the secret, to recognise it: 8 of
	// a generated secret ("dk_" and 5 random ones), at most 4 of an
	// imported one (an operator's secret may be a passphrase).
	Prefix string
	// ContributorID is the contributor a key of role contributor is bound
	// to; uuid.Nil for other keys.
	ContributorID uuid.UUID
	// Queues scope a worker key (CreateWorkerKey): the lease protocol
	// gives it only jobs of these queues, and it may renew and end only
	// leases of their jobs. nil for a key of any queue.
	Queues    []string
	CreatedAt time.Time
	RevokedAt time.Time // zero while the key is valid
}

// MayLease reports whether k may lease jobs of queue: any queue when it
// has no Queues, else one of them (names compared exactly).
func (k *APIKey) MayLease(queue string) bool {
	return k.Queues == nil || slices.Contains(k.Queues, queue)
}

// apiKeyAlphabet: secrets are "dk_" and 40 characters of it (≈ 238 bits).
const apiKeyAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func newAPIKeySecret() (string, error) {
	out := make([]byte, 0, 43)
	out = append(out, "dk_"...)
	var b [64]byte
	for len(out) < cap(out) {
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("make api key: %w", err)
		}
		for _, c := range b {
			// Reject bytes past the last whole multiple of the alphabet so
			// every character is equally likely.
			if int(c) < 256-256%len(apiKeyAlphabet) && len(out) < cap(out) {
				out = append(out, apiKeyAlphabet[int(c)%len(apiKeyAlphabet)])
			}
		}
	}
	return string(out), nil
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func apiKeyFrom(k *store.APIKey) *APIKey {
	return &APIKey{ID: k.ID, Name: k.Name, Role: Role(k.Role), Prefix: k.Prefix, ContributorID: k.ContributorID, Queues: k.Queues, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

// CreateAPIKey makes a key with a random secret. The secret is returned
// once and never stored: only its SHA-256 is.
func (c *Client) CreateAPIKey(ctx context.Context, name string, role Role) (string, *APIKey, error) {
	secret, err := newAPIKeySecret()
	if err != nil {
		return "", nil, err
	}
	if role == RoleContributor {
		return "", nil, &ValidationError{Field: "role", Message: "contributor keys are bound to a contributor: make them with CreateContributorKey"}
	}
	k, err := c.insertAPIKey(ctx, name, role, secret, generatedPrefixLen, uuid.Nil)
	return secret, k, err
}

// CreateWorkerKey makes a key of role worker scoped to queues (1 to
// LeaseMaxQueues queue names; a name given twice is kept once): the lease
// protocol gives it only jobs of these queues (a lease request naming no
// queue leases from all of them, one naming another is refused), and it
// may renew, complete, fail or release only leases of their jobs. A
// worker key of any queue is CreateAPIKey's. The secret is returned once.
func (c *Client) CreateWorkerKey(ctx context.Context, name string, queues []string) (string, *APIKey, error) {
	scope, err := keyQueues(queues)
	if err != nil {
		return "", nil, err
	}
	secret, err := newAPIKeySecret()
	if err != nil {
		return "", nil, err
	}
	k, err := c.insertAPIKeyWith(ctx, name, RoleWorker, secret, generatedPrefixLen, uuid.Nil, scope)
	return secret, k, err
}

// keyQueues checks a worker key's queues, each named queues[i], and
// drops repeats.
func keyQueues(queues []string) ([]string, error) {
	switch {
	case len(queues) == 0:
		return nil, &ValidationError{Field: "queues", Message: "needs at least one queue (a worker key of any queue is made by CreateAPIKey)"}
	case len(queues) > LeaseMaxQueues:
		return nil, &ValidationError{Field: "queues", Message: fmt.Sprintf("must name at most %d queues, not %d", LeaseMaxQueues, len(queues))}
	}
	var errs []error
	out := make([]string, 0, len(queues))
	for i, q := range queues {
		if err := validName(fmt.Sprintf("queues[%d]", i), q); err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	if err := joinValidation(errs); err != nil {
		return nil, err
	}
	return out, nil
}

// CreateContributorKey makes a key of role contributor bound to the
// contributor id (ErrNotFound when there is none). The secret is returned
// once.
func (c *Client) CreateContributorKey(ctx context.Context, contributorID uuid.UUID, name string) (string, *APIKey, error) {
	if contributorID == uuid.Nil {
		return "", nil, &ValidationError{Field: "contributorId", Message: "is required"}
	}
	secret, err := newAPIKeySecret()
	if err != nil {
		return "", nil, err
	}
	k, err := c.insertAPIKey(ctx, name, RoleContributor, secret, generatedPrefixLen, contributorID)
	return secret, k, err
}

// How much of a secret is kept as the key's Prefix.
const (
	generatedPrefixLen = 8 // "dk_" and 5 of the random characters
	importedPrefixLen  = 4 // of a secret chosen by an operator
)

// ImportAPIKey records a key with a secret chosen by the operator (such as
// DOCKET_ADMIN_KEY). Importing a secret that exists returns ErrDuplicate.
func (c *Client) ImportAPIKey(ctx context.Context, name string, role Role, secret string) (*APIKey, error) {
	if role == RoleContributor {
		return nil, &ValidationError{Field: "role", Message: "contributor keys are bound to a contributor: make them with CreateContributorKey"}
	}
	return c.insertAPIKey(ctx, name, role, secret, importedPrefixLen, uuid.Nil)
}

// prefixOf is the first n characters of secret (whole UTF-8 sequences).
func prefixOf(secret string, n int) string {
	for i := range secret {
		if n == 0 {
			return secret[:i]
		}
		n--
	}
	return secret
}

// insertAPIKey records a key for secret, keeping its first prefixLen
// characters as the Prefix.
func (c *Client) insertAPIKey(ctx context.Context, name string, role Role, secret string, prefixLen int, contributor uuid.UUID) (*APIKey, error) {
	return c.insertAPIKeyWith(ctx, name, role, secret, prefixLen, contributor, nil)
}

// insertAPIKeyWith is insertAPIKey for a key scoped to queues (nil: any).
func (c *Client) insertAPIKeyWith(ctx context.Context, name string, role Role, secret string, prefixLen int, contributor uuid.UUID, queues []string) (*APIKey, error) {
	if !role.Valid() {
		return nil, &ValidationError{Field: "role", Message: "must be admin, producer, worker or viewer"}
	}
	if name == "" || len(name) > 128 {
		return nil, &ValidationError{Field: "name", Message: "must be 1 to 128 bytes"}
	}
	if len(secret) < 16 {
		return nil, &ValidationError{Field: "secret", Message: "must be at least 16 characters"}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	k, err := c.store.APIKeyInsert(ctx, &store.APIKeyInsertParams{
		ID: id, Name: name, Role: string(role), Prefix: prefixOf(secret, prefixLen),
		SecretHash: hashSecret(secret), ContributorID: contributor, Queues: queues, Now: c.cfg.Now(),
	})
	if err != nil {
		return nil, fieldErrors(err)
	}
	return apiKeyFrom(k), nil
}

// ErrDuplicate: the API key secret exists already.
var ErrDuplicate = store.ErrDuplicate

// APIKeys lists every key, revoked ones too.
func (c *Client) APIKeys(ctx context.Context) ([]*APIKey, error) {
	keys, err := c.store.APIKeyList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*APIKey, len(keys))
	for i, k := range keys {
		out[i] = apiKeyFrom(k)
	}
	return out, nil
}

// RevokeAPIKey revokes a key at once; ErrNotFound when there is none.
func (c *Client) RevokeAPIKey(ctx context.Context, id uuid.UUID) error {
	return c.store.APIKeyRevoke(ctx, &store.APIKeyRevokeParams{ID: id, Now: c.cfg.Now()})
}

// AuthenticateAPIKey returns the valid key with this secret; ErrNotFound
// when there is none (unknown or revoked).
func (c *Client) AuthenticateAPIKey(ctx context.Context, secret string) (*APIKey, error) {
	k, err := c.store.APIKeyGetByHash(ctx, hashSecret(secret))
	if err != nil {
		return nil, err
	}
	return apiKeyFrom(k), nil
}

// AuthenticateAPIKeys is AuthenticateAPIKey for many secrets in one read:
// the valid keys by secret; a secret of none (unknown or revoked) is not
// in the map.
func (c *Client) AuthenticateAPIKeys(ctx context.Context, secrets []string) (map[string]*APIKey, error) {
	bySecret := make(map[string]string, len(secrets))
	hashes := make([]string, 0, len(secrets))
	for _, s := range secrets {
		h := hashSecret(s)
		if _, dup := bySecret[h]; !dup {
			bySecret[h] = s
			hashes = append(hashes, h)
		}
	}
	keys, err := c.store.APIKeysGetByHash(ctx, hashes)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*APIKey, len(keys))
	for h, k := range keys {
		out[bySecret[h]] = apiKeyFrom(k)
	}
	return out, nil
}
