package postgres

import (
	"encoding/binary"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

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

// binaryArray is a one-dimensional array argument already written in
// PostgreSQL's binary array format (array_send's: the dimensions, a flag
// saying whether any element is NULL, the element type's OID, then each
// element's length and bytes), which binaryArrayCodec hands to pgx as it
// is. A batch statement's arrays are written by arrayBuf into one buffer,
// sized once: pgx's generic array encoding (array above) plans and calls
// an encoder per element and grows its parameter buffer a quarter at a
// time, which made ~420 bytes of garbage per finished job and 7 % of the
// Go process's CPU in the burn benchmark (docs/benchmarks.md, round nine).
// The server checks the element type against the parameter's.
type binaryArray struct {
	b []byte
	// reserve, when larger than b, is room made in pgx's parameter buffer
	// before b is appended: the first of a statement's arrays reserves
	// what all of them take, so pgx's buffer grows once.
	reserve int
}

// binaryArrayCodec is an array type's codec that also takes a
// *binaryArray in the binary format. Every other value, and every scan,
// goes to the codec it wraps.
type binaryArrayCodec struct{ pgtype.Codec }

// registerBinaryArrays wraps the codecs of the array types arrayBuf writes
// (after registerUUID, whose uuid[] it keeps).
func registerBinaryArrays(m *pgtype.Map) {
	for _, oid := range []uint32{pgtype.UUIDArrayOID, pgtype.Int4ArrayOID, pgtype.TextArrayOID, pgtype.TimestamptzArrayOID} {
		t, ok := m.TypeForOID(oid)
		if !ok {
			continue
		}
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: oid, Codec: binaryArrayCodec{t.Codec}})
	}
}

// PlanEncode implements pgtype.Codec.
func (c binaryArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(*binaryArray); ok {
		if format == pgtype.BinaryFormatCode {
			return encodeBinaryArray{}
		}
		return nil
	}
	if plan := c.Codec.PlanEncode(m, oid, format, value); plan != nil {
		return plan
	}
	if _, ok := value.(string); ok && format == pgtype.BinaryFormatCode {
		// An array literal in binary format: only CopyFrom asks for
		// that (a query sends a string as text). pgx then parses the
		// literal into a pgtype.Array, keeping its dimensions, but only
		// when the type's codec is exactly its *pgtype.ArrayCodec; past
		// this wrapper it would flatten {{a,b},{c,d}} into {a,b,c,d}.
		// So the wrapper does the same for the store's pool
		// (TestBinaryArrayCopyFromLiteral).
		return encodeArrayLiteral{m: m, oid: oid}
	}
	return nil
}

// encodeArrayLiteral encodes an array literal (a string in the text
// format) in the binary format, through a pgtype.Array that keeps its
// dimensions.
type encodeArrayLiteral struct {
	m   *pgtype.Map
	oid uint32
}

func (e encodeArrayLiteral) Encode(value any, buf []byte) ([]byte, error) {
	var arr pgtype.Array[any]
	if err := e.m.Scan(e.oid, pgtype.TextFormatCode, []byte(value.(string)), &arr); err != nil {
		return nil, err
	}
	return e.m.Encode(e.oid, pgtype.BinaryFormatCode, arr, buf)
}

type encodeBinaryArray struct{}

func (encodeBinaryArray) Encode(value any, buf []byte) ([]byte, error) {
	a := value.(*binaryArray)
	return append(slices.Grow(buf, max(a.reserve, len(a.b))), a.b...), nil
}

// arrayBuf writes a statement's one-dimensional array arguments (binaryArray)
// into one buffer, made with the size they take together: begin an array,
// append its elements (exactly the count given to begin), end it.
type arrayBuf struct {
	b     []byte
	start int // where the current array begins
}

// arrayHeaderSize is the bytes a one-dimensional array takes before its
// elements; each element then takes 4 (its length) and its bytes.
const arrayHeaderSize = 20

func newArrayBuf(size int) *arrayBuf { return &arrayBuf{b: make([]byte, 0, size)} }

// begin starts an array of n elements of the type elemOID.
func (w *arrayBuf) begin(elemOID uint32, n int) {
	w.start = len(w.b)
	w.b = binary.BigEndian.AppendUint32(w.b, 1) // dimensions
	w.b = binary.BigEndian.AppendUint32(w.b, 0) // no NULL yet (null sets it)
	w.b = binary.BigEndian.AppendUint32(w.b, elemOID)
	w.b = binary.BigEndian.AppendUint32(w.b, uint32(n))
	w.b = binary.BigEndian.AppendUint32(w.b, 1) // the lower bound
}

// end returns the array begun last.
func (w *arrayBuf) end() *binaryArray { return &binaryArray{b: w.b[w.start:len(w.b):len(w.b)]} }

func (w *arrayBuf) uuid(id uuid.UUID) { w.b = append(appendLen(w.b, 16), id[:]...) }

func (w *arrayBuf) int4(v int32) { w.b = binary.BigEndian.AppendUint32(appendLen(w.b, 4), uint32(v)) }

func (w *arrayBuf) text(s string) { w.b = appendText(w.b, s) }

// bytes appends a text element given as bytes.
func (w *arrayBuf) bytes(v []byte) { w.b = appendField(w.b, v) }

// timestamptz appends t as PostgreSQL stores it (dbTime: microseconds, the
// rest dropped).
func (w *arrayBuf) timestamptz(t time.Time) { w.b = appendTimestamp(w.b, micros(t)) }

// null appends a NULL element and marks the array as holding one.
func (w *arrayBuf) null() {
	w.b = binary.BigEndian.AppendUint32(w.b, math.MaxUint32) // length -1
	binary.BigEndian.PutUint32(w.b[w.start+4:], 1)
}
