package webhook

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"https://user:secret@hooks.example.com/in?x=1": "https://user:xxxxx@hooks.example.com/in?x=1",
		"https://user:@hooks.example.com/":             "https://user:xxxxx@hooks.example.com/",
		"https://user@hooks.example.com/":              "https://user@hooks.example.com/",
		"http://127.0.0.1:9/hook":                      "http://127.0.0.1:9/hook",
		"http://u:p%40ss@127.0.0.1/":                   "http://u:xxxxx@127.0.0.1/",
		"http://%zz":                                   "",
	} {
		require.Equal(t, want, RedactURL(raw), raw)
	}
}

// Whatever the URL, what is shown of it carries no password.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{"https://user:secret@h/", "http://u:p%40ss@127.0.0.1:9/x?y#z", "http://[::1]:80/", "http://a:b@c:d@e/", "x:y@z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		shown := RedactURL(raw)
		if shown == "" {
			return
		}
		u, err := url.Parse(shown)
		if err != nil {
			t.Fatalf("%q shown as %q, which does not parse: %v", raw, shown, err)
		}
		if pass, ok := u.User.Password(); ok && pass != "xxxxx" {
			t.Fatalf("%q shown as %q, with the password %q", raw, shown, pass)
		}
	})
}

// syncBuffer is a log destination safe for the service's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A password in a subscription's URL is sent to the receiver but appears
// in no log line and in no breaker change told to OnBreakerChange.
func TestURLPasswordNotLogged(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		const password = "hunter2-pa55w0rd-in-url"
		logs := &syncBuffer{}
		var (
			mu        sync.Mutex
			endpoints []string
		)
		b := setup(t, backend, func(c *Config) {
			c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c.BreakerFailures, c.MaxAttempts = 1, 2
			c.OnBreakerChange = func(endpoint, _, _ string) {
				mu.Lock()
				defer mu.Unlock()
				endpoints = append(endpoints, endpoint)
			}
		})
		rc := newReceiver(t, func(int, *http.Request) int { return http.StatusInternalServerError })
		u, err := url.Parse(rc.srv.URL + "/in")
		require.NoError(t, err)
		u.User = url.UserPassword("hooks", password)
		w := b.subscribe(t, u.String())
		b.start(t)
		b.insertJobs(t, 1)
		b.waitStates(t, w, 1, store.DeliveryDead)

		user, pass, ok := func() (string, string, bool) {
			r, _ := http.NewRequest("GET", "/", nil)
			r.Header = rc.requests()[0].Header
			return r.BasicAuth()
		}()
		require.True(t, ok)
		require.Equal(t, "hooks:"+password, user+":"+pass, "delivered with the password")
		require.NotContains(t, logs.String(), password)
		require.Contains(t, logs.String(), "hooks:xxxxx@", "the endpoint is logged, redacted")
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, endpoints, "the breaker opened")
		for _, e := range endpoints {
			require.False(t, strings.Contains(e, password), e)
			require.Equal(t, strings.Replace(u.String(), password, "xxxxx", 1), e)
		}
	})
}
