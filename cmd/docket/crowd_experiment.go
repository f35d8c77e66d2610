package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/quality"
)

// `docket crowd experiment` is issue 14's experiment (docs/quality.md,
// "The experiment"): one pool of units with a known truth, worked by
// simulated contributors with quality control off and then on, in this
// process, against a database of its own. Everything random comes from
// --seed and the clock is simulated, so a run is reproducible.

// qcThinkDefault is the simulated time from take to submit.
const qcThinkDefault = 10 * time.Second

// qcExperimentConfig is one experiment.
type qcExperimentConfig struct {
	DatabaseURL   string // "" : a SQLite file in a temporary directory
	Units         int
	Golden        int // test questions of the QC-on pool
	Contributors  int
	Profiles      string // --profiles of crowd simulate
	Accuracy      float64
	NoisyAccuracy float64
	Options       int // of the choice field
	Min, Max      int
	Target        float64
	Quality       string // the QC-on pool's quality object ("{}": the defaults)
	EstimateEvery int    // judgments between two pool estimates (the leader's service)
	Think         time.Duration
	Seed          uint64
}

// qcRun is what one mode (QC off or on) gave.
type qcRun struct {
	Mode             string         `json:"mode"`
	Units            int            `json:"units"`
	Correct          int            `json:"correct"`
	NotFinal         int            `json:"notFinal"`
	Accuracy         float64        `json:"accuracy"`
	RegularJudgments int            `json:"regularJudgments"` // every judgment of a regular unit, tainted ones too
	PerUnit          float64        `json:"judgmentsPerUnit"`
	TestJudgments    int            `json:"testJudgments"`
	Tainted          int            `json:"tainted"`
	LowConfidence    int            `json:"lowConfidence"` // finalized under the target
	Flagged          map[string]int `json:"flagged"`       // by profile
	Seats            map[string]int `json:"seats"`         // by profile
	// Tests and Regular count, by profile, the judgments of test
	// questions and of regular units (tainted or not).
	Tests   map[string]int `json:"tests"`
	Regular map[string]int `json:"regular"`
	// UntilFlagged: per profile, each flagged contributor's judgments
	// (test questions and regular units) submitted before the flag,
	// ascending.
	UntilFlagged map[string][]int `json:"untilFlagged"`
	// Audits counts the changes of finalized results written by repairs
	// (audit rows): Reopened units, Recomputed ones, and among those the
	// recomputations whose answer changed (not only the confidence).
	Audits, Reopened, Recomputed, AnswerChanged int
	// Fixed: units whose result was wrong before their first repair and
	// is right at the end; Broken: right before, wrong at the end.
	Fixed, Broken int
	Seconds       float64 `json:"seconds"`
}

func crowdExperimentCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "experiment",
		Short: "Quality control off against on: accuracy, cost, flags and repairs on simulated contributors",
		Long: "Run issue 14's experiment (docs/quality.md): a pool of --units units with a known\n" +
			"truth (a choice field of --options options, the truth uniform), judgments per unit\n" +
			"--min to --max with dynamic overlap to --target, worked by --contributors simulated\n" +
			"contributors (--profiles as for crowd simulate), once with quality control off (no\n" +
			"test questions, minTrust 0) and once on (--golden test questions, the pool's\n" +
			"--quality settings; {} is the defaults). It runs in this process against its own\n" +
			"database (a temporary SQLite file unless --database-url), one contributor's\n" +
			"assignment at a time in a seeded order, with a simulated clock; the pool's models\n" +
			"are re-estimated every --estimate-every judgments, as the leader's pool-estimator\n" +
			"would. The same --seed gives the same table.",
		Example: "  docket crowd experiment --units 2000 --seed 1",
		Args:    cobra.NoArgs,
	}
	var c qcExperimentConfig
	f := cmd.Flags()
	f.StringVar(&c.DatabaseURL, "database-url", "", "database: postgres://… or sqlite:PATH (default: a temporary SQLite file)")
	f.IntVar(&c.Units, "units", 2000, "regular units, each with a known truth")
	f.IntVar(&c.Golden, "golden", 100, "test questions of the QC-on pool")
	f.IntVar(&c.Contributors, "contributors", 100, "simulated contributors")
	f.StringVar(&c.Profiles, "profiles", "good=70,spammer=10,first=10,fast=10", "profile=percent,… (good, noisy, spammer, first, fast)")
	f.Float64Var(&c.Accuracy, "accuracy", 0.8, "the probability of a correct answer of the good profile")
	f.Float64Var(&c.NoisyAccuracy, "noisy-accuracy", 0.6, "the same for the noisy profile")
	f.IntVar(&c.Options, "options", 3, "options of the choice field (2–26)")
	f.IntVar(&c.Min, "min", 3, "judgmentsPerUnit.min")
	f.IntVar(&c.Max, "max", 7, "judgmentsPerUnit.max")
	f.Float64Var(&c.Target, "target", 0.9, "judgmentsPerUnit.targetConfidence")
	f.StringVar(&c.Quality, "quality", "{}", "the QC-on task's quality object")
	f.IntVar(&c.EstimateEvery, "estimate-every", 300, "judgments between two estimates of the pool's models")
	f.DurationVar(&c.Think, "think", qcThinkDefault, "simulated time from take to submit (the fast profile: 1s)")
	f.Uint64Var(&c.Seed, "seed", 1, "the seed of every random choice")
	asJSON := f.Bool("json", false, "print the two runs as JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		runs, err := runQCExperiment(cmd.Context(), c, cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(runs)
		}
		return printQCRuns(cmd.OutOrStdout(), runs)
	}
	return cmd
}

