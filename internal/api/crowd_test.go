package api

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// sameProduct is the template of DESIGN §6, trimmed to what the tests
// need: one required choice, an optional text.
const sameProduct = `{"title": "Same product?",
 "instructions": "Do the two records describe the same product?",
 "display": [{"kind": "text", "from": "unit.left"}, {"kind": "text", "from": "unit.right"}],
 "fields": [{"name": "same", "kind": "choice", "required": true,
             "options": [{"value": "yes", "label": "Same", "key": "1"},
                         {"value": "no", "label": "Different", "key": "2"}]},
            {"name": "note", "kind": "text", "maxLength": 200}],
 "judgmentsPerUnit": {"min": 3},
 "assignmentSeconds": 60, "skills": ["en"], "priority": 5}`

// crowdBundle is a server on a real database whose clock the test moves.
type crowdBundle struct {
	*bundle
	now atomic.Int64 // unix nanos
}

func (cb *crowdBundle) advance(d time.Duration) { cb.now.Add(int64(d)) }

func setupCrowd(t *testing.T, backend testdb.Backend, opts ...option) *crowdBundle {
	t.Helper()
	ctx := context.Background()
	cb := &crowdBundle{}
	cb.now.Store(time.Now().UnixNano())
	client, err := docket.NewClient(ctx, docket.Config{
		DatabaseURL: backend.URL(t), AutoMigrate: true,
		Now: func() time.Time { return time.Unix(0, cb.now.Load()) },
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	cfg := Config{Client: client}
	for _, o := range opts {
		o(&cfg)
	}
	srv := httptest.NewServer(New(cfg))
	t.Cleanup(srv.Close)
	cb.bundle = &bundle{client: client, server: srv, keys: map[docket.Role]string{}}
	for _, role := range docket.Roles {
		secret, _, err := client.CreateAPIKey(ctx, "test-"+string(role), role)
		require.NoError(t, err)
		cb.keys[role] = secret
	}
	return cb
}

// as sends a request with the secret key.
func (b *bundle) as(t *testing.T, secret, method, path string, body any) *response {
	t.Helper()
	const tmp = docket.Role("secret-under-test")
	b.keys[tmp] = secret
	defer delete(b.keys, tmp)
	return b.do(t, tmp, method, path, body)
}

// worker is a contributor with a key.
type worker struct {
	id     string
	secret string
}

func (cb *crowdBundle) newWorker(t *testing.T, ext string, skills ...string) worker {
	t.Helper()
	r := cb.do(t, docket.RoleAdmin, "POST", "/v1/contributors", map[string]any{"externalId": ext, "name": "W " + ext, "skills": skills})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var c contributorView
	r.JSON(t, &c)
	r = cb.do(t, docket.RoleAdmin, "POST", "/v1/contributors/"+c.ContributorID.String()+"/keys", nil)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var k contributorKeyView
	r.JSON(t, &k)
	require.Equal(t, "contributor", k.Role)
	require.Equal(t, c.ContributorID, k.ContributorID)
	return worker{id: c.ContributorID.String(), secret: k.Secret}
}

// newPool puts the task and makes a pool of n units through the Go API
// (the workflow runtime's way).
func (cb *crowdBundle) newPool(t *testing.T, step string, n int, template string) *docket.Pool {
	t.Helper()
	ctx := context.Background()
	r := cb.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/same-product", template)
	require.Contains(t, []int{200, 201}, r.Status, string(r.Body))
	var task taskView
	r.JSON(t, &task)
	wf := fmt.Sprintf(`{"steps": [{"name": %q, "human": {"task": "same-product"}}]}`, step)
	putWorkflow(t, cb.bundle, docket.RoleAdmin, "wf-"+step, wf, http.StatusCreated)
	pool, created, err := cb.client.PoolEnsure(ctx, "wf-"+step, 1, step, "same-product")
	require.NoError(t, err)
	require.True(t, created)
	again, created, err := cb.client.PoolEnsure(ctx, "wf-"+step, 1, step, "same-product")
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, pool.ID, again.ID)
	if n > 0 {
		inputs := make([]json.RawMessage, n)
		for i := range inputs {
			inputs[i] = json.RawMessage(fmt.Sprintf(`{"left": "item %d", "right": "thing %d", "truth": "yes"}`, i, i))
		}
		_, err = cb.client.UnitsAdd(ctx, pool.ID, inputs)
		require.NoError(t, err)
	}
	return pool
}

func TestTaskPutGetList(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		r := b.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/same-product", sameProduct)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		var v1 taskView
		r.JSON(t, &v1)
		require.Equal(t, 1, v1.Version)
		require.True(t, strings.HasPrefix(v1.Hash, "sha256:"))
		require.Equal(t, 3, v1.Template.JudgmentsPerUnit.Max, "defaults filled in")

		// The same content again (other spacing, a default spelled out) is
		// a no-op.
		again := strings.Replace(sameProduct, `"assignmentSeconds": 60`, `"assignmentSeconds": 60, "channels": []`, 1)
		r = b.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/same-product", again)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var same taskView
		r.JSON(t, &same)
		require.Equal(t, v1.Version, same.Version)

		changed := strings.Replace(sameProduct, `"priority": 5`, `"priority": 2`, 1)
		r = b.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/same-product", changed)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))

		var got taskView
		r = b.do(t, docket.RoleViewer, "GET", "/v1/tasks/same-product?version=1", nil)
		require.Equal(t, http.StatusOK, r.Status)
		r.JSON(t, &got)
		require.Equal(t, 5, *got.Template.Priority)
		r = b.do(t, docket.RoleProducer, "GET", "/v1/tasks/same-product", nil)
		r.JSON(t, &got)
		require.Equal(t, 2, got.Version)
		b.do(t, docket.RoleViewer, "GET", "/v1/tasks/same-product?version=3", nil).Problem(t, http.StatusNotFound)
		b.do(t, docket.RoleViewer, "GET", "/v1/tasks/nope", nil).Problem(t, http.StatusNotFound)
		b.do(t, docket.RoleViewer, "GET", "/v1/tasks/same-product?version=x", nil).Problem(t, http.StatusBadRequest)
		// A name a workflow's human step could not name is refused: "-bad"
		// was stored, and every step naming it refused.
		for name, msg := range map[string]string{
			"-bad": "must start with a letter or digit", "_x": "must start with a letter or digit",
			"a:b":                    "has invalid character ':' (allowed: ASCII letters, digits, . _ -)",
			strings.Repeat("a", 129): "must be at most 128 bytes",
		} {
			p := b.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/"+name, sameProduct).Problem(t, http.StatusBadRequest)
			require.Equal(t, []FieldError{{Field: "name", Message: msg}}, p.Errors, name)
		}
		// Every bad query parameter is named, not one of them at random.
		q := b.do(t, docket.RoleViewer, "GET", "/v1/tasks/same-product?zeta=1&alpha=2&version=1&version=2", nil).Problem(t, http.StatusBadRequest)
		var named []string
		for _, e := range q.Errors {
			named = append(named, e.Field)
		}
		require.Equal(t, []string{"alpha", "version", "zeta"}, named, "%+v", q.Errors)

		// Only admin manages tasks.
		b.do(t, docket.RoleProducer, "PUT", "/v1/tasks/other", sameProduct).Problem(t, http.StatusForbidden)

		// Every bad field is named, nothing is stored.
		bad := `{"title": "", "fields": [{"name": "Same", "kind": "choice"}, {"name": "n", "kind": "number", "min": 5, "max": 1}], "priority": "high", "color": 1}`
		p := b.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/bad", bad).Problem(t, http.StatusBadRequest)
		fields := map[string]bool{}
		for _, e := range p.Errors {
			fields[e.Field] = true
		}
		for _, f := range []string{"title", "fields[0].name", "fields[0].options", "priority", "color"} {
			require.True(t, fields[f], "%s not named in %+v", f, p.Errors)
		}
		b.do(t, docket.RoleViewer, "GET", "/v1/tasks/bad", nil).Problem(t, http.StatusNotFound)
		b.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/bad", `[1]`).Problem(t, http.StatusBadRequest)
		b.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/bad%20name", sameProduct).Problem(t, http.StatusBadRequest)

		// The list pages by name.
		r = b.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/another", sameProduct)
		require.Equal(t, http.StatusCreated, r.Status)
		var page tasksResponse
		b.do(t, docket.RoleViewer, "GET", "/v1/tasks?limit=1", nil).JSON(t, &page)
		require.Len(t, page.Items, 1)
		require.Equal(t, "another", page.Items[0].Name)
		require.NotNil(t, page.NextCursor)
		var page2 tasksResponse
		b.do(t, docket.RoleViewer, "GET", "/v1/tasks?limit=1&cursor="+*page.NextCursor, nil).JSON(t, &page2)
		require.Len(t, page2.Items, 1)
		require.Equal(t, "same-product", page2.Items[0].Name)
		require.Nil(t, page2.NextCursor)
		b.do(t, docket.RoleViewer, "GET", "/v1/tasks?cursor=!!!", nil).Problem(t, http.StatusBadRequest)
	})
}

