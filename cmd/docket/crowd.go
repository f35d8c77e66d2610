package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/docket-run/docket/remote"
)

// The human work commands talk to a running server over HTTP, like the
// workflow commands (docs/human-work.md).

// apiCommand makes a command group with --server, --api-key and -o, whose
// subcommands run with a client.
func apiCommand(use, short, long string, subs ...func(run runFunc, output *string, flags *apiFlags) *cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Long: long +
		"\nThe server is --server (env DOCKET_SERVER, default " + ServerDefault + "); the key is\n" +
		"--api-key (env DOCKET_API_KEY)."}
	flags := addAPIFlags(cmd.PersistentFlags())
	output := outputFlag(cmd)
	run := func(fn func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(*output); err != nil {
				return err
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			return fn(cmd.Context(), c, cmd.OutOrStdout(), args)
		}
	}
	for _, sub := range subs {
		cmd.AddCommand(sub(run, output, flags))
	}
	return cmd
}

func taskCommand() *cobra.Command {
	return apiCommand("task", "Store and read human task templates on a docket server",
		"Store and read task templates (docs/human-work.md) over the HTTP API.",
		taskPutCommand, taskGetCommand)
}

func taskPutCommand(run runFunc, output *string, _ *apiFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "put NAME [-f FILE]",
		Short: "Store a task template (a new version when it changed)",
		Long: "Store a task template, JSON as in docs/human-work.md, from FILE (-f) or stdin. The\n" +
			"server names every problem; the same content again stores nothing.",
		Example: "  docket task put same-product -f same-product.json",
		Args:    cobra.ExactArgs(1),
	}
	file := cmd.Flags().StringP("file", "f", "-", "the template's file; - for stdin")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		def, err := readDefinition(*file, cmd.InOrStdin())
		if err != nil {
			return err
		}
		var raw json.RawMessage
		status, err := c.DoStatus(ctx, "PUT", "/v1/tasks/"+url.PathEscape(args[0]), def, &raw)
		if err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(out, raw)
		}
		var v struct {
			Name    string `json:"name"`
			Version int    `json:"version"`
			Hash    string `json:"hash"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
		stored := "unchanged (same content as the latest version)"
		if status == http.StatusCreated {
			stored = "new version"
		}
		_, err = fmt.Fprintf(out, "task %s version %d %s: %s\n", v.Name, v.Version, v.Hash, stored)
		return err
	})
	return cmd
}

func taskGetCommand(run runFunc, _ *string, _ *apiFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a task template (the latest version, or --version)",
		Args:  cobra.ExactArgs(1),
	}
	version := cmd.Flags().Int("version", 0, "the version to show (default: the latest)")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		path := "/v1/tasks/" + url.PathEscape(args[0])
		if cmd.Flags().Changed("version") {
			path += "?version=" + strconv.Itoa(*version)
		}
		var raw json.RawMessage
		if err := c.Do(ctx, "GET", path, nil, &raw); err != nil {
			return err
		}
		return writeJSON(out, raw)
	})
	return cmd
}

func contributorCommand() *cobra.Command {
	return apiCommand("contributor", "Manage the contributors who do human work",
		"Create contributors and their keys over the HTTP API (an admin key).",
		contributorCreateCommand, contributorKeyCommand)
}

func contributorCreateCommand(run runFunc, output *string, _ *apiFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "create EXTERNAL_ID",
		Short:   "Create a contributor",
		Example: "  docket contributor create alice@example.com --name Alice --skills en,fr",
		Args:    cobra.ExactArgs(1),
	}
	name := cmd.Flags().String("name", "", "the contributor's name")
	skills := cmd.Flags().StringSlice("skills", nil, "skills, comma-separated")
	channels := cmd.Flags().StringSlice("channels", nil, "channels, comma-separated")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		var raw json.RawMessage
		body := map[string]any{"externalId": args[0], "name": *name, "skills": nonNilStrings(*skills), "channels": nonNilStrings(*channels)}
		if err := c.Do(ctx, "POST", "/v1/contributors", body, &raw); err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(out, raw)
		}
		var v struct {
			ContributorID string `json:"contributorId"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		_, err := fmt.Fprintln(out, v.ContributorID)
		return err
	})
	return cmd
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func contributorKeyCommand(run runFunc, output *string, _ *apiFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key CONTRIBUTOR_ID",
		Short: "Make an API key bound to a contributor (its secret is printed once)",
		Args:  cobra.ExactArgs(1),
	}
	name := cmd.Flags().String("name", "", "the key's name (default: contributor <externalId>)")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		var raw json.RawMessage
		if err := c.Do(ctx, "POST", "/v1/contributors/"+url.PathEscape(args[0])+"/keys", map[string]any{"name": *name}, &raw); err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(out, raw)
		}
		var v struct {
			Secret string `json:"secret"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		_, err := fmt.Fprintln(out, v.Secret)
		return err
	})
	return cmd
}

func poolCommand() *cobra.Command {
	return apiCommand("pool", "Read and operate the pools of human steps",
		"List, show, pause, resume and export the pools of human steps over the HTTP API.",
		poolListCommand, poolGetCommand,
		poolMoveCommand("pause", "Pause a pool: no new assignment"),
		poolMoveCommand("resume", "Resume a paused pool"),
		poolExportCommand)
}

type poolRow struct {
	PoolID   string `json:"poolId"`
	Workflow string `json:"workflow"`
	Step     string `json:"step"`
	Task     string `json:"task"`
	Status   string `json:"status"`
	Counts   struct {
		Judgable  int `json:"judgable"`
		Finalized int `json:"finalized"`
		Judgments int `json:"judgments"`
		Active    int `json:"activeAssignments"`
	} `json:"counts"`
}

func printPools(out io.Writer, pools []poolRow) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tWORKFLOW\tSTEP\tTASK\tSTATUS\tJUDGABLE\tFINALIZED\tJUDGMENTS\tACTIVE")
	for _, p := range pools {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", p.PoolID, p.Workflow, p.Step, p.Task, p.Status,
			p.Counts.Judgable, p.Counts.Finalized, p.Counts.Judgments, p.Counts.Active)
	}
	return tw.Flush()
}

func poolListCommand(run runFunc, output *string, _ *apiFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "list", Short: "List pools, newest first", Args: cobra.NoArgs}
	workflow := cmd.Flags().String("workflow", "", "only this workflow's pools")
	step := cmd.Flags().String("step", "", "only this step's pools")
	status := cmd.Flags().String("status", "", "only pools in these statuses (comma-separated)")
	cursor := cmd.Flags().String("cursor", "", "the next-page cursor of a previous list")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, _ []string) error {
		q := url.Values{}
		for k, v := range map[string]string{"workflow": *workflow, "step": *step, "status": *status, "cursor": *cursor} {
			if v != "" {
				q.Set(k, v)
			}
		}
		path := "/v1/pools"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		var raw json.RawMessage
		if err := c.Do(ctx, "GET", path, nil, &raw); err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(out, raw)
		}
		var page struct {
			Items      []poolRow `json:"items"`
			NextCursor *string   `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
		if err := printPools(out, page.Items); err != nil {
			return err
		}
		if page.NextCursor != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "more pools: add --cursor %s\n", *page.NextCursor)
		}
		return nil
	})
	return cmd
}

