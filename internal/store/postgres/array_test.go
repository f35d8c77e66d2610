package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// binaryArrayCases are values for each element type arrayBuf writes:
// NULLs, empty and non-ASCII text, extreme int4s, and times before 1970
// and 2000, with sub-microsecond parts, in other zones.
var binaryArrayCases = struct {
	ids   []uuid.UUID
	ints  []int32
	texts []*string
	times []time.Time
}{
	ids:   []uuid.UUID{uuid.New(), {}, uuid.MustParse("ffffffff-ffff-ffff-ffff-ffffffffffff")},
	ints:  []int32{0, 1, -1, 1 << 30, -1 << 31, 1<<31 - 1},
	texts: []*string{ptr("SUCCESS"), ptr(""), nil, ptr("tÿpe-型 \n\"x\""), nil},
	times: []time.Time{
		time.Date(1960, 3, 4, 5, 6, 7, 123456789, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("x", -7*3600)),
		time.Date(2026, 11, 27, 8, 0, 0, 1500, time.Local),
		time.Date(2300, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Unix(0, -1),
	},
}

func ptr(s string) *string { return &s }

// TestBinaryArrayAsPgx: arrayBuf writes each array byte for byte as pgx's
// own binary encoding of the same values (array of pgtype values, which
// the finishing statement passed before), NULLs and all, and an empty
// array's elements as nothing.
func TestBinaryArrayAsPgx(t *testing.T) {
	c := binaryArrayCases
	m := pgtype.NewMap()
	registerUUID(m)
	pgx := func(oid uint32, v any) []byte {
		b, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil)
		require.NoError(t, err)
		return b
	}
	for _, n := range []int{0, 1, len(c.texts)} {
		var (
			w     = newArrayBuf(0)
			ids   = make(array[pgtype.UUID], min(n, len(c.ids)))
			ints  = make(array[pgtype.Int4], min(n, len(c.ints)))
			texts = make(array[pgtype.Text], min(n, len(c.texts)))
			times = make(array[pgtype.Timestamptz], min(n, len(c.times)))
		)
		w.begin(pgtype.UUIDOID, len(ids))
		for i := range ids {
			ids[i] = pgtype.UUID{Bytes: c.ids[i], Valid: true}
			w.uuid(c.ids[i])
		}
		require.Equal(t, pgx(pgtype.UUIDArrayOID, ids), w.end().b, "uuid, %d", n)
		w.begin(pgtype.Int4OID, len(ints))
		for i := range ints {
			ints[i] = pgtype.Int4{Int32: c.ints[i], Valid: true}
			w.int4(c.ints[i])
		}
		require.Equal(t, pgx(pgtype.Int4ArrayOID, ints), w.end().b, "int4, %d", n)
		for _, asBytes := range []bool{false, true} {
			w.begin(pgtype.TextOID, len(texts))
			for i := range texts {
				switch s := c.texts[i]; {
				case s == nil:
					texts[i] = pgtype.Text{}
					w.null()
				case asBytes:
					texts[i] = pgtype.Text{String: *s, Valid: true}
					w.bytes([]byte(*s))
				default:
					texts[i] = pgtype.Text{String: *s, Valid: true}
					w.text(*s)
				}
			}
			require.Equal(t, pgx(pgtype.TextArrayOID, texts), w.end().b, "text, %d", n)
		}
		w.begin(pgtype.TimestamptzOID, len(times))
		for i := range times {
			times[i] = pgtype.Timestamptz{Time: dbTime(c.times[i]), Valid: true}
			w.timestamptz(c.times[i])
		}
		require.Equal(t, pgx(pgtype.TimestamptzArrayOID, times), w.end().b, "timestamptz, %d", n)
	}
}