func TestContributors(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		w := cb.newWorker(t, "ext-1", "en", "fr")

		var c contributorView
		r := cb.do(t, docket.RoleAdmin, "GET", "/v1/contributors/"+w.id, nil)
		require.Equal(t, http.StatusOK, r.Status)
		r.JSON(t, &c)
		require.Equal(t, "ext-1", c.ExternalID)
		require.Equal(t, []string{"en", "fr"}, c.Skills)
		require.Equal(t, "active", c.State)

		cb.do(t, docket.RoleAdmin, "POST", "/v1/contributors", map[string]any{"externalId": "ext-1"}).Problem(t, http.StatusConflict)
		p := cb.do(t, docket.RoleAdmin, "POST", "/v1/contributors", map[string]any{"externalId": "", "skills": []string{"", "a", "a"}, "channels": 3}).Problem(t, http.StatusBadRequest)
		var named []string
		for _, e := range p.Errors {
			named = append(named, e.Field)
		}
		require.ElementsMatch(t, []string{"externalId", "skills[0]", "skills[2]", "channels"}, named)
		// A skill or channel a template could not require matched no pool:
		// refused by the template's rule, each named.
		p = cb.do(t, docket.RoleAdmin, "POST", "/v1/contributors", map[string]any{"externalId": "ext-tags", "skills": []string{"en ", "fr:CA", "a/b"}, "channels": []string{"éu"}}).Problem(t, http.StatusBadRequest)
		require.Equal(t, []FieldError{
			{Field: "skills[0]", Message: "has invalid character ' ' (allowed: ASCII letters, digits, . _ - :)"},
			{Field: "skills[2]", Message: "has invalid character '/' (allowed: ASCII letters, digits, . _ - :)"},
			{Field: "channels[0]", Message: "has invalid character 'é' (allowed: ASCII letters, digits, . _ - :)"},
		}, p.Errors)
		p = cb.do(t, docket.RoleAdmin, "PATCH", "/v1/contributors/"+w.id, map[string]any{"channels": []string{"ok", "o k"}}).Problem(t, http.StatusBadRequest)
		require.Equal(t, []FieldError{{Field: "channels[1]", Message: "has invalid character ' ' (allowed: ASCII letters, digits, . _ - :)"}}, p.Errors)

		r = cb.do(t, docket.RoleAdmin, "PATCH", "/v1/contributors/"+w.id, map[string]any{"skills": []string{"de"}, "state": "banned"})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &c)
		require.Equal(t, []string{"de"}, c.Skills)
		require.Equal(t, "banned", c.State)
		p = cb.do(t, docket.RoleAdmin, "PATCH", "/v1/contributors/"+w.id, map[string]any{"state": "gone", "channels": []string{""}}).Problem(t, http.StatusBadRequest)
		require.Len(t, p.Errors, 2)
		cb.do(t, docket.RoleAdmin, "PATCH", "/v1/contributors/"+w.id, map[string]any{}).Problem(t, http.StatusBadRequest)
		cb.do(t, docket.RoleAdmin, "PATCH", "/v1/contributors/"+uuid.NewString(), map[string]any{"name": "x"}).Problem(t, http.StatusNotFound)
		cb.do(t, docket.RoleAdmin, "GET", "/v1/contributors/not-a-uuid", nil).Problem(t, http.StatusBadRequest)
		cb.do(t, docket.RoleAdmin, "POST", "/v1/contributors/"+uuid.NewString()+"/keys", nil).Problem(t, http.StatusNotFound)

		// /v1/me answers the key's contributor.
		r = cb.as(t, w.secret, "GET", "/v1/me", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &c)
		require.Equal(t, w.id, c.ContributorID.String())

		cb.newWorker(t, "ext-2")
		cb.newWorker(t, "ext-3")
		var page contributorsResponse
		cb.do(t, docket.RoleAdmin, "GET", "/v1/contributors?limit=2", nil).JSON(t, &page)
		require.Len(t, page.Items, 2)
		require.Equal(t, "ext-3", page.Items[0].ExternalID)
		var rest contributorsResponse
		cb.do(t, docket.RoleAdmin, "GET", "/v1/contributors?limit=2&cursor="+*page.NextCursor, nil).JSON(t, &rest)
		require.Len(t, rest.Items, 1)
		require.Nil(t, rest.NextCursor)
		var banned contributorsResponse
		cb.do(t, docket.RoleAdmin, "GET", "/v1/contributors?state=banned", nil).JSON(t, &banned)
		require.Len(t, banned.Items, 1)
		// A list filter may be repeated as well as comma-separated, as
		// openapi.json says: it was "state: takes one value".
		var either contributorsResponse
		r = cb.do(t, docket.RoleAdmin, "GET", "/v1/contributors?state=banned&state=active", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &either)
		require.Len(t, either.Items, 3)
		// "flagged" matched nobody, ever: flags are per pool. Refused,
		// saying where they are.
		p = cb.do(t, docket.RoleAdmin, "GET", "/v1/contributors?state=banned,flagged", nil).Problem(t, http.StatusBadRequest)
		require.Len(t, p.Errors, 1)
		require.Equal(t, "state", p.Errors[0].Field)
		require.Contains(t, p.Errors[0].Message, "filter by active or banned")
		require.Contains(t, p.Errors[0].Message, "/v1/pools/{poolId}/contributors/{contributorId}")
		p = cb.do(t, docket.RoleAdmin, "GET", "/v1/contributors?state=banned&state=gone&limit=1&limit=2", nil).Problem(t, http.StatusBadRequest)
		require.Equal(t, []FieldError{{Field: "limit", Message: "takes one value (only state takes a list)"},
			{Field: "state", Message: `"gone" is not a contributor state (active or banned)`}}, p.Errors)
		cb.do(t, docket.RoleAdmin, "GET", "/v1/contributors?state=gone", nil).Problem(t, http.StatusBadRequest)

		// A contributor key cannot be made by CreateAPIKey.
		_, _, err := cb.client.CreateAPIKey(context.Background(), "x", docket.RoleContributor)
		require.Error(t, err)
	})
}