// runQCExperiment runs the experiment with QC off, then on.
func runQCExperiment(ctx context.Context, c qcExperimentConfig, log io.Writer) ([]*qcRun, error) {
	var problems []string
	if c.Units < 1 || c.Contributors < 1 || c.Golden < 0 {
		problems = append(problems, "--units and --contributors must be positive, --golden not negative")
	}
	if c.Options < 2 || c.Options > 26 {
		problems = append(problems, "--options must be 2–26")
	}
	if c.EstimateEvery < 1 {
		problems = append(problems, "--estimate-every must be positive")
	}
	shares, err := parseProfiles(c.Profiles)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	url := c.DatabaseURL
	if url == "" {
		dir, err := os.MkdirTemp("", "docket-experiment-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		url = "sqlite:" + filepath.Join(dir, "experiment.db")
	}
	var runs []*qcRun
	for _, on := range []bool{false, true} {
		r, err := runQCMode(ctx, c, shares, url, on)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "%s: accuracy %.4f, %.2f judgments per unit, %.1fs\n", r.Mode, r.Accuracy, r.PerUnit, r.Seconds)
		runs = append(runs, r)
	}
	return runs, nil
}

// runQCMode makes a task, workflow and pool of its own (named by the mode
// and a fresh id, so runs can share a database) and works it.
func runQCMode(ctx context.Context, c qcExperimentConfig, shares []simShare, url string, on bool) (*qcRun, error) {
	start := time.Now()
	mode := "QC off"
	settings := `{"quizSize": 0, "testEvery": 0, "minTrust": 0}`
	if on {
		mode, settings = "QC on", c.Quality
	}
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true, TakeStrategy: docket.TakeOrdered,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:    func() time.Time { return time.Unix(0, clock.Load()).UTC() }})
	if err != nil {
		return nil, err
	}
	defer client.Close()

	options := make([]string, c.Options)
	var opts []string
	for i := range options {
		options[i] = string(rune('a' + i))
		opts = append(opts, fmt.Sprintf(`{"value": %q}`, options[i]))
	}
	name := "qc-experiment-" + strings.ReplaceAll(strings.ToLower(mode), " ", "-") + "-" + uuid.NewString()[:8]
	tmpl, err := docket.ParseTask(fmt.Appendf(nil, `{"title": "Which class?", "fields": [{"name": "class", "kind": "choice", "required": true,
		"options": [%s]}], "judgmentsPerUnit": {"min": %d, "max": %d, "targetConfidence": %g}, "quality": %s}`,
		strings.Join(opts, ", "), c.Min, c.Max, c.Target, settings))
	if err != nil {
		return nil, fmt.Errorf("task: %w", err)
	}
	if _, _, err := client.TaskPut(ctx, name, tmpl); err != nil {
		return nil, err
	}
	wf, err := docket.DecodeWorkflow(fmt.Appendf(nil, `{"name": %q, "steps": [{"name": "label", "human": {"task": %q}}]}`, name, name))
	if err != nil {
		return nil, err
	}
	if _, _, err := client.WorkflowPut(ctx, wf); err != nil {
		return nil, err
	}
	pool, _, err := client.PoolEnsure(ctx, name, 1, "label", name)
	if err != nil {
		return nil, err
	}

	// The truth, the same in both modes: one generator for the units, one
	// for the contributors' answers, one for the order of work.
	truthRNG := rand.New(rand.NewPCG(c.Seed, 1))
	truth := map[uuid.UUID]string{}
	inputs := make([]json.RawMessage, c.Units)
	classes := make([]string, c.Units)
	for i := range inputs {
		classes[i] = options[truthRNG.IntN(len(options))]
		inputs[i] = fmt.Appendf(nil, `{"item": %d}`, i)
	}
	for i := 0; i < c.Units; i += 500 {
		units, err := client.UnitsAdd(ctx, pool.ID, inputs[i:min(i+500, c.Units)])
		if err != nil {
			return nil, err
		}
		for k, u := range units {
			truth[u.ID] = classes[i+k]
		}
	}
	regular := len(truth)
	if on && c.Golden > 0 {
		golden := make([]docket.GoldenUnit, c.Golden)
		classes := make([]string, c.Golden)
		for i := range golden {
			classes[i] = options[truthRNG.IntN(len(options))]
			golden[i] = docket.GoldenUnit{Input: fmt.Appendf(nil, `{"item": %d}`, c.Units+i), Answer: fmt.Appendf(nil, `{"class": %q}`, classes[i])}
		}
		units, err := client.GoldenAdd(ctx, pool.ID, golden)
		if err != nil {
			return nil, err
		}
		for k, u := range units {
			truth[u.ID] = classes[k]
		}
	}

	type member struct {
		id        uuid.UUID
		profile   simProfile
		submitted int
		flagged   bool
	}
	seats := seatProfiles(shares, c.Contributors)
	members := make([]*member, len(seats))
	r := &qcRun{Mode: mode, Units: regular, Flagged: map[string]int{}, Seats: map[string]int{}, UntilFlagged: map[string][]int{},
		Tests: map[string]int{}, Regular: map[string]int{}}
	for i, p := range seats {
		who, err := client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: fmt.Sprintf("%s-%03d-%s", name, i, p)})
		if err != nil {
			return nil, err
		}
		acc := c.Accuracy
		if p == "noisy" {
			acc = c.NoisyAccuracy
		}
		members[i] = &member{id: who.ID, profile: simProfile{name: p, accuracy: acc}}
		r.Seats[p]++
	}
	answerRNG := rand.New(rand.NewPCG(c.Seed, 2))
	orderRNG := rand.New(rand.NewPCG(c.Seed, 3))
	task := &simTask{}
	task.Task.Fields = append(task.Task.Fields, struct {
		Name     string `json:"name"`
		Kind     string `json:"kind"`
		Required bool   `json:"required"`
		Options  []struct {
			Value string `json:"value"`
		} `json:"options"`
		Scale int `json:"scale"`
	}{Name: "class", Kind: "choice", Required: true})
	for _, o := range options {
		task.Task.Fields[0].Options = append(task.Task.Fields[0].Options, struct {
			Value string `json:"value"`
		}{o})
	}

	// Work: a contributor picked at random among those not refused and not
	// told "nothing left" takes one assignment and answers it. When all
	// are idle, everyone not flagged tries once more (a flag reopens
	// units); the run ends when a whole such sweep takes nothing.
	idle := map[int]bool{}
	judgments, tookSinceSweep := 0, true
	for {
		var ready []int
		for i, m := range members {
			if !m.flagged && !idle[i] {
				ready = append(ready, i)
			}
		}
		if len(ready) == 0 {
			if !tookSinceSweep {
				break
			}
			tookSinceSweep = false
			clear(idle)
			continue
		}
		i := ready[orderRNG.IntN(len(ready))]
		m := members[i]
		taken, err := client.AssignmentTake(ctx, pool.ID, m.id)
		var ne *docket.NotEligibleError
		switch {
		case docket.IsNoUnit(err):
			idle[i] = true
			continue
		case errors.As(err, &ne):
			m.flagged = true
			r.Flagged[m.profile.name]++
			r.UntilFlagged[m.profile.name] = append(r.UntilFlagged[m.profile.name], m.submitted)
			continue
		case err != nil:
			return nil, fmt.Errorf("take: %w", err)
		}
		tookSinceSweep = true
		task.Unit.Input = map[string]any{"class": truth[taken.Unit.ID]}
		data, _ := simAnswer(task, "class", m.profile, answerRNG)
		body, err := json.Marshal(data)
		if err != nil {
			return nil, err
		}
		think := c.Think
		if m.profile.name == "fast" {
			think = time.Second
		}
		clock.Add(int64(think))
		if _, err := client.JudgmentSubmit(ctx, taken.Assignment.ID, m.id, body); err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
		m.submitted++
		if taken.Unit.Golden {
			r.Tests[m.profile.name]++
		} else {
			r.Regular[m.profile.name]++
		}
		judgments++
		if judgments%c.EstimateEvery == 0 {
			p, err := client.PoolGet(ctx, pool.ID)
			if err != nil {
				return nil, err
			}
			if _, err := client.PoolEstimate(ctx, p, false); err != nil {
				return nil, err
			}
		}
	}
	// A contributor flagged by their last judgment is not refused a take
	// above: read every standing.
	for _, m := range members {
		if m.flagged {
			continue
		}
		st, err := client.ContributorQualityGet(ctx, pool.ID, m.id)
		if err != nil {
			return nil, err
		}
		if st.Standing.Flagged {
			r.Flagged[m.profile.name]++
			r.UntilFlagged[m.profile.name] = append(r.UntilFlagged[m.profile.name], m.submitted)
		}
	}
	for _, v := range r.UntilFlagged {
		slices.Sort(v)
	}

	var before uuid.UUID
	for {
		units, err := client.UnitList(ctx, pool.ID, docket.UnitListParams{Before: before, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, u := range units {
			js, err := client.JudgmentList(ctx, u.ID)
			if err != nil {
				return nil, err
			}
			if u.Golden {
				r.TestJudgments += len(js)
				continue
			}
			r.RegularJudgments += len(js)
			for _, j := range js {
				if j.Tainted {
					r.Tainted++
				}
			}
			right := u.State == docket.UnitFinalized && answerOf(u.Result) == truth[u.ID]
			if u.State != docket.UnitFinalized {
				r.NotFinal++
			} else if u.Confidence != nil && *u.Confidence < c.Target {
				r.LowConfidence++
			}
			if right {
				r.Correct++
			}
			audits, err := client.UnitAudits(ctx, u.ID)
			if err != nil {
				return nil, err
			}
			for _, a := range audits {
				r.Audits++
				if a.Action == quality.RepairReopen {
					r.Reopened++
				} else {
					r.Recomputed++
					if answerOf(a.Old.Value) != answerOf(a.New.Value) {
						r.AnswerChanged++
					}
				}
			}
			if len(audits) > 0 {
				wasRight := answerOf(audits[0].Old.Value) == truth[u.ID]
				switch {
				case !wasRight && right:
					r.Fixed++
				case wasRight && !right:
					r.Broken++
				}
			}
		}
		if len(units) < 1000 {
			break
		}
		before = units[len(units)-1].ID
	}
	r.Accuracy = float64(r.Correct) / float64(regular)
	r.PerUnit = float64(r.RegularJudgments) / float64(regular)
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// answerOf is the class of a result ({"class": "a"}); "" for none.
func answerOf(result json.RawMessage) string {
	var v struct {
		Class string `json:"class"`
	}
	_ = json.Unmarshal(result, &v)
	return v.Class
}

// printQCRuns prints the runs side by side.
func printQCRuns(out io.Writer, runs []*qcRun) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(label string, f func(r *qcRun) string) {
		fmt.Fprint(tw, label)
		for _, r := range runs {
			fmt.Fprint(tw, "\t", f(r))
		}
		fmt.Fprintln(tw)
	}
	row("", func(r *qcRun) string { return r.Mode })
	row("accuracy", func(r *qcRun) string { return fmt.Sprintf("%.2f%% (%d/%d)", 100*r.Accuracy, r.Correct, r.Units) })
	row("units not finalized", func(r *qcRun) string { return fmt.Sprint(r.NotFinal) })
	row("judgments per unit (regular)", func(r *qcRun) string { return fmt.Sprintf("%.2f (%d)", r.PerUnit, r.RegularJudgments) })
	row("  of them tainted", func(r *qcRun) string { return fmt.Sprint(r.Tainted) })
	row("test judgments (QC overhead)", func(r *qcRun) string {
		return fmt.Sprintf("%d (%.2f per unit)", r.TestJudgments, float64(r.TestJudgments)/float64(r.Units))
	})
	for _, p := range simProfiles {
		if runs[0].Seats[p] == 0 {
			continue
		}
		row("judgments of "+p+": regular / tests", func(r *qcRun) string {
			return fmt.Sprintf("%d / %d (%.1f / %.1f each)", r.Regular[p], r.Tests[p],
				float64(r.Regular[p])/float64(r.Seats[p]), float64(r.Tests[p])/float64(r.Seats[p]))
		})
	}
	row("all judgments per unit", func(r *qcRun) string {
		return fmt.Sprintf("%.2f", float64(r.RegularJudgments+r.TestJudgments)/float64(r.Units))
	})
	row("finalized under the target", func(r *qcRun) string { return fmt.Sprint(r.LowConfidence) })
	for _, p := range simProfiles {
		if runs[0].Seats[p] == 0 {
			continue
		}
		row("flagged: "+p, func(r *qcRun) string {
			s := fmt.Sprintf("%d/%d", r.Flagged[p], r.Seats[p])
			if v := r.UntilFlagged[p]; len(v) > 0 {
				s += fmt.Sprintf(" after %d–%d judgments (median %d)", v[0], v[len(v)-1], v[len(v)/2])
			}
			return s
		})
	}
	row("finalized results changed (audits)", func(r *qcRun) string {
		return fmt.Sprintf("%d: %d reopened, %d recomputed (%d new answers)", r.Audits, r.Reopened, r.Recomputed, r.AnswerChanged)
	})
	row("  wrong → right / right → wrong", func(r *qcRun) string { return fmt.Sprintf("%d / %d", r.Fixed, r.Broken) })
	row("seconds", func(r *qcRun) string { return fmt.Sprintf("%.0f", r.Seconds) })
	return tw.Flush()
}
