package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAPIErrorMessage(t *testing.T) {
	t.Parallel()
	type fe = struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	}
	for _, tc := range []struct {
		err  apiError
		want string
	}{
		{apiError{Status: 404, Title: "Not found", Detail: "no such job"}, "404 Not found: no such job"},
		{apiError{Status: 503, Title: "Service unavailable"}, "503 Service unavailable"},
		{apiError{Status: 400, Title: "Invalid request", Detail: "the body is invalid", Errors: []fe{{"priority", "must be between 0 and 9"}, {"queue", "is required"}}},
			"400 Invalid request: the body is invalid (priority: must be between 0 and 9; queue: is required)"},
		// A field error the detail already states is not repeated.
		{apiError{Status: 400, Title: "Invalid request", Detail: "priority: must be between 0 and 9", Errors: []fe{{"priority", "must be between 0 and 9"}}},
			"400 Invalid request: priority: must be between 0 and 9"},
	} {
		require.Equal(t, tc.want, tc.err.Error())
	}
}

func TestProblemOfAnswersThatAreNotProblems(t *testing.T) {
	t.Parallel()
	res := &http.Response{StatusCode: http.StatusBadGateway, Header: http.Header{"Retry-After": {"7"}}}
	p := problemOf(res, []byte("<html>"+strings.Repeat("x", 300)+"</html>"))
	require.Equal(t, 502, p.Status)
	require.Equal(t, "Bad Gateway", p.Title)
	require.True(t, strings.HasPrefix(p.Detail, "<html>xxx"))
	require.LessOrEqual(t, len(p.Detail), 204)
	require.Equal(t, 7*time.Second, p.RetryAfter)
	require.True(t, p.temporary())

	p = problemOf(&http.Response{StatusCode: 409, Header: http.Header{}}, []byte(`{"type":"https://docket.dev/problems/lease-lost","title":"Conflict","status":409,"detail":"gone"}`))
	require.Equal(t, "409 Conflict: gone", p.Error())
	require.False(t, p.temporary())
}

func TestReadPayload(t *testing.T) {
	t.Parallel()
	got, err := readPayload(` {"a":1} `, nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1}`, string(got))

	got, err = readPayload("-", strings.NewReader("[1,2]\n"))
	require.NoError(t, err)
	require.Equal(t, "[1,2]", string(got))

	path := filepath.Join(t.TempDir(), "p.json")
	require.NoError(t, os.WriteFile(path, []byte(`"text"`), 0o600))
	got, err = readPayload("@"+path, nil)
	require.NoError(t, err)
	require.Equal(t, `"text"`, string(got))

	_, err = readPayload("{nope", nil)
	require.ErrorContains(t, err, "payload from PAYLOAD is not valid JSON")
	_, err = readPayload("@"+path+".missing", nil)
	require.ErrorContains(t, err, "read payload")
}

func TestAPIFlagsNeedAKeyAndAURL(t *testing.T) {
	t.Setenv("DOCKET_API_KEY", "")
	_, err := (&apiFlags{server: ServerDefault}).client()
	require.ErrorContains(t, err, "no API key")
	_, err = (&apiFlags{server: "127.0.0.1:8080", key: "k"}).client()
	require.ErrorContains(t, err, "--server")
	t.Setenv("DOCKET_API_KEY", "from-env")
	c, err := (&apiFlags{server: "http://h:1/"}).client()
	require.NoError(t, err)
	require.Equal(t, "from-env", c.key)
	require.Equal(t, "http://h:1", c.base)
}
