package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/api"
	"github.com/docket-run/docket/internal/testdb"
)

// keyReads counts the secrets the API server reads keys of.
type keyReads struct {
	*docket.Client
	mu    sync.Mutex
	reads map[string]int
}

func (k *keyReads) count(secrets ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range secrets {
		k.reads[s]++
	}
}

func (k *keyReads) of(secret string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reads[secret]
}

func (k *keyReads) AuthenticateAPIKey(ctx context.Context, secret string) (*docket.APIKey, error) {
	k.count(secret)
	return k.Client.AuthenticateAPIKey(ctx, secret)
}

func (k *keyReads) AuthenticateAPIKeys(ctx context.Context, secrets []string) (map[string]*docket.APIKey, error) {
	k.count(secrets...)
	return k.Client.AuthenticateAPIKeys(ctx, secrets)
}

// TestSignInFailureLimit: the sign-in form checks keys through the API
// server (as docket serve wires it), so an address over the limit on
// failed authentications is answered 429 with Retry-After before any
// read of keys, while another address still signs in.
func TestSignInFailureLimit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		reads := &keyReads{Client: b.client, reads: map[string]int{}}
		srv := api.New(api.Config{Client: b.client, Auth: reads, AuthFailureLimit: 1.0 / 3600, AuthFailureBurst: 3})
		h, err := New(Config{Client: b.client, SignIn: srv.SignInKey})
		require.NoError(t, err)

		signIn := func(addr, secret string) *httptest.ResponseRecorder {
			req := httptest.NewRequest("GET", "/signin", nil)
			req.RemoteAddr = addr
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, http.StatusOK, rec.Code)
			var token string
			for _, c := range rec.Result().Cookies() {
				if c.Name == signinCookie {
					token = c.Value
				}
			}
			require.NotEmpty(t, token)
			form := url.Values{"key": {secret}, "csrf": {token}}
			req = httptest.NewRequest("POST", "/signin", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.AddCookie(&http.Cookie{Name: signinCookie, Value: token})
			req.RemoteAddr = addr
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec
		}

		const attacker = "192.0.2.7:4000"
		for i := range 3 {
			secret := "dk_guess-" + string(rune('a'+i)) + "-nope-nope"
			require.Equal(t, http.StatusUnauthorized, signIn(attacker, secret).Code)
			require.Equal(t, 1, reads.of(secret))
		}
		const over = "dk_guess-over-nope-nope"
		rec := signIn(attacker, over)
		require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
		require.NotEmpty(t, rec.Header().Get("Retry-After"))
		require.Contains(t, rec.Body.String(), "wait")
		require.Zero(t, reads.of(over), "a sign-in over the limit read keys")
		// Even a valid key: the address is over the limit (its key not cached).
		require.Equal(t, http.StatusTooManyRequests, signIn(attacker, b.keys[docket.RoleAdmin]).Code)

		// Another address signs in.
		rec = signIn("198.51.100.9:5000", b.keys[docket.RoleAdmin])
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	})
}