func poolGetCommand(run runFunc, _ *string, _ *apiFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "get POOL_ID", Short: "Show a pool with its counters", Args: cobra.ExactArgs(1)}
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		var raw json.RawMessage
		if err := c.Do(ctx, "GET", "/v1/pools/"+url.PathEscape(args[0]), nil, &raw); err != nil {
			return err
		}
		return writeJSON(out, raw)
	})
	return cmd
}

func poolMoveCommand(verb, short string) func(runFunc, *string, *apiFlags) *cobra.Command {
	return func(run runFunc, output *string, _ *apiFlags) *cobra.Command {
		cmd := &cobra.Command{Use: verb + " POOL_ID", Short: short, Args: cobra.ExactArgs(1)}
		cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
			var raw json.RawMessage
			if err := c.Do(ctx, "POST", "/v1/pools/"+url.PathEscape(args[0])+"/"+verb, nil, &raw); err != nil {
				return err
			}
			if *output == "json" {
				return writeJSON(out, raw)
			}
			var p poolRow
			if err := json.Unmarshal(raw, &p); err != nil {
				return err
			}
			return printPools(out, []poolRow{p})
		})
		return cmd
	}
}

func poolExportCommand(_ runFunc, _ *string, flags *apiFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export POOL_ID",
		Short: "Stream the results of a pool's finalized units (JSON lines or CSV)",
		Args:  cobra.ExactArgs(1),
	}
	format := cmd.Flags().String("format", "jsonl", "jsonl or csv")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := flags.client()
		if err != nil {
			return err
		}
		key := flags.key
		if key == "" {
			key = os.Getenv("DOCKET_API_KEY")
		}
		path := "/v1/pools/" + url.PathEscape(args[0]) + "/results?format=" + url.QueryEscape(*format)
		req, err := http.NewRequestWithContext(cmd.Context(), "GET", c.BaseURL()+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(res.Body)
			var p struct {
				Title  string `json:"title"`
				Detail string `json:"detail"`
			}
			_ = json.Unmarshal(body, &p)
			return fmt.Errorf("%d %s: %s", res.StatusCode, p.Title, p.Detail)
		}
		_, err = io.Copy(cmd.OutOrStdout(), res.Body)
		return err
	}
	return cmd
}

