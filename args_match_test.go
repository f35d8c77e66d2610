package docket_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestListArgs: List with an ArgsMatch finds jobs by a payload value, the
// string and the number alike, on both backends; a bad match names its
// field and lists nothing.
func TestListArgs(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			var ids []string
			for _, p := range []string{`{"user": {"id": 42}}`, `{"user": {"id": "42"}}`, `{"user": {"id": 7}}`, `{"user": {"id": true}}`} {
				res, err := c.Insert(ctx, docket.RawArgs{Type: "t", Payload: json.RawMessage(p)}, nil)
				require.NoError(t, err)
				ids = append(ids, res.Job.ID.String())
			}
			list := func(m *docket.ArgsMatch) []string {
				rows, err := c.List(ctx, docket.ListParams{Args: m})
				require.NoError(t, err)
				var out []string
				for _, r := range rows {
					out = append(out, r.ID.String())
				}
				return out
			}
			require.Equal(t, []string{ids[1], ids[0]}, list(&docket.ArgsMatch{Path: []string{"user", "id"}, Value: "42"}))
			require.Equal(t, []string{ids[1]}, list(&docket.ArgsMatch{Path: []string{"user", "id"}, Value: "42", StringOnly: true}))
			require.Equal(t, []string{ids[3]}, list(&docket.ArgsMatch{Path: []string{"user", "id"}, Value: "true"}))
			require.Equal(t, []string{ids[3]}, list(&docket.ArgsMatch{Path: []string{"user", "id"}, Value: "true", Within: 1}))
			require.Empty(t, list(&docket.ArgsMatch{Path: []string{"user", "id"}, Value: "42", Within: 2}), "the two newest do not hold 42")

			_, err = c.List(ctx, docket.ListParams{Args: &docket.ArgsMatch{Path: []string{`a"b`}, Value: "x", Within: -1}})
			var verr *docket.ValidationError
			require.ErrorAs(t, err, &verr)
			require.Contains(t, err.Error(), "args.path")
			require.Contains(t, err.Error(), "args.within")
		})
	}
}

func TestArgsMatchValidate(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 65)
	for _, tc := range []struct {
		m     docket.ArgsMatch
		field string // "" = valid
	}{
		{docket.ArgsMatch{Path: []string{"a"}}, ""},
		{docket.ArgsMatch{Path: []string{"a_b-C9", "x"}, Within: docket.ArgsWithinMax}, ""},
		{docket.ArgsMatch{}, "args.path"},
		{docket.ArgsMatch{Path: make([]string, docket.ArgsPathMax+1)}, "args.path"},
		{docket.ArgsMatch{Path: []string{""}}, "args.path"},
		{docket.ArgsMatch{Path: []string{long}}, "args.path"},
		{docket.ArgsMatch{Path: []string{"a.b"}}, "args.path"},
		{docket.ArgsMatch{Path: []string{"é"}}, "args.path"},
		{docket.ArgsMatch{Path: []string{"a"}, Within: docket.ArgsWithinMax + 1}, "args.within"},
	} {
		err := tc.m.Validate()
		if tc.field == "" {
			require.NoError(t, err, "%+v", tc.m)
			continue
		}
		var verr *docket.ValidationError
		require.True(t, errors.As(err, &verr), "%+v: %v", tc.m, err)
		require.Equal(t, tc.field, verr.Field)
	}
}

// TestListArgsOutOfRange: a search by a value the database cannot take
// as given is never an error of the database: a number beyond what a
// PostgreSQL numeric holds (so no payload holds it) finds nothing, and a
// value that is not UTF-8 text or holds NUL (no payload can) is a
// *ValidationError naming args.value, on both backends alike.
func TestListArgsOutOfRange(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			_, err = c.Insert(ctx, docket.RawArgs{Type: "t", Payload: json.RawMessage(`{"n": 1e300, "s": "x"}`)}, nil)
			require.NoError(t, err)
			for _, v := range []string{"1e200000", "-1e200000", "1e-20000", "0." + strings.Repeat("1", 20000), strings.Repeat("9", 140000)} {
				rows, err := c.List(ctx, docket.ListParams{Args: &docket.ArgsMatch{Path: []string{"n"}, Value: v}})
				short := v[:min(len(v), 12)]
				require.NoError(t, err, short)
				require.Empty(t, rows, short)
			}
			rows, err := c.List(ctx, docket.ListParams{Args: &docket.ArgsMatch{Path: []string{"n"}, Value: "1e300"}})
			require.NoError(t, err)
			require.Len(t, rows, 1, "a number in range still matches")
			for _, v := range []string{"a\x00b", "\xff", "x\xc3"} {
				_, err := c.List(ctx, docket.ListParams{Args: &docket.ArgsMatch{Path: []string{"s"}, Value: v}})
				var verr *docket.ValidationError
				require.ErrorAs(t, err, &verr, "%q", v)
				require.Equal(t, "args.value", verr.Field, "%q", v)
			}
		})
	}
}

// FuzzParseArgsSearch: any text gives a valid ArgsMatch or an error — never
// a panic — and what parses says the same thing written back.
func FuzzParseArgsSearch(f *testing.F) {
	for _, seed := range []string{"args.user.id:42", `args.user.id:"42"`, "args.a:", "args.a:b:c d", "args.:x", "args.a..b:1",
		"user.id:1", "args.a", `args.a:"x`, `args.a:"\u00e9"`, "args.a-b_C.9:true", "args." + strings.Repeat("k.", 9) + "k:1", "args.a:\x00"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := docket.ParseArgsSearch(s)
		if err != nil {
			if m != nil || err.Error() == "" {
				t.Fatalf("%q: %v, %+v", s, err, m)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("%q parsed to an invalid match %+v: %v", s, m, err)
		}
		if m.Within != docket.ArgsWithinDefault {
			t.Fatalf("within %d", m.Within)
		}
		value := m.Value
		if m.StringOnly {
			b, _ := json.Marshal(m.Value)
			value = string(b)
		}
		again, err := docket.ParseArgsSearch(docket.ArgsSearchPrefix + strings.Join(m.Path, ".") + ":" + value)
		if err != nil || again.Value != m.Value || again.StringOnly != m.StringOnly || strings.Join(again.Path, ".") != strings.Join(m.Path, ".") {
			t.Fatalf("%q: %+v written back parses to %+v, %v", s, m, again, err)
		}
	})
}
