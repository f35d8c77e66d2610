package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/api"
	"github.com/docket-run/docket/internal/testdb"
)

func TestSimulateParseProfiles(t *testing.T) {
	t.Parallel()
	got, err := parseProfiles("")
	require.NoError(t, err)
	require.Equal(t, []simShare{{"good", 100}}, got, "default: today's behaviour")
	got, err = parseProfiles("good=70, spammer=20,first=5,fast=5")
	require.NoError(t, err)
	require.Equal(t, []simShare{{"good", 70}, {"spammer", 20}, {"first", 5}, {"fast", 5}}, got)
	_, err = parseProfiles("good=70,spammer=20")
	require.EqualError(t, err, "--profiles: the percentages sum to 90, not 100")
	_, err = parseProfiles("good=x,bogus=10,good=5,noisy")
	require.EqualError(t, err, `--profiles: good: the percentage "x" is not a whole number from 0 to 100; `+
		`unknown profile "bogus" (want good, noisy, spammer, first, fast); profile good given twice; "noisy" is not profile=percent`)
	_, err = parseProfiles("good=101,noisy=-1")
	require.ErrorContains(t, err, `good: the percentage "101"`)
	require.ErrorContains(t, err, `noisy: the percentage "-1"`)
}

func TestSimulateSeatProfiles(t *testing.T) {
	t.Parallel()
	shares := []simShare{{"good", 70}, {"spammer", 20}, {"first", 5}, {"fast", 5}}
	count := func(seats []string) map[string]int {
		m := map[string]int{}
		for _, s := range seats {
			m[s]++
		}
		return m
	}
	// 10: 7, 2, then one seat for the two remainders of 0.5: the first listed.
	require.Equal(t, map[string]int{"good": 7, "spammer": 2, "first": 1}, count(seatProfiles(shares, 10)))
	require.Equal(t, map[string]int{"good": 70, "spammer": 20, "first": 5, "fast": 5}, count(seatProfiles(shares, 100)))
	// 3: 2.1, 0.6, 0.15, 0.15 → 2, then spammer (0.6), then first (0.15, listed before fast).
	require.Equal(t, []string{"good", "good", "spammer"}, seatProfiles(shares, 3))
	for n := 1; n < 50; n++ {
		require.Len(t, seatProfiles(shares, n), n)
	}
	require.Equal(t, []string{"good", "good"}, seatProfiles([]simShare{{"good", 100}}, 2))
}

// TestCLICrowdSimulateProfiles works a pool over HTTP with a mix of
// profiles and checks every stored judgment against its contributor's
// profile: good ones (accuracy 1) answer the truth after thinking, the
// first-option bot answers the first option.
func TestCLICrowdSimulateProfiles(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = client.Close() })
			srv := httptest.NewServer(api.New(api.Config{Client: client}))
			t.Cleanup(srv.Close)
			admin, _, err := client.CreateAPIKey(ctx, "admin", docket.RoleAdmin)
			require.NoError(t, err)
			file := filepath.Join(t.TempDir(), "task.json")
			require.NoError(t, os.WriteFile(file, []byte(cliTask), 0o600))
			_, err = docketCLI(t, srv.URL, admin, "task", "put", "same-product", "-f", file)
			require.NoError(t, err)
			def, err := docket.DecodeWorkflow([]byte(`{"name": "match", "steps": [{"name": "label", "human": {"task": "same-product"}}]}`))
			require.NoError(t, err)
			_, _, err = client.WorkflowPut(ctx, def)
			require.NoError(t, err)
			pool, _, err := client.PoolEnsure(ctx, "match", 1, "label", "same-product")
			require.NoError(t, err)
			inputs := make([]json.RawMessage, 12)
			for i := range inputs {
				inputs[i] = json.RawMessage(fmt.Sprintf(`{"n": %d, "truth": "no"}`, i)) // "yes" is the first option
			}
			units, err := client.UnitsAdd(ctx, pool.ID, inputs)
			require.NoError(t, err)
			pid := pool.ID.String()

			_, err = docketCLI(t, srv.URL, admin, "crowd", "simulate", "--pool", pid, "--profiles", "good=70,spammer=20")
			require.ErrorContains(t, err, "sum to 90")

			const think = 20 * time.Millisecond
			out, err := docketCLI(t, srv.URL, admin, "crowd", "simulate", "--pool", pid, "--contributors", "4", "--accuracy", "1",
				"--profiles", "good=50,first=25,fast=25", "--think", think.String(), "--prefix", "simp")
			require.NoError(t, err)
			require.Contains(t, out, "4 contributors submitted 36 judgments")
			line := regexp.MustCompile(`(?m)^  (\w+): (\d+) contributors, (\d+) judgments, (\d+) matching the truth field, 0 refused work$`)
			printed := map[string][3]int{}
			for _, m := range line.FindAllStringSubmatch(out, -1) {
				a, _ := strconv.Atoi(m[2])
				b, _ := strconv.Atoi(m[3])
				c, _ := strconv.Atoi(m[4])
				printed[m[1]] = [3]int{a, b, c}
			}
			require.Len(t, printed, 3, out)
			require.Equal(t, 2, printed["good"][0])
			require.Equal(t, 1, printed["first"][0])
			require.Equal(t, 1, printed["fast"][0])
			require.Equal(t, printed["good"][1], printed["good"][2], "accuracy 1: every good judgment matches")
			require.Equal(t, 0, printed["first"][2], "the first option is never the truth here")

			profileOf := map[uuid.UUID]string{}
			contributors, err := client.ContributorList(ctx, docket.ContributorListParams{})
			require.NoError(t, err)
			for _, c := range contributors {
				if strings.HasPrefix(c.ExternalID, "simp-") {
					profileOf[c.ID] = c.ExternalID[strings.LastIndex(c.ExternalID, "-")+1:]
				}
			}
			require.Len(t, profileOf, 4)
			stored := map[string]int{}
			for _, u := range units {
				js, err := client.JudgmentList(ctx, u.ID)
				require.NoError(t, err)
				for _, j := range js {
					prof := profileOf[j.ContributorID]
					stored[prof]++
					var data struct {
						Same string `json:"same"`
					}
					require.NoError(t, json.Unmarshal(j.Data, &data))
					switch prof {
					case "good":
						require.Equal(t, "no", data.Same)
						require.GreaterOrEqual(t, j.SubmittedAt.Sub(j.StartedAt), think, "a good contributor thinks")
					case "first":
						require.Equal(t, "yes", data.Same)
					case "fast":
						require.Contains(t, []string{"yes", "no"}, data.Same)
					default:
						t.Fatalf("judgment of an unknown contributor %s", j.ContributorID)
					}
				}
			}
			for prof, p := range printed {
				require.Equal(t, p[1], stored[prof], "%s judgments", prof)
			}
		})
	}
}
