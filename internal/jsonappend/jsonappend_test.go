package jsonappend

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// UUID writes what uuid.UUID.String writes.
func TestUUID(t *testing.T) {
	for _, id := range []uuid.UUID{uuid.Nil, uuid.MustParse("01234567-89ab-cdef-0f1e-2d3c4b5a6978"), uuid.Must(uuid.NewV7()), uuid.New()} {
		require.Equal(t, id.String(), string(UUID([]byte("x"), id))[1:])
	}
}

// TestMarshal: encoding/json's bytes, but `<`, `>` and `&` kept as they
// are and no trailing newline; an error of the value is returned.
func TestMarshal(t *testing.T) {
	b, err := Marshal(map[string]any{"expr": "a < b && c > d", "n": 1})
	require.NoError(t, err)
	require.Equal(t, `{"expr":"a < b && c > d","n":1}`, string(b))
	_, err = Marshal(func() {})
	require.Error(t, err, "a func has no JSON")
}
