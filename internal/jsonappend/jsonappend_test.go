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