// TestContributorTextTheDatabaseCannotStore: a NUL in a contributor's
// text is refused by name, not answered 500 by PostgreSQL (which cannot
// store it) and stored by SQLite; and a key's default name, cut from a
// long external id, is cut at a character, not inside one.
func TestContributorTextTheDatabaseCannotStore(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		named := func(p *Problem) []string {
			var f []string
			for _, e := range p.Errors {
				f = append(f, e.Field)
			}
			return f
		}
		p := cb.do(t, docket.RoleAdmin, "POST", "/v1/contributors", map[string]any{
			"externalId": "a\x00b", "name": "n\x00", "skills": []string{"en", "f\x00r"}, "channels": []string{"\x00"}}).Problem(t, http.StatusBadRequest)
		require.ElementsMatch(t, []string{"externalId", "name", "skills[1]", "channels[0]"}, named(p))

		w := cb.newWorker(t, "ext-nul")
		p = cb.do(t, docket.RoleAdmin, "PATCH", "/v1/contributors/"+w.id, map[string]any{"name": "\x00", "skills": []string{"\x00"}}).Problem(t, http.StatusBadRequest)
		require.ElementsMatch(t, []string{"name", "skills[0]"}, named(p))
		p = cb.do(t, docket.RoleAdmin, "POST", "/v1/contributors/"+w.id+"/keys", map[string]any{"name": "k\x00"}).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"name"}, named(p))

		// "contributor " and 115 bytes, then a two-byte é across byte 128.
		ext := strings.Repeat("a", 115) + "é" + strings.Repeat("b", 10)
		var c contributorView
		r := cb.do(t, docket.RoleAdmin, "POST", "/v1/contributors", map[string]any{"externalId": ext})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		r.JSON(t, &c)
		r = cb.do(t, docket.RoleAdmin, "POST", "/v1/contributors/"+c.ContributorID.String()+"/keys", nil)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		var k contributorKeyView
		r.JSON(t, &k)
		require.True(t, utf8.ValidString(k.Name), "%q", k.Name)
		require.Equal(t, "contributor "+strings.Repeat("a", 115), k.Name)
	})
}

