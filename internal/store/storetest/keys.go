package storetest

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

func testAPIKey(t *testing.T, open opener) {
	ctx := context.Background()
	insert := func(t *testing.T, st store.Store, name, hash string) *store.APIKey {
		t.Helper()
		k, err := st.APIKeyInsert(ctx, &store.APIKeyInsertParams{
			ID: uuid.Must(uuid.NewV7()), Name: name, Role: "producer", Prefix: "dk_abc", SecretHash: hash, Now: at(0),
		})
		require.NoError(t, err)
		return k
	}

	t.Run("InsertGetListRevoke", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		k := insert(t, st, "ci", "hash-1")
		require.Equal(t, "ci", k.Name)
		require.Equal(t, "producer", k.Role)
		require.Equal(t, "dk_abc", k.Prefix)
		require.WithinDuration(t, at(0), k.CreatedAt, timeTolerance)
		require.True(t, k.RevokedAt.IsZero())

		got, err := st.APIKeyGetByHash(ctx, "hash-1")
		require.NoError(t, err)
		require.Equal(t, k.ID, got.ID)
		_, err = st.APIKeyGetByHash(ctx, "hash-2")
		require.ErrorIs(t, err, store.ErrNotFound)

		k2 := insert(t, st, "ops", "hash-2")
		list, err := st.APIKeyList(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, k.ID, list[0].ID)
		require.Equal(t, k2.ID, list[1].ID)

		require.NoError(t, st.APIKeyRevoke(ctx, &store.APIKeyRevokeParams{ID: k.ID, Now: at(1e9)}))
		require.NoError(t, st.APIKeyRevoke(ctx, &store.APIKeyRevokeParams{ID: k.ID, Now: at(2e9)}), "revoking twice is fine")
		_, err = st.APIKeyGetByHash(ctx, "hash-1")
		require.ErrorIs(t, err, store.ErrNotFound, "a revoked key does not authenticate")
		list, err = st.APIKeyList(ctx)
		require.NoError(t, err)
		require.WithinDuration(t, at(1e9), list[0].RevokedAt, timeTolerance, "the first revocation time is kept")
		require.True(t, list[1].RevokedAt.IsZero())

		err = st.APIKeyRevoke(ctx, &store.APIKeyRevokeParams{ID: uuid.Must(uuid.NewV7()), Now: at(0)})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("Queues", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		scoped, err := st.APIKeyInsert(ctx, &store.APIKeyInsertParams{
			ID: uuid.Must(uuid.NewV7()), Name: "w", Role: "worker", Prefix: "dk_abc", SecretHash: "q-1",
			Queues: []string{"images", "mail.é", "a,b"}, Now: at(0),
		})
		require.NoError(t, err)
		require.Equal(t, []string{"images", "mail.é", "a,b"}, scoped.Queues, "kept as given, in order")
		empty, err := st.APIKeyInsert(ctx, &store.APIKeyInsertParams{
			ID: uuid.Must(uuid.NewV7()), Name: "e", Role: "worker", Prefix: "dk_abc", SecretHash: "q-2", Queues: []string{}, Now: at(0),
		})
		require.NoError(t, err)
		require.Nil(t, empty.Queues, "an empty list is any queue")
		any := insert(t, st, "any", "q-3")
		require.Nil(t, any.Queues)

		one, err := st.APIKeyGetByHash(ctx, "q-1")
		require.NoError(t, err)
		require.Equal(t, scoped, one)
		many, err := st.APIKeysGetByHash(ctx, []string{"q-1", "q-2", "q-3"})
		require.NoError(t, err)
		require.Equal(t, scoped, many["q-1"])
		require.Nil(t, many["q-2"].Queues)
		require.Nil(t, many["q-3"].Queues)
		list, err := st.APIKeyList(ctx)
		require.NoError(t, err)
		require.Len(t, list, 3)
		require.Equal(t, scoped.Queues, list[0].Queues)

		_, err = st.APIKeyInsert(ctx, &store.APIKeyInsertParams{
			ID: uuid.Must(uuid.NewV7()), Name: "bad", Role: "worker", Prefix: "dk_abc", SecretHash: "q-4",
			Queues: []string{"ok", "nul\x00"}, Now: at(0),
		})
		require.Error(t, err, "a queue that is not text is refused")
		require.Contains(t, err.Error(), "queues[1]")
	})

	t.Run("GetManyByHash", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		k1 := insert(t, st, "a", "many-1")
		k2 := insert(t, st, "b", "many-2")
		k3 := insert(t, st, "c", "many-3")
		require.NoError(t, st.APIKeyRevoke(ctx, &store.APIKeyRevokeParams{ID: k3.ID, Now: at(1e9)}))
		got, err := st.APIKeysGetByHash(ctx, []string{"many-2", "many-1", "many-3", "none", "many-1"})
		require.NoError(t, err)
		require.Len(t, got, 2, "neither the revoked key nor an unknown hash")
		require.Equal(t, k1, got["many-1"])
		require.Equal(t, k2, got["many-2"])
		one, err := st.APIKeyGetByHash(ctx, "many-2")
		require.NoError(t, err)
		require.Equal(t, one, got["many-2"], "as one key's read finds it")
		got, err = st.APIKeysGetByHash(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("DuplicateSecret", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		insert(t, st, "a", "same")
		_, err := st.APIKeyInsert(ctx, &store.APIKeyInsertParams{
			ID: uuid.Must(uuid.NewV7()), Name: "b", Role: "admin", Prefix: "x", SecretHash: "same", Now: at(0),
		})
		require.ErrorIs(t, err, store.ErrDuplicate)
		list, err := st.APIKeyList(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
	})

	t.Run("ConcurrentSameSecret", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		var wg sync.WaitGroup
		errs := make([]error, 20)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = st.APIKeyInsert(ctx, &store.APIKeyInsertParams{
					ID: uuid.Must(uuid.NewV7()), Name: "boot", Role: "admin", Prefix: "x", SecretHash: "boot", Now: at(0),
				})
			}()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else {
				require.ErrorIs(t, err, store.ErrDuplicate)
			}
		}
		require.Equal(t, 1, ok)
	})
}

// testSecret: the first secret stored under a name is the one every later
// call reads, whoever stored it, even when many race to store theirs.
func testSecret(t *testing.T, open opener) {
	ctx := context.Background()
	t.Run("FirstWins", func(t *testing.T) {
		t.Parallel()
		st := open(t)
		const racers = 8
		got := make([][]byte, racers)
		var wg sync.WaitGroup
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := st.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: "lease", Secret: []byte{byte(i + 1), 0xff}, Now: at(0)})
				assert.NoError(t, err)
				got[i] = s
			}()
		}
		wg.Wait()
		require.Len(t, got[0], 2)
		for i := range racers {
			require.Equal(t, got[0], got[i], "racer %d read another secret", i)
		}
		again, err := st.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: "lease", Secret: []byte("other"), Now: at(1e9)})
		require.NoError(t, err)
		require.Equal(t, got[0], again, "a secret stored is kept")
		other, err := st.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: "other", Secret: []byte{0, 1, 2}, Now: at(0)})
		require.NoError(t, err)
		require.Equal(t, []byte{0, 1, 2}, other, "each name has its own secret, bytes kept as stored (a NUL too)")
		_, err = st.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{Name: "none", Now: at(0)})
		require.Error(t, err, "no secret to store")
	})
}