// TestBinaryArrayRoundTrip: the arrays arrayBuf writes, passed as
// arguments through the store's connections, read back as the values
// written (the server accepts them as their parameters' types), and the
// array types still take and give other values through the codecs
// binaryArrayCodec wraps.
func TestBinaryArrayRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := binaryArrayCases
	w := newArrayBuf(0)
	w.begin(pgtype.UUIDOID, len(c.ids))
	for _, id := range c.ids {
		w.uuid(id)
	}
	ids := w.end()
	w.begin(pgtype.Int4OID, len(c.ints))
	for _, v := range c.ints {
		w.int4(v)
	}
	ints := w.end()
	w.begin(pgtype.TextOID, len(c.texts))
	for _, s := range c.texts {
		if s == nil {
			w.null()
		} else {
			w.text(*s)
		}
	}
	texts := w.end()
	w.begin(pgtype.TimestamptzOID, len(c.times))
	for _, tm := range c.times {
		w.timestamptz(tm)
	}
	times := w.end()
	ids.reserve = len(w.b)
	var (
		gotIDs   []uuid.UUID
		gotInts  []int32
		gotTexts []*string
		gotTimes []time.Time
	)
	require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT $1::uuid[], $2::integer[], $3::text[], $4::timestamptz[]`,
		ids, ints, texts, times).Scan(&gotIDs, &gotInts, &gotTexts, &gotTimes))
	require.Equal(t, c.ids, gotIDs)
	require.Equal(t, c.ints, gotInts)
	require.Equal(t, c.texts, gotTexts)
	require.Len(t, gotTimes, len(c.times))
	for i, tm := range c.times {
		require.True(t, dbTime(tm).Equal(gotTimes[i]), "time %d: %v, got %v", i, tm, gotTimes[i])
	}

	// An array of the wrong type is refused by the server, not misread.
	err := b.s.Pool().QueryRow(b.ctx, `SELECT $1::text[]`, ints).Scan(&gotTexts)
	require.ErrorContains(t, err, "42804") // datatype_mismatch: "binary data has array element type …"

	// Plain values still go through pgx's codecs, both ways.
	var back []string
	require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT $1::text[]`, []string{"a", "é"}).Scan(&back))
	require.Equal(t, []string{"a", "é"}, back)
	require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT $1::uuid[]`, c.ids).Scan(&gotIDs))
	require.Equal(t, c.ids, gotIDs)
}

// TestBinaryArrayCopyFromLiteral: a caller of Store.Pool() copying array
// literals (strings) into its own table gets what a plain pgx connection
// gives, dimensions kept, although the store's connections wrap the array
// codecs (binaryArrayCodec). Without encodeArrayLiteral the 2×2 array is
// stored flattened, [1:4].
func TestBinaryArrayCopyFromLiteral(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.s.Pool().Exec(ctx, `CREATE TABLE copy_literal (n int, a text[], u uuid[], i int4[], ts timestamptz[])`)
	require.NoError(t, err)
	plain, err := pgx.Connect(ctx, b.url)
	require.NoError(t, err)
	defer plain.Close(ctx)
	row := func(n int) []any {
		return []any{n, "{{a,b},{c,NULL}}", "{00000000-0000-0000-0000-000000000001,NULL}", "{{1},{2}}", `{"2026-01-01 00:00:00+00"}`}
	}
	cols := []string{"n", "a", "u", "i", "ts"}
	_, err = plain.CopyFrom(ctx, pgx.Identifier{"copy_literal"}, cols, pgx.CopyFromRows([][]any{row(1)}))
	require.NoError(t, err)
	_, err = b.s.Pool().CopyFrom(ctx, pgx.Identifier{"copy_literal"}, cols, pgx.CopyFromRows([][]any{row(2)}))
	require.NoError(t, err)
	var got [2]string
	for i := range got {
		require.NoError(t, b.s.Pool().QueryRow(ctx,
			`SELECT array_dims(a) || a::text || array_dims(u) || u::text || array_dims(i) || i::text || ts::text FROM copy_literal WHERE n = $1`, i+1).Scan(&got[i]))
	}
	require.Equal(t, `[1:2][1:2]{{a,b},{c,NULL}}[1:2]{00000000-0000-0000-0000-000000000001,NULL}[1:2][1:1]{{1},{2}}{"2026-01-01 00:00:00+00"}`, got[0])
	require.Equal(t, got[0], got[1], "the store's pool stores what a plain connection stores")
}