func crowdCommand() *cobra.Command {
	cmd := apiCommand("crowd", "Simulate crowds of contributors",
		"Tools that drive human work over the HTTP API, and the quality experiment.", crowdSimulateCommand)
	cmd.AddCommand(crowdExperimentCommand())
	return cmd
}

// simTask is what a take answers of the task, enough to answer it.
type simTask struct {
	AssignmentID string `json:"assignmentId"`
	Unit         struct {
		Input map[string]any `json:"input"`
	} `json:"unit"`
	Task struct {
		Fields []struct {
			Name     string `json:"name"`
			Kind     string `json:"kind"`
			Required bool   `json:"required"`
			Options  []struct {
				Value string `json:"value"`
			} `json:"options"`
			Scale int `json:"scale"`
		} `json:"fields"`
	} `json:"task"`
}

func crowdSimulateCommand(run runFunc, _ *string, flags *apiFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "simulate --pool ID",
		Short: "Work a pool with simulated contributors over HTTP",
		Long: "Create N contributors with the pool's skills and channels and a key each (the\n" +
			"--api-key must be an admin's), then let each loop over HTTP: take an assignment,\n" +
			"answer it, submit, until the pool has no unit left for them (or refuses them\n" +
			"work: flagged). Each choice field is answered with the value of the unit input\n" +
			"field named by --truth-field, when the input has one, with probability\n" +
			"--accuracy, and otherwise with another option; without that field, at random.\n" +
			"Rating fields get a random rating; other required fields a fixed answer.\n\n" +
			"--profiles mixes kinds of contributors, as percentages of N summing to 100\n" +
			"(seats by largest remainder, ties to the profile listed first):\n" +
			"  good     right with probability --accuracy (the default: every contributor)\n" +
			"  noisy    right with probability --noisy-accuracy\n" +
			"  spammer  a random option, whatever the truth\n" +
			"  first    always the first option (a bot); rating 1\n" +
			"  fast     a random option, submitted at once (ignores --think)\n" +
			"The others wait --think between taking and submitting. The contributors' external\n" +
			"ids end with their profile when --profiles is given. A take answered 429 (past\n" +
			"the pool's safe rate) is tried again after its Retry-After.",
		Example: "  docket crowd simulate --pool 01J… --contributors 20 --accuracy 0.8\n" +
			"  docket crowd simulate --pool 01J… --contributors 50 --profiles good=70,spammer=20,first=5,fast=5 --think 2s",
		Args: cobra.NoArgs,
	}
	pool := cmd.Flags().String("pool", "", "the pool's id (required)")
	n := cmd.Flags().Int("contributors", 10, "how many simulated contributors")
	accuracy := cmd.Flags().Float64("accuracy", 0.8, "the probability of a correct answer (good profile), in [0,1]")
	noisyAccuracy := cmd.Flags().Float64("noisy-accuracy", 0.6, "the probability of a correct answer of the noisy profile, in [0,1]")
	profiles := cmd.Flags().String("profiles", "", "profile=percent,… of the contributors (good, noisy, spammer, first, fast); default: all good")
	think := cmd.Flags().Duration("think", 0, "how long a contributor (but the fast ones) works on an assignment before submitting")
	truth := cmd.Flags().String("truth-field", "truth", "the unit input field that holds the correct answer (or, for a unit made by a run, its run input's)")
	prefix := cmd.Flags().String("prefix", "", "external id prefix of the contributors (default sim-<time>)")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, _ []string) error {
		var problems []string
		if *pool == "" {
			problems = append(problems, "--pool is required")
		}
		if *n < 1 {
			problems = append(problems, "--contributors must be at least 1")
		}
		if !(*accuracy >= 0 && *accuracy <= 1) {
			problems = append(problems, "--accuracy must be in [0,1]")
		}
		if !(*noisyAccuracy >= 0 && *noisyAccuracy <= 1) {
			problems = append(problems, "--noisy-accuracy must be in [0,1]")
		}
		if *think < 0 {
			problems = append(problems, "--think must not be negative")
		}
		shares, err := parseProfiles(*profiles)
		if err != nil {
			problems = append(problems, err.Error())
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		var p struct {
			Skills   []string `json:"skills"`
			Channels []string `json:"channels"`
		}
		if err := c.Do(ctx, "GET", "/v1/pools/"+url.PathEscape(*pool), nil, &p); err != nil {
			return err
		}
		pre := *prefix
		if pre == "" {
			pre = fmt.Sprintf("sim-%d", time.Now().UnixNano())
		}
		seats := seatProfiles(shares, *n)
		keys := make([]string, *n)
		for i := range keys {
			var made struct {
				ContributorID string `json:"contributorId"`
			}
			channels := []string{}
			if len(p.Channels) > 0 {
				channels = p.Channels[:1]
			}
			external := fmt.Sprintf("%s-%d", pre, i)
			if *profiles != "" {
				external += "-" + seats[i]
			}
			if err := c.Do(ctx, "POST", "/v1/contributors", map[string]any{"externalId": external, "name": "simulated", "skills": p.Skills, "channels": channels}, &made); err != nil {
				return err
			}
			var key struct {
				Secret string `json:"secret"`
			}
			if err := c.Do(ctx, "POST", "/v1/contributors/"+made.ContributorID+"/keys", nil, &key); err != nil {
				return err
			}
			keys[i] = key.Secret
		}
		start := time.Now()
		tally := map[string]*simTally{}
		for _, s := range shares {
			tally[s.name] = &simTally{}
		}
		var judgments, correct atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, len(keys))
		for i, key := range keys {
			wc, err := remote.NewClient(c.BaseURL(), key, nil)
			if err != nil {
				return err
			}
			rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(i)))
			prof := simProfile{name: seats[i], accuracy: *accuracy}
			if prof.name == "noisy" {
				prof.accuracy = *noisyAccuracy
			}
			wait := *think
			if prof.name == "fast" {
				wait = 0
			}
			t := tally[prof.name]
			t.contributors.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					var task simTask
					err := wc.Do(ctx, "POST", "/v1/assignments", map[string]any{"poolId": *pool}, &task)
					var re *remote.Error
					if errors.As(err, &re) && re.Status == http.StatusNotFound {
						return // nothing left for this contributor
					}
					if errors.As(err, &re) && re.Status == http.StatusForbidden {
						t.refused.Add(1) // flagged in the pool: no more work
						return
					}
					if errors.As(err, &re) && re.Status == http.StatusTooManyRequests {
						// Past the pool's safe rate: wait as told, then
						// take again.
						select {
						case <-ctx.Done():
						case <-time.After(max(re.RetryAfter, time.Second)):
						}
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					data, right := simAnswer(&task, *truth, prof, rng)
					if wait > 0 {
						timer := time.NewTimer(wait)
						select {
						case <-ctx.Done():
							timer.Stop()
							return
						case <-timer.C:
						}
					}
					if err := wc.Do(ctx, "POST", "/v1/judgments", map[string]any{"assignmentId": task.AssignmentID, "data": data}, nil); err != nil {
						errs <- err
						return
					}
					judgments.Add(1)
					t.judgments.Add(1)
					if right {
						correct.Add(1)
						t.correct.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		elapsed := time.Since(start)
		fmt.Fprintf(out, "%d contributors submitted %d judgments in %s (%.0f judgments/s), %d matching the truth field\n",
			len(keys), judgments.Load(), elapsed.Round(time.Millisecond), float64(judgments.Load())/elapsed.Seconds(), correct.Load())
		if *profiles != "" {
			for _, s := range shares {
				t := tally[s.name]
				fmt.Fprintf(out, "  %s: %d contributors, %d judgments, %d matching the truth field, %d refused work\n",
					s.name, t.contributors.Load(), t.judgments.Load(), t.correct.Load(), t.refused.Load())
			}
		}
		var all []string
		for err := range errs {
			all = append(all, err.Error())
		}
		if len(all) > 0 {
			return fmt.Errorf("%d contributors stopped on an error: %s", len(all), strings.Join(all, "; "))
		}
		return nil
	})
	return cmd
}