// TestRolesByRoute sends every route of the server as every role and
// checks who gets past authorization: admin, producer and viewer keep
// their rights, workers only lease, and a contributor key reaches only the
// contributor endpoints.
func TestRolesByRoute(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		w := cb.newWorker(t, "roles")
		cb.keys[docket.RoleContributor] = w.secret
		s := New(Config{Client: cb.client})
		allowed := map[docket.Role]map[permission]bool{
			docket.RoleAdmin:       {permRead: true, permSubmit: true, permLease: true, permAdmin: true},
			docket.RoleProducer:    {permRead: true, permSubmit: true},
			docket.RoleWorker:      {permLease: true},
			docket.RoleViewer:      {permRead: true},
			docket.RoleContributor: {permWork: true},
		}
		require.Len(t, grants, len(allowed), "a role was added: extend this table")
		for role, perms := range allowed {
			for _, p := range grants[role] {
				require.True(t, perms[p], "role %s has permission %d the table does not expect", role, p)
			}
			require.Len(t, grants[role], len(perms), "role %s", role)
		}
		id := uuid.NewString()
		for _, rt := range s.routes {
			if rt.Perm == permPublic {
				continue
			}
			// Event streams stay open: only the refusals are checked there.
			stream := strings.HasSuffix(rt.Path, "/events")
			path := rt.Path
			for _, name := range []string{"{jobId}", "{leaseId}", "{webhookId}", "{deliveryId}", "{poolId}", "{unitId}", "{contributorId}", "{assignmentId}"} {
				path = strings.ReplaceAll(path, name, id)
			}
			path = strings.NewReplacer("{queue}", "q", "{name}", "n", "{consumer}", "c", "{eventId}", "e").Replace(path)
			for role, perms := range allowed {
				if stream && perms[rt.Perm] {
					continue
				}
				r := cb.do(t, role, rt.Method, path, "{}")
				if perms[rt.Perm] {
					require.NotEqual(t, http.StatusForbidden, r.Status, "%s %s as %s: %s", rt.Method, rt.Path, role, r.Body)
					require.NotEqual(t, http.StatusUnauthorized, r.Status, "%s %s as %s", rt.Method, rt.Path, role)
				} else {
					require.Equal(t, http.StatusForbidden, r.Status, "%s %s as %s: %s", rt.Method, rt.Path, role, r.Body)
				}
			}
		}
	})
}

func TestPools(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		pool := cb.newPool(t, "label", 4, sameProduct)
		cb.newPool(t, "other", 0, sameProduct)
		pid := pool.ID.String()

		var list poolsResponse
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools?workflow=wf-label", nil).JSON(t, &list)
		require.Len(t, list.Items, 1)
		pv := *list.Items[0]
		require.Equal(t, pool.ID, pv.PoolID)
		require.Equal(t, "label", pv.Step)
		require.Equal(t, "same-product", pv.Task)
		require.Equal(t, "OPEN", pv.Status)
		require.Equal(t, 4, pv.Counts.Judgable)
		require.Equal(t, 3, pv.JudgmentsPerUnit)
		require.Equal(t, []string{"en"}, pv.Skills)
		list = poolsResponse{}
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools?status=OPEN&limit=1", nil).JSON(t, &list)
		require.Len(t, list.Items, 1)
		require.NotNil(t, list.NextCursor)
		p := cb.do(t, docket.RoleViewer, "GET", "/v1/pools?status=SHUT&limit=0", nil).Problem(t, http.StatusBadRequest)
		require.Len(t, p.Errors, 2, "both bad parameters are named")

		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+uuid.NewString(), nil).Problem(t, http.StatusNotFound)
		var got poolView
		cb.do(t, docket.RoleProducer, "GET", "/v1/pools/"+pid, nil).JSON(t, &got)
		require.Equal(t, pv.PoolID, got.PoolID)

		// Pause, resume, close: admin only; 409 from a status they do not
		// start from.
		cb.do(t, docket.RoleProducer, "POST", "/v1/pools/"+pid+"/pause", nil).Problem(t, http.StatusForbidden)
		r := cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/pause", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &got)
		require.Equal(t, "PAUSED", got.Status)
		require.Equal(t, http.StatusOK, cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/pause", nil).Status)
		r = cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/resume", nil)
		r.JSON(t, &got)
		require.Equal(t, "OPEN", got.Status)

		// Golden units: answers validated against the task, every bad one
		// named, nothing added.
		p = cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/golden", map[string]any{"units": []any{
			map[string]any{"input": map[string]any{"left": "a"}, "answer": map[string]any{"same": "maybe"}},
			map[string]any{"input": 3, "answer": map[string]any{"same": "yes"}},
			map[string]any{"input": map[string]any{}, "answer": map[string]any{"color": "red"}},
		}}).Problem(t, http.StatusBadRequest)
		var named []string
		for _, e := range p.Errors {
			named = append(named, e.Field)
		}
		// The input that is not an object and the answers the task
		// refuses, together.
		require.ElementsMatch(t, []string{"units[0].answer.same", "units[1].input", "units[2].answer.color"}, named)
		// A key a unit does not know is named with its path, every one.
		p = cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/golden", map[string]any{"units": []any{
			map[string]any{"input": map[string]any{}, "answer": map[string]any{"same": "yes"}, "colour": "red", "notes": 1},
			map[string]any{"input": map[string]any{}, "answer": map[string]any{"same": "no"}, "bogus": true},
		}}).Problem(t, http.StatusBadRequest)
		named = nil
		for _, e := range p.Errors {
			named = append(named, e.Field)
		}
		require.ElementsMatch(t, []string{"units[0].colour", "units[0].notes", "units[1].bogus"}, named)
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid, nil).JSON(t, &got)
		require.Equal(t, 0, got.Counts.Golden)
		p = cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/golden", map[string]any{"units": []any{
			map[string]any{"input": map[string]any{"left": "a"}, "answer": map[string]any{"same": "maybe"}},
			map[string]any{"input": map[string]any{}, "answer": map[string]any{"color": "red"}},
		}}).Problem(t, http.StatusBadRequest)
		named = nil
		for _, e := range p.Errors {
			named = append(named, e.Field)
		}
		require.Contains(t, named, "units[0].answer.same")
		require.Contains(t, named, "units[1].answer.color")
		var golden unitsResponse
		r = cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/golden", map[string]any{"units": []any{
			map[string]any{"input": map[string]any{"left": "a", "right": "a"}, "answer": map[string]any{"same": "yes"}},
		}})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		r.JSON(t, &golden)
		require.Len(t, golden.Items, 1)
		require.True(t, golden.Items[0].Golden)

		// Units: list with filters and cursor, one unit, its result.
		var units unitsResponse
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid+"/units?golden=false&limit=3", nil).JSON(t, &units)
		require.Len(t, units.Items, 3)
		require.NotNil(t, units.NextCursor)
		var more unitsResponse
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid+"/units?golden=false&limit=3&cursor="+*units.NextCursor, nil).JSON(t, &more)
		require.Len(t, more.Items, 1)
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid+"/units?golden=true&state=JUDGABLE", nil).JSON(t, &more)
		require.Len(t, more.Items, 1)
		r = cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid+"/units?golden=true&state=FINALIZED&state=JUDGABLE", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &more)
		require.Len(t, more.Items, 1)
		var pools poolsResponse
		r = cb.do(t, docket.RoleViewer, "GET", "/v1/pools?status=CLOSED&status=OPEN", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &pools)
		var commas poolsResponse
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools?status=CLOSED,OPEN", nil).JSON(t, &commas)
		require.NotEmpty(t, pools.Items)
		require.Equal(t, commas, pools)
		p = cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid+"/units?golden=maybe&state=DONE&runId=x", nil).Problem(t, http.StatusBadRequest)
		require.Len(t, p.Errors, 3)
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+uuid.NewString()+"/units", nil).Problem(t, http.StatusNotFound)
		uid := units.Items[0].UnitID.String()
		var u unitView
		cb.do(t, docket.RoleViewer, "GET", "/v1/units/"+uid, nil).JSON(t, &u)
		require.Equal(t, "JUDGABLE", u.State)
		require.Nil(t, u.RunID)
		var res unitResultView
		cb.do(t, docket.RoleViewer, "GET", "/v1/units/"+uid+"/result", nil).JSON(t, &res)
		require.Equal(t, "null", string(res.Result))
		require.Nil(t, res.FinalizedAt)
		cb.do(t, docket.RoleViewer, "GET", "/v1/units/"+uuid.NewString()+"/result", nil).Problem(t, http.StatusNotFound)

		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid+"/results?format=xml", nil).Problem(t, http.StatusBadRequest)

		// Its four units have no judgment and no assignment: the close
		// cancels them (runs waiting on them would go on) and the pool is
		// COMPLETED at once; the golden unit stays.
		r = cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/close", nil)
		r.JSON(t, &got)
		require.Equal(t, "COMPLETED", got.Status)
		require.Equal(t, 4, got.Counts.Canceled)
		require.Equal(t, 1, got.Counts.Golden)
		cb.do(t, docket.RoleViewer, "GET", "/v1/units/"+uid, nil).JSON(t, &u)
		require.Equal(t, "CANCELED", u.State)
		cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/resume", nil).Problem(t, http.StatusConflict)
		// A closed pool takes no golden unit: 409 saying so, not that it
		// "hands out no assignment" (no assignment was asked for).
		p = cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/golden", map[string]any{"units": []any{
			map[string]any{"input": map[string]any{"left": "b"}, "answer": map[string]any{"same": "no"}},
		}}).Problem(t, http.StatusConflict)
		require.Equal(t, "https://docket.dev/problems/pool-not-open", p.Type)
		require.Equal(t, "pool "+pid+" is COMPLETED: no unit can be added to it, golden units neither", p.Detail)
	})
}

