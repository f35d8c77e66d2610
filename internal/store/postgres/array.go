package postgres

import "github.com/jackc/pgx/v5/pgtype"

// array is a one-dimensional array argument whose elements pgx reads
// through pointers. pgx's support for plain slices hands every element to
// its encoder boxed in an interface: an allocation per element for most
// types (a string, a time.Time, a [16]byte), and a time.Time is boxed once
// more on its way to the timestamptz encoder. A pointer to an element
// needs no allocation, and the element types used here (pgtype.UUID,
// pgtype.Int4, pgtype.Text, pgtype.Timestamptz) go straight to their
// codec's binary encoding. The batch statements of the hot path (finish)
// pass a few thousand elements per array.
type array[T any] []T

// Dimensions implements pgtype.ArrayGetter.
func (a array[T]) Dimensions() []pgtype.ArrayDimension {
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

// Index implements pgtype.ArrayGetter.
func (a array[T]) Index(i int) any { return &a[i] }

// IndexType implements pgtype.ArrayGetter.
func (a array[T]) IndexType() any { return new(T) }

var _ pgtype.ArrayGetter = array[pgtype.Text](nil)