// simTally counts what the contributors of one profile did.
type simTally struct {
	contributors, judgments, correct, refused atomic.Int64
}

// simProfiles are the kinds of simulated contributors, in the order the
// summary lists them.
var simProfiles = []string{"good", "noisy", "spammer", "first", "fast"}

// simShare is one profile's percentage of the contributors.
type simShare struct {
	name    string
	percent int
}

// parseProfiles reads --profiles: profile=percent pairs, comma-separated,
// each profile once, whole percentages summing to 100; "" is good=100. An
// error names every problem.
func parseProfiles(s string) ([]simShare, error) {
	if strings.TrimSpace(s) == "" {
		return []simShare{{"good", 100}}, nil
	}
	var out []simShare
	var problems []string
	seen := map[string]bool{}
	sum := 0
	for _, part := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		pct, err := strconv.Atoi(strings.TrimSpace(value))
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%q is not profile=percent", part))
			continue
		case !slices.Contains(simProfiles, name):
			problems = append(problems, fmt.Sprintf("unknown profile %q (want %s)", name, strings.Join(simProfiles, ", ")))
		case seen[name]:
			problems = append(problems, fmt.Sprintf("profile %s given twice", name))
		}
		seen[name] = true
		if err != nil || pct < 0 || pct > 100 {
			problems = append(problems, fmt.Sprintf("%s: the percentage %q is not a whole number from 0 to 100", name, value))
			continue
		}
		sum += pct
		out = append(out, simShare{name, pct})
	}
	if len(problems) == 0 && sum != 100 {
		problems = append(problems, fmt.Sprintf("the percentages sum to %d, not 100", sum))
	}
	if len(problems) > 0 {
		return nil, usageErrorf("--profiles: %s", strings.Join(problems, "; "))
	}
	return out, nil
}