// take takes an assignment of pool as w.
func (cb *crowdBundle) take(t *testing.T, w worker, pool string) (*takeResponse, *response) {
	t.Helper()
	r := cb.as(t, w.secret, "POST", "/v1/assignments", map[string]any{"poolId": pool})
	if r.Status != http.StatusCreated {
		return nil, r
	}
	var tr takeResponse
	r.JSON(t, &tr)
	return &tr, r
}

func TestAssignmentsAndJudgments(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		pool := cb.newPool(t, "label", 1, sameProduct)
		pid := pool.ID.String()
		a, b, c := cb.newWorker(t, "a", "en"), cb.newWorker(t, "b", "en"), cb.newWorker(t, "c", "en", "fr")
		noSkill := cb.newWorker(t, "d")

		// Finding work.
		var mine myPoolsResponse
		cb.as(t, a.secret, "GET", "/v1/me/pools", nil).JSON(t, &mine)
		require.Len(t, mine.Items, 1)
		require.Equal(t, pool.ID, mine.Items[0].PoolID)
		require.Equal(t, "Same product?", mine.Items[0].Title)
		require.Equal(t, 1, mine.Items[0].Available)
		cb.as(t, noSkill.secret, "GET", "/v1/me/pools", nil).JSON(t, &mine)
		require.Empty(t, mine.Items)
		cb.as(t, a.secret, "GET", "/v1/me/pools?limit=1", nil).JSON(t, &mine)
		require.Len(t, mine.Items, 1)
		for _, q := range []string{"limit=0", "limit=501", "limit=x", "cursor=x"} {
			cb.as(t, a.secret, "GET", "/v1/me/pools?"+q, nil).Problem(t, http.StatusBadRequest)
		}
		cb.as(t, noSkill.secret, "POST", "/v1/assignments", map[string]any{"poolId": pid}).Problem(t, http.StatusForbidden)

		// An id that is given but not a UUID is not said to be missing.
		p := cb.as(t, a.secret, "POST", "/v1/assignments", map[string]any{"poolId": "x"}).Problem(t, http.StatusBadRequest)
		require.Equal(t, []FieldError{{Field: "poolId", Message: `must be the UUID of a pool (GET /v1/me/pools lists them), not "x"`}}, p.Errors)
		cb.as(t, a.secret, "POST", "/v1/assignments", map[string]any{"poolId": uuid.NewString()}).Problem(t, http.StatusNotFound)

		ta, _ := cb.take(t, a, pid)
		require.NotNil(t, ta)
		require.Equal(t, "same-product", ta.Task.Name)
		require.Len(t, ta.Task.Fields, 2)
		require.Contains(t, string(ta.Unit.Input), "item 0")
		require.WithinDuration(t, time.Unix(0, cb.now.Load()).Add(60*time.Second), ta.ExpiresAt, time.Second)
		aid := ta.AssignmentID.String()

		// The same unit is never given twice to one person.
		_, r := cb.take(t, a, pid)
		p = r.Problem(t, http.StatusNotFound)
		require.Contains(t, p.Type, "no-unit")

		// Heartbeat and extend: own assignments only.
		var av assignmentView
		r = cb.as(t, a.secret, "POST", "/v1/assignments/"+aid+"/heartbeat", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		cb.as(t, b.secret, "POST", "/v1/assignments/"+aid+"/heartbeat", nil).Problem(t, http.StatusNotFound)
		cb.as(t, a.secret, "POST", "/v1/assignments/"+aid+"/extend", map[string]any{"seconds": 0}).Problem(t, http.StatusBadRequest)
		r = cb.as(t, a.secret, "POST", "/v1/assignments/"+aid+"/extend", map[string]any{"seconds": 600})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &av)
		require.True(t, av.ExpiresAt.After(ta.ExpiresAt))

		// Invalid data: 422 naming the field; the assignment stays active.
		p = cb.as(t, a.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": aid, "data": map[string]any{"same": "maybe", "extra": 1}}).Problem(t, http.StatusUnprocessableEntity)
		var named []string
		for _, e := range p.Errors {
			named = append(named, e.Field)
		}
		require.ElementsMatch(t, []string{"data.same", "data.extra"}, named)
		p = cb.as(t, a.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": "x"}).Problem(t, http.StatusBadRequest)
		require.Equal(t, []FieldError{{Field: "assignmentId", Message: `must be the UUID of your assignment, not "x"`},
			{Field: "data", Message: "is required: the answer, an object keyed by field name"}}, p.Errors)
		// Another's assignment is not found.
		cb.as(t, b.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": aid, "data": map[string]any{"same": "yes"}}).Problem(t, http.StatusNotFound)

		// 202, then the same again 200, other data 409.
		var j1, j2 judgmentResponse
		r = cb.as(t, a.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": aid, "data": map[string]any{"same": "yes"}})
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		r.JSON(t, &j1)
		require.False(t, j1.Finalized)
		r = cb.as(t, a.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": aid, "data": map[string]any{"same": "yes"}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &j2)
		require.Equal(t, j1.JudgmentID, j2.JudgmentID)
		// The same answers spelt otherwise (a null is no answer) are the
		// judgment sent again, not other data: it was 409.
		r = cb.as(t, a.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": aid, "data": map[string]any{"same": "yes", "note": nil}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &j2)
		require.Equal(t, j1.JudgmentID, j2.JudgmentID)
		cb.as(t, a.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": aid, "data": map[string]any{"same": "yes", "note": ""}}).Problem(t, http.StatusConflict)
		cb.as(t, a.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": aid, "data": map[string]any{"same": "no"}}).Problem(t, http.StatusConflict)
		cb.as(t, a.secret, "POST", "/v1/assignments/"+aid+"/heartbeat", nil).Problem(t, http.StatusConflict)
		// a judged the pool's only unit: no work for a there any more, but
		// still for b.
		cb.as(t, a.secret, "GET", "/v1/me/pools", nil).JSON(t, &mine)
		require.Empty(t, mine.Items)
		cb.as(t, b.secret, "GET", "/v1/me/pools", nil).JSON(t, &mine)
		require.Len(t, mine.Items, 1)

		// Release frees the slot at once: c takes it after b releases.
		tb, _ := cb.take(t, b, pid)
		require.NotNil(t, tb)
		r = cb.as(t, b.secret, "POST", "/v1/assignments/"+tb.AssignmentID.String()+"/release", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &av)
		require.Equal(t, "RELEASED", av.State)

		// Expired: a late judgment is refused 409 with a clear message.
		tc, _ := cb.take(t, c, pid)
		require.NotNil(t, tc)
		cb.advance(2 * time.Minute)
		p = cb.as(t, c.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": tc.AssignmentID.String(), "data": map[string]any{"same": "yes"}}).Problem(t, http.StatusConflict)
		require.Contains(t, p.Detail, "expired")
		n, err := cb.client.AssignmentsExpire(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, n)

		// Paused pool: 409.
		require.Equal(t, http.StatusOK, cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/pause", nil).Status)
		_, r = cb.take(t, b, pid)
		r.Problem(t, http.StatusConflict)
		require.Equal(t, http.StatusOK, cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/resume", nil).Status)

		// b released and c's expired: both may not take the unit again
		// (one unit, one person, once), so a fourth and fifth do, and the
		// third judgment finalizes the unit.
		submit := func(w worker, answer string) judgmentResponse {
			tk, r := cb.take(t, w, pid)
			require.NotNil(t, tk, string(r.Body))
			var j judgmentResponse
			r = cb.as(t, w.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": tk.AssignmentID.String(), "data": map[string]any{"same": answer}})
			require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
			r.JSON(t, &j)
			return j
		}
		_, r = cb.take(t, b, pid)
		r.Problem(t, http.StatusNotFound)
		require.False(t, submit(cb.newWorker(t, "e", "en"), "no").Finalized)
		last := submit(cb.newWorker(t, "f", "en"), "yes")
		require.True(t, last.Finalized)

		var res unitResultView
		cb.do(t, docket.RoleViewer, "GET", "/v1/units/"+last.UnitID.String()+"/result", nil).JSON(t, &res)
		require.Equal(t, "FINALIZED", res.State)
		require.JSONEq(t, `{"same": "yes"}`, string(res.Result))
		require.InDelta(t, 2.0/3, *res.Confidence, 1e-9)
		require.Equal(t, 3, res.JudgmentCount)
		require.NotNil(t, res.FinalizedAt)

		var pv poolView
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid, nil).JSON(t, &pv)
		require.Equal(t, 1, pv.Counts.Finalized)
		require.Equal(t, 0, pv.Counts.Judgable)

		// The export streams the result, as JSON lines and CSV.
		r = cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid+"/results", nil)
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, "application/x-ndjson", r.Header.Get("Content-Type"))
		lines := strings.Split(strings.TrimSpace(string(r.Body)), "\n")
		require.Len(t, lines, 1)
		var line map[string]any
		require.NoError(t, json.Unmarshal([]byte(lines[0]), &line))
		require.Equal(t, map[string]any{"same": "yes"}, line["result"])
		require.Contains(t, line, "input")
		r = cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid+"/results?format=csv", nil)
		require.Equal(t, http.StatusOK, r.Status)
		rows := strings.Split(strings.TrimSpace(string(r.Body)), "\n")
		require.Len(t, rows, 2)
		require.True(t, strings.HasPrefix(rows[0], "unitId,runId,state,result,confidence"))
		// The result is the same compact JSON text on both backends
		// (PostgreSQL's jsonb text has a space after each colon).
		require.Contains(t, rows[1], `,"{""same"":""yes""}",`)

		// No work left: the pool drops out of /v1/me/pools.
		cb.as(t, a.secret, "GET", "/v1/me/pools", nil).JSON(t, &mine)
		require.Empty(t, mine.Items)
	})
}

// TestAssignmentsConcurrent works one pool from many goroutines through
// HTTP, each taking an assignment and submitting its judgment: no slot is
// given twice, no person gets one unit twice, and every unit ends
// FINALIZED with exactly its 3 judgments (finalized once, in the
// transaction of its third).
func TestAssignmentsConcurrent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		const units, workers = 20, 12 // 60 slots, 12 people
		pool := cb.newPool(t, "hot", units, sameProduct)
		ws := make([]worker, workers)
		for i := range ws {
			ws[i] = cb.newWorker(t, fmt.Sprintf("w%d", i), "en")
		}
		post := func(secret, path string, body any, into any) int {
			buf, _ := json.Marshal(body)
			req, _ := http.NewRequest("POST", cb.server.URL+path, strings.NewReader(string(buf)))
			req.Header.Set("Authorization", "Bearer "+secret)
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return 0
			}
			defer res.Body.Close()
			if into != nil {
				_ = json.NewDecoder(res.Body).Decode(into)
			}
			return res.StatusCode
		}
		type take struct{ unit, worker string }
		var mu sync.Mutex
		var taken []take
		var finalized atomic.Int32
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					var tr takeResponse
					switch status := post(w.secret, "/v1/assignments", map[string]any{"poolId": pool.ID}, &tr); status {
					case http.StatusCreated:
					case http.StatusNotFound:
						return
					default:
						t.Errorf("take: %d", status)
						return
					}
					mu.Lock()
					taken = append(taken, take{tr.Unit.ID.String(), w.id})
					mu.Unlock()
					var j judgmentResponse
					if status := post(w.secret, "/v1/judgments", map[string]any{"assignmentId": tr.AssignmentID, "data": map[string]any{"same": "yes"}}, &j); status != http.StatusAccepted {
						t.Errorf("submit: %d", status)
						return
					}
					if j.Finalized {
						finalized.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		require.Len(t, taken, units*3, "every slot taken once")
		perUnit := map[string]int{}
		seen := map[take]bool{}
		for _, tk := range taken {
			require.False(t, seen[tk], "unit %s given twice to %s", tk.unit, tk.worker)
			seen[tk] = true
			perUnit[tk.unit]++
		}
		require.Len(t, perUnit, units)
		for u, n := range perUnit {
			require.Equal(t, 3, n, "unit %s", u)
		}
		require.Equal(t, int32(units), finalized.Load(), "each unit finalized once")
		var all unitsResponse
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pool.ID.String()+"/units?limit=100", nil).JSON(t, &all)
		require.Len(t, all.Items, units)
		for _, u := range all.Items {
			require.Equal(t, "FINALIZED", u.State)
			require.Equal(t, 3, u.JudgmentCount)
			require.Equal(t, 3, u.SlotsTaken)
		}
		var pv poolView
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pool.ID.String(), nil).JSON(t, &pv)
		require.Equal(t, units, pv.Counts.Finalized)
		require.Equal(t, units*3, pv.Counts.Judgments)
		require.Equal(t, 0, pv.Counts.ActiveAssignments)
	})
}

// TestJudgmentOnCanceledUnit: a judgment sent after the unit's run was
// canceled is 409 unit-canceled, saying the work is no longer wanted, and
// is not stored.
func TestJudgmentOnCanceledUnit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		ctx := context.Background()
		r := cb.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/same-product", sameProduct)
		require.Contains(t, []int{200, 201}, r.Status, string(r.Body))
		putWorkflow(t, cb.bundle, docket.RoleAdmin, "canceled", `{"steps": [{"name": "label", "human": {"task": "same-product"}}]}`, http.StatusCreated)
		res, err := cb.client.RunStart(ctx, "canceled", map[string]string{"left": "a", "right": "b"}, nil)
		require.NoError(t, err)
		pools, err := cb.client.PoolList(ctx, docket.PoolListParams{Workflow: "canceled"})
		require.NoError(t, err)
		require.Len(t, pools, 1)
		w := cb.newWorker(t, "late", "en")
		ta, r := cb.take(t, w, pools[0].ID.String())
		require.NotNil(t, ta, string(r.Body))

		r = cb.do(t, docket.RoleAdmin, "POST", "/v1/runs/"+res.Run.ID.String()+"/cancel", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		p := cb.as(t, w.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": ta.AssignmentID, "data": map[string]any{"same": "yes"}}).Problem(t, http.StatusConflict)
		require.Contains(t, p.Type, "unit-canceled")
		require.Contains(t, p.Detail, "no longer wanted")
		judgments, err := cb.client.JudgmentList(ctx, ta.Unit.ID)
		require.NoError(t, err)
		require.Empty(t, judgments, "not stored")
	})
}

