package docket

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// newJobIDs makes valid UUIDv7s whose time is the clock's (or just after
// the last id given), strictly increasing within a batch, across batches
// and across goroutines, each with its own random bits.
func TestNewJobIDs(t *testing.T) {
	before := time.Now()
	var all []uuid.UUID
	for _, n := range []int{1, 5000, 3, 5000} {
		ids := make([]uuid.UUID, n)
		require.NoError(t, newJobIDs(ids))
		all = append(all, ids...)
	}
	after := time.Now()
	seen := map[uuid.UUID]bool{}
	random := map[[8]byte]bool{}
	for i, id := range all {
		require.Equal(t, uuid.Version(7), id.Version(), "id %d", i)
		require.Equal(t, uuid.RFC4122, id.Variant(), "id %d", i)
		sec, nsec := id.Time().UnixTime()
		at := time.Unix(sec, nsec)
		// ms precision; a batch of n runs up to n × 256 ns ahead.
		require.False(t, at.Before(before.Truncate(time.Millisecond)), "id %d at %v, before %v", i, at, before)
		require.False(t, at.After(after.Add(3*time.Millisecond)), "id %d at %v, after %v", i, at, after)
		if i > 0 {
			require.Equal(t, 1, bytes.Compare(id[:], all[i-1][:]), "id %d is not after id %d", i, i-1)
		}
		require.False(t, seen[id])
		seen[id] = true
		var r [8]byte
		copy(r[:], id[8:])
		r[0] &= 0x3f
		require.False(t, random[r], "id %d repeats random bits", i)
		random[r] = true
	}

	// Concurrent batches never share an id, and each is increasing.
	var wg sync.WaitGroup
	batches := make([][]uuid.UUID, 8)
	for g := range batches {
		wg.Go(func() {
			batches[g] = make([]uuid.UUID, 1000)
			if err := newJobIDs(batches[g]); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	clear(seen)
	for _, b := range batches {
		for i, id := range b {
			require.False(t, seen[id])
			seen[id] = true
			if i > 0 {
				require.Equal(t, 1, bytes.Compare(id[:], b[i-1][:]))
			}
		}
	}
}

// newJobIDs' ids interleave with uuid.NewV7's by time: they share its
// layout (the 12 bits after the milliseconds count 256 ns steps).
func TestNewJobIDsLayoutAsNewV7(t *testing.T) {
	a, err := uuid.NewV7()
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond)
	ids := make([]uuid.UUID, 1)
	require.NoError(t, newJobIDs(ids))
	time.Sleep(2 * time.Millisecond)
	b, err := uuid.NewV7()
	require.NoError(t, err)
	require.Equal(t, 1, bytes.Compare(ids[0][:], a[:]))
	require.Equal(t, 1, bytes.Compare(b[:], ids[0][:]))
	// The time read back through uuid's own layout lies between the two
	// NewV7 readings (not a bound on how long the sleeps took: on a busy
	// machine a 2 ms sleep took 16).
	require.LessOrEqual(t, a.Time(), ids[0].Time())
	require.LessOrEqual(t, ids[0].Time(), b.Time())
}

// BenchmarkJobIDs: a batch of 5,000 ids from newJobIDs, against
// uuid.NewV7 for each (per id: ns/op ÷ 5,000).
func BenchmarkJobIDs(b *testing.B) {
	ids := make([]uuid.UUID, 5000)
	b.Run("newJobIDs", func(b *testing.B) {
		for b.Loop() {
			if err := newJobIDs(ids); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("NewV7", func(b *testing.B) {
		for b.Loop() {
			for i := range ids {
				ids[i] = uuid.Must(uuid.NewV7())
			}
		}
	})
}
