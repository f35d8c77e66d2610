package docket_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/api"
	"github.com/docket-run/docket/internal/testdb"
)

// TestStorageFullHTTP: a database with no room for a write answers 507
// problems/storage-full through the HTTP API, nothing written, where it
// answered a bare 500; reads go on, and the same request succeeds once
// there is room. SQLite's SQLITE_FULL comes from PRAGMA max_page_count
// lowered to the pages the database has (what a full disk gives);
// PostgreSQL's disk_full (53100) from the server itself, raised by a
// trigger on the jobs table (a full disk cannot be made on a shared test
// server).
func TestStorageFullHTTP(t *testing.T) {
	t.Parallel()
	// fill makes the next job insert fail for want of room; the function
	// it returns makes room again.
	type filler func(t *testing.T, ctx context.Context, client *docket.Client, url string) (free func())
	sqliteFill := func(t *testing.T, ctx context.Context, client *docket.Client, _ string) func() {
		writer := docket.SQLiteWriter(client)
		var pages int
		require.NoError(t, writer.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages))
		_, err := writer.ExecContext(ctx, "PRAGMA max_page_count = "+strconv.Itoa(pages))
		require.NoError(t, err)
		return func() {
			_, err := writer.ExecContext(ctx, "PRAGMA max_page_count = 1000000")
			require.NoError(t, err)
		}
	}
	postgresFill := func(t *testing.T, ctx context.Context, _ *docket.Client, url string) func() {
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(ctx)) })
		_, err = conn.Exec(ctx, `
CREATE FUNCTION storage_full_probe() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$;
CREATE TRIGGER storage_full_probe BEFORE INSERT ON docket_jobs FOR EACH ROW EXECUTE FUNCTION storage_full_probe()`)
		require.NoError(t, err)
		return func() {
			_, err := conn.Exec(ctx, `DROP TRIGGER storage_full_probe ON docket_jobs`)
			require.NoError(t, err)
		}
	}
	for _, tc := range []struct {
		name string
		url  func(testing.TB) string
		fill filler
	}{
		{"sqlite", testdb.SQLiteMigratedURL, sqliteFill},
		{"postgres", testdb.PostgresURL, postgresFill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := tc.url(t)
			client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = client.Close() })
			secret, _, err := client.CreateAPIKey(ctx, "full", docket.RoleProducer)
			require.NoError(t, err)
			srv := httptest.NewServer(api.New(api.Config{Client: client}))
			t.Cleanup(srv.Close)
			send := func(method, path, body string) (int, http.Header, []byte) {
				t.Helper()
				req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+secret)
				if body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				res, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer res.Body.Close()
				data, err := io.ReadAll(res.Body)
				require.NoError(t, err)
				return res.StatusCode, res.Header, data
			}

			free := tc.fill(t, ctx, client, url)
			submit := `{"jobType":"big","queue":"full","payload":{"blob":"` + strings.Repeat("x", 256<<10) + `"}}`
			status, header, body := send("POST", "/v1/jobs", submit)
			require.Equal(t, http.StatusInsufficientStorage, status, string(body))
			require.Equal(t, "application/problem+json", header.Get("Content-Type"))
			require.Empty(t, header.Get("Retry-After"), "no retry is due until someone makes room")
			var p api.Problem
			require.NoError(t, json.Unmarshal(body, &p))
			require.Equal(t, "https://docket.dev/problems/storage-full", p.Type)
			require.Equal(t, "Insufficient storage", p.Title)
			require.Equal(t, http.StatusInsufficientStorage, p.Status)
			require.Contains(t, p.Detail, "nothing was written")

			status, _, body = send("GET", "/v1/jobs?queue=full", "")
			require.Equal(t, http.StatusOK, status, string(body))
			var page struct {
				Items []json.RawMessage `json:"items"`
			}
			require.NoError(t, json.Unmarshal(body, &page))
			require.Empty(t, page.Items, "nothing of the refused submission is kept")

			free()
			status, _, body = send("POST", "/v1/jobs", submit)
			require.Equal(t, http.StatusAccepted, status, string(body))
		})
	}
}
