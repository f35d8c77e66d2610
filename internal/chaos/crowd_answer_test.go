package chaos

import (
	"context"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCrowdAnswers: a simulated contributor takes an answer that only a
// resend explains — a release refused 409 (the first send released it),
// a judgment answered 200 (the first send stored it) — as such only when
// a send was cut before it; on a first send the same answer is a surprise
// (a release or a judgment went missing), not something to count.
func TestCrowdAnswers(t *testing.T) {
	t.Parallel()
	const judgment = `{"judgmentId": "01a21456-2c90-739f-b152-b24855f5f19d"}`
	for _, c := range []struct {
		name      string
		x         int // the draw: 9 releases, 40 judges once
		answers   []int
		surprised bool
	}{
		{"release 409 on the first send", 9, []int{http.StatusConflict}, true},
		{"release 409 after a cut", 9, []int{http.StatusServiceUnavailable, http.StatusConflict}, false},
		{"release 200", 9, []int{http.StatusOK}, false},
		{"judgment 200 on the first send", 40, []int{http.StatusOK}, true},
		{"judgment 200 after a cut", 40, []int{http.StatusServiceUnavailable, http.StatusOK}, false},
		{"judgment 202", 40, []int{http.StatusAccepted}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var sent atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				i := int(sent.Add(1)) - 1
				status := c.answers[min(i, len(c.answers)-1)]
				if strings.HasSuffix(r.URL.Path, "/judgments") {
					w.WriteHeader(status)
					_, _ = w.Write([]byte(judgment))
					return
				}
				w.WriteHeader(status)
				_, _ = w.Write([]byte(`{}`))
			}))
			t.Cleanup(srv.Close)
			sim := &crowdSim{r: &run{urls: []string{srv.URL}, http: srv.Client()},
				inflight: make([]atomic.Int32, 1), judging: make(chan int), until: time.Now().Add(time.Hour)}
			server := 0
			sim.act(context.Background(), mrand.New(mrand.NewPCG(1, 2)), c.x, "secret", &server,
				"01a21456-2c90-739f-b152-b24855f5f19e", time.Now().Add(30*time.Second), "a", func() {})
			rep, surprises := sim.report()
			if c.surprised {
				require.Len(t, surprises, 1, "%+v", rep)
				return
			}
			require.Empty(t, surprises)
			require.Equal(t, 1, rep.Releases+rep.Judgments, "%+v", rep)
		})
	}
}
