package remote

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestProblemOfAnswersThatAreNotProblems(t *testing.T) {
	t.Parallel()
	res := &http.Response{StatusCode: http.StatusBadGateway, Header: http.Header{"Retry-After": {"7"}}}
	p := problemOf(res, []byte("<html>"+strings.Repeat("x", 300)+"</html>"))
	if p.Status != 502 || p.Title != "Bad Gateway" || !strings.HasPrefix(p.Detail, "<html>xxx") || len(p.Detail) > 204 {
		t.Fatalf("problem %#v", p)
	}
	if p.RetryAfter != 7*time.Second || !p.Temporary() {
		t.Fatalf("Retry-After %v, temporary %v", p.RetryAfter, p.Temporary())
	}
	p = problemOf(&http.Response{StatusCode: 409, Header: http.Header{}}, []byte(`{"type":"https://docket.dev/problems/lease-lost","title":"Conflict","status":409,"detail":"gone"}`))
	if p.Error() != "409 Conflict: gone" || p.Temporary() {
		t.Fatalf("problem %q, temporary %v", p.Error(), p.Temporary())
	}
}
