package api

import (
	"errors"
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
		require.Equal(t, "the body has data after the JSON object", p.Detail, "%q", body)
	}
}