// TestAssignmentExpiry is the expiry check of human work: contributors
// take every slot of a pool and vanish; with a worker leading the
// maintenance, the reaper frees nothing before the assignments expire,
// and frees every slot within one reaper interval once they have (so
// within the assignment duration plus one interval of the take); every
// late judgment is refused 409, whether it comes before the reaper's pass
// (the lease ran out) or after (the assignment is EXPIRED), and stores
// nothing; the freed slots are taken again by others.
func TestAssignmentExpiry(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		cb := setupCrowd(t, backend)
		const units, perUnit = 4, 3
		pool := cb.newPool(t, "label", units, sameProduct) // 60 s assignments
		pid := pool.ID.String()
		const interval = time.Second
		w := docket.NewWorker(cb.client, docket.WorkerConfig{AssignmentReapInterval: interval, LeaderTTL: 300 * time.Millisecond})
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() { w.Stop(ctx) })

		var taken []*takeResponse
		var who []worker
		for i := range perUnit + 1 {
			wk := cb.newWorker(t, fmt.Sprintf("vanish-%d", i), "en")
			for {
				ta, r := cb.take(t, wk, pid)
				if ta == nil {
					r.Problem(t, http.StatusNotFound)
					break
				}
				taken, who = append(taken, ta), append(who, wk)
			}
		}
		require.Len(t, taken, units*perUnit, "every slot taken")
		active := func() int {
			p, err := cb.client.PoolGet(ctx, pool.ID)
			require.NoError(t, err)
			return p.Counts.ActiveAssignments
		}

		// Just before expiry: three reaper passes free nothing.
		cb.advance(60*time.Second - time.Millisecond)
		time.Sleep(3 * interval) // passes of the reaper that must not happen to free anything
		require.Equal(t, units*perUnit, active(), "the reaper freed an assignment that had not expired")

		cb.advance(2 * time.Millisecond) // every lease ran out
		expired := time.Now()
		late := func(i int) {
			t.Helper()
			p := cb.as(t, who[i].secret, "POST", "/v1/judgments", map[string]any{"assignmentId": taken[i].AssignmentID.String(), "data": map[string]any{"same": "yes"}}).Problem(t, http.StatusConflict)
			require.Contains(t, strings.ToLower(p.Detail), "expired", "a late judgment is refused as too late")
		}
		// Before the reaper's pass, most likely: the lease ran out.
		for i := range taken[:units] {
			late(i)
		}
		for active() != 0 {
			// One pass is all it takes; the slack is the pass's own time
			// on a loaded machine.
			require.Less(t, time.Since(expired), interval+2*time.Second, "the reaper did not free every slot within one interval (%v)", interval)
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("every slot free %v after the assignments expired (reaper interval %v)", time.Since(expired).Round(time.Millisecond), interval)
		// After it: the assignments are EXPIRED.
		for i := range taken[units:] {
			late(units + i)
		}
		for _, ta := range taken {
			a, err := cb.client.AssignmentGet(ctx, ta.AssignmentID)
			require.NoError(t, err)
			require.Equal(t, docket.AssignmentExpired, a.State)
			js, err := cb.client.JudgmentList(ctx, ta.Unit.ID)
			require.NoError(t, err)
			require.Empty(t, js, "a late judgment stored nothing")
		}
		list, err := cb.client.UnitList(ctx, pool.ID, docket.UnitListParams{Limit: 10})
		require.NoError(t, err)
		for _, u := range list {
			require.Zero(t, u.SlotsTaken, "unit %s", u.ID)
		}
		// The slots are free for others (not for those who let them lapse).
		require.Nil(t, func() *takeResponse { ta, _ := cb.take(t, who[0], pid); return ta }(), "one unit, one person, once")
		again := 0
		for i := range perUnit {
			wk := cb.newWorker(t, fmt.Sprintf("next-%d", i), "en")
			for {
				ta, _ := cb.take(t, wk, pid)
				if ta == nil {
					break
				}
				again++
			}
		}
		require.Equal(t, units*perUnit, again)
	})
}

