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
		"https://user:secret@hooks.example.com/in?x=1":           "https://user:xxxxx@hooks.example.com/in?x=xxxxx",
		"https://user:@hooks.example.com/":                       "https://user:xxxxx@hooks.example.com/",
		"https://user@hooks.example.com/":                        "https://xxxxx@hooks.example.com/",
		"https://@hooks.example.com/":                            "https://@hooks.example.com/",
		"http://127.0.0.1:9/hook":                                "http://127.0.0.1:9/hook",
		"http://u:p%40ss@127.0.0.1/":                             "http://u:xxxxx@127.0.0.1/",
		"https://h/in?token=abc&key=k%20ey&sig=s&access_token=t": "https://h/in?token=xxxxx&key=xxxxx&sig=xxxxx&access_token=xxxxx",
		"https://h/in?channel=alerts&empty=&&bare-token-123":     "https://h/in?channel=xxxxx&empty=&&xxxxx",
		"https://h/in?a=1;token=secret":                          "https://h/in?a=xxxxx",
		"https://h/in?":                                          "https://h/in?",
		"https://h/in#sig=secret":                                "https://h/in#xxxxx",
		"https://TOKEN@h:8443/p/a/t/h?x=y=z":                     "https://xxxxx@h:8443/p/a/t/h?x=xxxxx",
		"http://%zz":                                             "",
	} {
		require.Equal(t, want, RedactURL(raw), raw)
	}
}

// TestRedactText: every URL in a stored lastError is shown as RedactURL
// shows it (net/http's *** password too), one already shown so is
// unchanged, the rest of the text kept; an error naming no URL is
// returned as it is.
func TestRedactText(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		`Post "http://127.0.0.1:9/in?token=abc": dial tcp 127.0.0.1:9: connect: connection refused`: `Post "http://127.0.0.1:9/in?token=xxxxx": dial tcp 127.0.0.1:9: connect: connection refused`,
		`Post "https://hooks:***@h/in?sig=s&x": EOF`:                                                `Post "https://hooks:xxxxx@h/in?sig=xxxxx&xxxxx": EOF`,
		`Post "https://TOKEN@h/in": context deadline exceeded`:                                      `Post "https://xxxxx@h/in": context deadline exceeded`,
		`Post "https://hooks:xxxxx@h/in?sig=xxxxx&xxxxx": EOF`:                                      `Post "https://hooks:xxxxx@h/in?sig=xxxxx&xxxxx": EOF`,
		`HTTP 502 Bad Gateway: see https://status.example.com/?id=7 and http://a/b#frag`:            `HTTP 502 Bad Gateway: see https://status.example.com/?id=xxxxx and http://a/b#xxxxx`,
		`Post "http://%zz/in?token=abc": invalid URL escape "%zz"`:                                  `Post "xxxxx": invalid URL escape "%zz"`,
		"HTTP 500 Internal Server Error: boom":                                                      "HTTP 500 Internal Server Error: boom",
		"":                                                                                          "",
	} {
		require.Equal(t, want, RedactText(text), text)
	}
}

