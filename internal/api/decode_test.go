package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecodeBodyTrailingData: only whitespace may follow the JSON object,
// including a stray closing delimiter, which json.Decoder.More misses.
func TestDecodeBodyTrailingData(t *testing.T) {
	t.Parallel()
	decode := func(body string) error {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		var into struct {
			JobType string `json:"jobType"`
		}
		return decodeBody(httptest.NewRecorder(), r, 1<<16, false, &into)
	}
	for _, body := range []string{`{"jobType":"x"}`, "{\"jobType\":\"x\"}\n", " {} \r\n\t "} {
		require.NoError(t, decode(body), "%q", body)
	}
	for _, body := range []string{`{"jobType":"x"}}`, `{} ]`, `{}]`, `{} {}`, `{} x`, `{} "s"`, `{} 1`} {
		err := decode(body)
		var p *Problem
		require.True(t, errors.As(err, &p), "%q: %v", body, err)
		require.Equal(t, http.StatusBadRequest, p.Status, "%q", body)
		require.Equal(t, "(body): has data after the JSON object", p.Detail, "%q", body)
		require.Equal(t, "(body)", p.Errors[0].Field, "%q", body)
	}
}

// scanKeys reads the top-level object only: repeated keys there are named
// once each, nested objects are skipped whatever they repeat, and the keys
// come in order, each once, escapes decoded.
func TestScanKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		dups []string
		top  []string
	}{
		{`{}`, nil, nil},
		{` { "a" : 1 , "b":"x}\"y" ,"c":[1,{"a":2,"a":3}],"d":{"e":{"f":1,"f":2}}} `, nil, []string{"a", "b", "c", "d"}},
		{`{"a":1,"b":2,"a":3,"a":4,"b":[]}`, []string{"a", "b"}, []string{"a", "b"}},
		{`{"\u0061":1,"a":2}`, []string{"a"}, []string{"a"}},
		{`{"":1,"":2}`, []string{`""`}, []string{""}},
		{`{"n":-1.5e3,"t":true,"f":false,"z":null,"s":"\\"}`, nil, []string{"n", "t", "f", "z", "s"}},
		{`[{"a":1,"a":2}]`, nil, nil},
		{`"a"`, nil, nil},
	} {
		dups, top := scanKeys([]byte(tc.body))
		var names []string
		for _, d := range dups {
			require.Equal(t, "appears more than once", d.Message)
			names = append(names, d.Field)
		}
		require.Equal(t, tc.dups, names, "%s", tc.body)
		require.Equal(t, tc.top, top, "%s", tc.body)
	}
	// Many keys: the index takes over from the linear search.
	var b strings.Builder
	b.WriteString("{")
	for i := range 3 * scanKeysLinear {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	b.WriteString(`"k3":0,"k40":0}`)
	dups, top := scanKeys([]byte(b.String()))
	require.Len(t, top, 3*scanKeysLinear)
	require.Equal(t, []FieldError{{Field: "k3", Message: "appears more than once"}, {Field: "k40", Message: "appears more than once"}}, dups)
}
