package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/net/html"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is one dashboard on a real database with a key per role.
type bundle struct {
	client  *docket.Client
	handler *Handler
	server  *httptest.Server
	keys    map[docket.Role]string // role -> secret
	clock   *clock
	// contributor is the one keys[RoleContributor] is bound to.
	contributor *docket.Contributor
}

// clock is the handler's time; tests move it to expire sessions.
type clock struct {
	mu sync.Mutex
	at time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.at }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(d)
}

func setup(t testing.TB, backend testdb.Backend) *bundle {
	t.Helper()
	return setupConfig(t, backend, nil)
}

// setupConfig is setup with the client's config changed by configure,
// which gets the bundle's clock too.
func setupConfig(t testing.TB, backend testdb.Backend, configure func(*docket.Config, *clock)) *bundle {
	t.Helper()
	ctx := context.Background()
	clk := &clock{at: time.Now()}
	cfg := docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true}
	if configure != nil {
		configure(&cfg, clk)
	}
	client, err := docket.NewClient(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	b := &bundle{client: client, keys: map[docket.Role]string{}, clock: clk}
	for _, role := range docket.Roles {
		secret, _, err := client.CreateAPIKey(ctx, "test-"+string(role), role)
		require.NoError(t, err)
		b.keys[role] = secret
	}
	b.contributor, err = client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "ada", Name: "Ada"})
	require.NoError(t, err)
	b.keys[RoleContributor], _, err = client.CreateContributorKey(ctx, b.contributor.ID, "ada")
	require.NoError(t, err)
	b.handler, err = New(Config{Client: client, Now: b.clock.Now})
	require.NoError(t, err)
	b.server = httptest.NewServer(b.handler)
	t.Cleanup(b.server.Close)
	return b
}

func forEachBackend(t *testing.T, fn func(t *testing.T, backend testdb.Backend)) {
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, backend)
		})
	}
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so tests see each 303.
type browser struct {
	b    *bundle
	http *http.Client
	csrf string // of the last page that had a form with one
}

type response struct {
	Status int
	Header http.Header
	Body   string
	Doc    *html.Node
}

func (b *bundle) browser(t *testing.T) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{b: b, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (br *browser) do(t *testing.T, method, path string, form url.Values) *response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, br.b.server.URL+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := br.http.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	p := &response{Status: res.StatusCode, Header: res.Header, Body: string(data)}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.HasPrefix(path, "/work/a/") || csp != WorkContentSecurityPolicy {
		require.Equal(t, ContentSecurityPolicy, csp, "%s %s", method, path)
	}
	require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
	require.NotEmpty(t, res.Header.Get("Referrer-Policy"))
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") && len(data) > 0 && res.StatusCode != http.StatusInternalServerError {
		p.Doc = wellFormed(t, p.Body)
		if v := formValue(p.Doc, "csrf"); v != "" {
			br.csrf = v
		}
	}
	return p
}

func (br *browser) get(t *testing.T, path string) *response {
	t.Helper()
	return br.do(t, "GET", path, nil)
}

// post sends a form with the CSRF token of the last page.
func (br *browser) post(t *testing.T, path string, form url.Values) *response {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", br.csrf)
	}
	return br.do(t, "POST", path, form)
}

// signIn signs in with role's key and returns the browser.
func (b *bundle) signIn(t *testing.T, role docket.Role) *browser {
	t.Helper()
	br := b.browser(t)
	p := br.get(t, "/signin")
	require.Equal(t, http.StatusOK, p.Status)
	p = br.post(t, "/signin", url.Values{"key": {b.keys[role]}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, home(role), p.Header.Get("Location"))
	// The landing page sets br.csrf to the session's token.
	require.Equal(t, http.StatusOK, br.get(t, home(role)).Status)
	return br
}

// voidElements have no end tag.
var voidElements = map[string]bool{"area": true, "base": true, "br": true, "col": true, "embed": true, "hr": true,
	"img": true, "input": true, "link": true, "meta": true, "source": true, "track": true, "wbr": true}

// wellFormed checks that every element is closed in order (html.Parse
// alone accepts anything: it repairs), then parses the document.
func wellFormed(t testing.TB, body string) *html.Node {
	t.Helper()
	z := html.NewTokenizer(strings.NewReader(body))
	var stack []string
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			require.ErrorIs(t, z.Err(), io.EOF)
			require.Empty(t, stack, "elements left open\n%s", body)
			doc, err := html.Parse(strings.NewReader(body))
			require.NoError(t, err)
			return doc
		case html.StartTagToken:
			name, _ := z.TagName()
			if !voidElements[string(name)] {
				stack = append(stack, string(name))
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			require.NotEmpty(t, stack, "</%s> closes nothing\n%s", name, body)
			require.Equal(t, stack[len(stack)-1], string(name), "</%s> closes <%s>\n%s", name, stack[len(stack)-1], body)
			stack = stack[:len(stack)-1]
		}
	}
}

// find returns the first element n with tag and, if id != "", that id.
func find(n *html.Node, tag, id string) *html.Node {
	if n.Type == html.ElementNode && n.Data == tag && (id == "" || attr(n, "id") == id) {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := find(c, tag, id); f != nil {
			return f
		}
	}
	return nil
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// formValue is the value of the first input named name.
func formValue(n *html.Node, name string) string {
	if n.Type == html.ElementNode && n.Data == "input" && attr(n, "name") == name {
		return attr(n, "value")
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if v := formValue(c, name); v != "" {
			return v
		}
	}
	return ""
}

func text(n *html.Node) string {
	var b bytes.Buffer
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

func insert(t *testing.T, c *docket.Client, typ, queue string, payload string) *docket.JobRow {
	t.Helper()
	res, err := c.Insert(context.Background(), docket.RawArgs{Type: typ, Payload: json.RawMessage(payload)}, &docket.InsertOpts{Queue: queue, MaxAttempts: 1})
	require.NoError(t, err)
	return res.Job
}

// dead makes a DEAD job: leased once and failed for good.
func dead(t *testing.T, c *docket.Client, queue string) *docket.JobRow {
	t.Helper()
	ctx := context.Background()
	row := insert(t, c, "doomed", queue, `{"n":1}`)
	leases, err := c.Lease(ctx, docket.LeaseParams{Queues: []string{queue}, Max: 1, Duration: time.Minute, WorkerID: "node-a"})
	require.NoError(t, err)
	require.Len(t, leases, 1)
	st, err := c.LeaseFail(ctx, leases[0].ID, "disk full", false)
	require.NoError(t, err)
	require.Equal(t, docket.JobStateDead, st)
	return row
}