// seatProfiles gives each of n contributors a profile: each share gets the
// whole part of percent·n/100, the seats left go to the largest
// remainders (ties to the share listed first). Contributor i gets the
// i-th seat, shares in the order given.
func seatProfiles(shares []simShare, n int) []string {
	seats := make([]int, len(shares))
	given := 0
	for i, s := range shares {
		seats[i] = s.percent * n / 100
		given += seats[i]
	}
	order := make([]int, len(shares))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(shares[b].percent*n%100, shares[a].percent*n%100)
	})
	for k := 0; given < n; k++ {
		seats[order[k%len(order)]]++
		given++
	}
	out := make([]string, 0, n)
	for i, s := range shares {
		for range seats[i] {
			out = append(out, s.name)
		}
	}
	return out
}

// simProfile is how one simulated contributor answers.
type simProfile struct {
	name     string
	accuracy float64 // good and noisy
}

// simAnswer answers every field of the task as the profile does; right
// says whether a choice answer matched the truth field.
func simAnswer(t *simTask, truthField string, prof simProfile, rng *rand.Rand) (map[string]any, bool) {
	data := map[string]any{}
	right := false
	truth, hasTruth := t.Unit.Input[truthField].(string)
	if run, ok := t.Unit.Input["input"].(map[string]any); ok && !hasTruth {
		// A unit made by a run: {"input": <run input>, "steps": …}.
		truth, hasTruth = run[truthField].(string)
	}
	for _, f := range t.Task.Fields {
		switch f.Kind {
		case "choice":
			if len(f.Options) == 0 {
				continue
			}
			pick := f.Options[rng.IntN(len(f.Options))].Value
			switch prof.name {
			case "first":
				pick = f.Options[0].Value
			case "spammer", "fast":
			default:
				if hasTruth {
					if rng.Float64() < prof.accuracy {
						pick = truth
					} else if len(f.Options) > 1 {
						for pick == truth {
							pick = f.Options[rng.IntN(len(f.Options))].Value
						}
					}
				}
			}
			right = right || (hasTruth && pick == truth)
			data[f.Name] = pick
		case "rating":
			if prof.name == "first" {
				data[f.Name] = 1
			} else {
				data[f.Name] = 1 + rng.IntN(max(f.Scale, 1))
			}
		case "number":
			if f.Required {
				data[f.Name] = 0
			}
		case "text":
			if f.Required {
				data[f.Name] = "sim"
			}
		case "multi_choice":
			if f.Required {
				data[f.Name] = []string{}
			}
		case "bbox":
			if f.Required {
				data[f.Name] = []any{}
			}
		}
	}
	return data, right
}