// TestUnitLowConfidence: a unit that reached its maximum of judgments
// under its task's target confidence says lowConfidence on the unit, its
// result and the export (JSON lines and CSV); one at its target does not.
func TestUnitLowConfidence(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		tmpl := strings.Replace(sameProduct, `"judgmentsPerUnit": {"min": 3}`,
			`"judgmentsPerUnit": {"min": 3, "max": 3, "targetConfidence": 0.9}`, 1)
		require.NotEqual(t, sameProduct, tmpl)
		pool := cb.newPool(t, "label", 2, tmpl)
		pid := pool.ID.String()
		// Three workers judge both units: one unanimously, the other 2
		// against 1 (confidence 0.67, under 0.9 at the maximum of 3).
		all, err := cb.client.UnitList(context.Background(), pool.ID, docket.UnitListParams{})
		require.NoError(t, err)
		disputed := all[0].ID
		for i := range 3 {
			w := cb.newWorker(t, fmt.Sprint("low-", i), "en")
			for range 2 {
				tk, r := cb.take(t, w, pid)
				require.NotNil(t, tk, string(r.Body))
				answer := "yes"
				if i == 1 && tk.Unit.ID == disputed {
					answer = "no"
				}
				r = cb.as(t, w.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": tk.AssignmentID.String(), "data": map[string]any{"same": answer}})
				require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
			}
		}
		var units unitsResponse
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid+"/units", nil).JSON(t, &units)
		require.Len(t, units.Items, 2)
		low := 0
		for _, u := range units.Items {
			require.Equal(t, "FINALIZED", u.State)
			want := *u.Confidence < 0.9
			require.Equal(t, want, u.LowConfidence, "list: %s", u.Result)
			var one unitView
			cb.do(t, docket.RoleViewer, "GET", "/v1/units/"+u.UnitID.String(), nil).JSON(t, &one)
			require.Equal(t, want, one.LowConfidence)
			var res unitResultView
			cb.do(t, docket.RoleViewer, "GET", "/v1/units/"+u.UnitID.String()+"/result", nil).JSON(t, &res)
			require.Equal(t, want, res.LowConfidence)
			if want {
				low++
				require.InDelta(t, 2.0/3, *u.Confidence, 1e-9)
			}
		}
		require.Equal(t, 1, low, "one unanimous unit, one disputed")

		r := cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid+"/results", nil)
		var flags []bool
		for _, line := range strings.Split(strings.TrimSpace(string(r.Body)), "\n") {
			var v struct {
				LowConfidence *bool `json:"lowConfidence"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &v))
			require.NotNil(t, v.LowConfidence, line)
			flags = append(flags, *v.LowConfidence)
		}
		require.ElementsMatch(t, []bool{true, false}, flags)
		r = cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid+"/results?format=csv", nil)
		rows, err := csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
		require.NoError(t, err)
		require.Len(t, rows, 3)
		require.Equal(t, "lowConfidence", rows[0][7])
		require.ElementsMatch(t, []string{"true", "false"}, []string{rows[1][7], rows[2][7]})
	})
}