// Whatever the URL, what is shown of it carries no password, no lone
// user name, no query value and no fragment; it still parses, names the
// same host and path, and showing it again changes nothing.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{
		"https://user:secret@h/", "http://u:p%40ss@127.0.0.1:9/x?y#z", "http://[::1]:80/", "http://a:b@c:d@e/", "x:y@z",
		"https://TOKEN@h/", "https://h/?token=abc&sig=x%26y&&bare", "https://h/?a=1;b=2#frag", "https://h/?=v&k==",
		"http:opaque?token=t", "https://h/p%2Fq?%zz=1",
	} {
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
		if u.User != nil {
			pass, ok := u.User.Password()
			if ok && pass != "xxxxx" {
				t.Fatalf("%q shown as %q, with the password %q", raw, shown, pass)
			}
			if name := u.User.Username(); !ok && name != "" && name != "xxxxx" {
				t.Fatalf("%q shown as %q, with the lone user name %q", raw, shown, name)
			}
		}
		if u.Opaque != "" && u.Opaque != "xxxxx" {
			t.Fatalf("%q shown as %q, with the opaque part %q", raw, shown, u.Opaque)
		}
		for p := range strings.SplitSeq(u.RawQuery, "&") {
			name, value, ok := strings.Cut(p, "=")
			if (!ok && name != "" && name != "xxxxx") || (ok && value != "" && value != "xxxxx") {
				t.Fatalf("%q shown as %q, with the query parameter %q", raw, shown, p)
			}
		}
		if u.Fragment != "" && u.Fragment != "xxxxx" {
			t.Fatalf("%q shown as %q, with the fragment %q", raw, shown, u.Fragment)
		}
		orig, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("%q does not parse but is shown as %q", raw, shown)
		}
		if u.Host != orig.Host || u.Scheme != orig.Scheme || (orig.Opaque == "" && u.EscapedPath() != orig.EscapedPath()) {
			t.Fatalf("%q shown as %q: not the same endpoint", raw, shown)
		}
		if again := RedactURL(shown); again != shown {
			t.Fatalf("%q shown as %q, then as %q", raw, shown, again)
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

// A password, a lone user name and query values in a subscription's URL
// are sent to the receiver but appear in no log line, in no breaker change
// told to OnBreakerChange and in no delivery's lastError (a connection
// error names the URL).
func TestURLPasswordNotLogged(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		const (
			password = "hunter2-pa55w0rd-in-url"
			token    = "t0ken-in-the-query"
			sig      = "s1g-in-the-query"
			user     = "l0ne-us3r-t0ken"
		)
		secrets := []string{password, token, sig, user}
		logs := &syncBuffer{}
		var (
			mu        sync.Mutex
			endpoints []string
		)
		b := setup(t, backend, func(c *Config) {
			c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c.BreakerFailures, c.MaxAttempts = 2, 2
			c.OnBreakerChange = func(endpoint, _, _ string) {
				mu.Lock()
				defer mu.Unlock()
				endpoints = append(endpoints, endpoint)
			}
		})
		rc := newReceiver(t, func(int, *http.Request) int { return http.StatusInternalServerError })
		u, err := url.Parse(rc.srv.URL + "/in?token=" + token + "&sig=" + sig)
		require.NoError(t, err)
		u.User = url.UserPassword("hooks", password)
		w := b.subscribe(t, u.String())
		down := newReceiver(t, nil)
		down.srv.Close() // refused: the error names the URL
		d, err := url.Parse(down.srv.URL + "/in?access_token=" + token)
		require.NoError(t, err)
		d.User = url.User(user)
		wDown := b.subscribe(t, d.String())
		b.start(t)
		b.insertJobs(t, 1)
		b.waitStates(t, w, 1, store.DeliveryDead)
		dead := b.waitStates(t, wDown, 1, store.DeliveryDead)

		got := rc.requests()[0]
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header = got.Header
		name, pass, ok := r.BasicAuth()
		require.True(t, ok)
		require.Equal(t, "hooks:"+password, name+":"+pass, "delivered with the password")
		require.Equal(t, "token="+token+"&sig="+sig, got.Query, "delivered with the query")
		for _, s := range secrets {
			require.NotContains(t, logs.String(), s)
			require.NotContains(t, dead[0].LastError, s)
		}
		require.Contains(t, logs.String(), "hooks:xxxxx@", "the endpoint is logged, redacted")
		require.Contains(t, logs.String(), "token=xxxxx&sig=xxxxx")
		require.Contains(t, dead[0].LastError, "//xxxxx@127.0.0.1", "the connection error names the URL, redacted")
		require.Contains(t, dead[0].LastError, "/in?access_token=xxxxx")
		require.Contains(t, logs.String(), "/in?access_token=xxxxx")
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, endpoints, "the breakers opened")
		want := map[string]bool{
			strings.NewReplacer(password, "xxxxx", token, "xxxxx", sig, "xxxxx").Replace(u.String()): true,
			strings.NewReplacer(user, "xxxxx", token, "xxxxx").Replace(d.String()):                   true,
		}
		for _, e := range endpoints {
			for _, s := range secrets {
				require.NotContains(t, e, s)
			}
			require.True(t, want[e], e)
		}
	})
}
