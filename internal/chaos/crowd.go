package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/crowdcheck"
	"github.com/docket-run/docket/internal/flow"
)

// Human work in the chaos run: runs of HumanShape, whose "label" step is
// done by simulated contributors — goroutines of the run, each with a
// contributor API key of its own, working over HTTP against the serve
// processes that the faults kill. Each assignment they take they mostly
// judge, and sometimes judge twice (the same judgment must come back),
// send invalid data first (422, then the valid answer), give back
// (release), abandon (the reaper must free the slot) or hold past its
// expiry before judging (409: too late). Requests cut by a kill are sent
// again to the next server; a take whose answer was lost leaves an
// assignment nobody knows of, which the reaper frees like an abandoned
// one.

// Human work constants.
const (
	// HumanTask is the chaos run's task template.
	HumanTask = "chaos-label"
	// HumanJudgments is its judgments per unit.
	HumanJudgments = 3
	// humanAssignment is its assignment duration: the shortest a task
	// may have.
	humanAssignment = 30 * time.Second
	// Contributors is how many simulated contributors work.
	Contributors = 16
	// reapWindow: how long past its expiry an assignment may stay
	// ACTIVE. The reaper runs every AssignmentReapIntervalDefault on the
	// maintenance leader (a serve or a Go worker, whose leadership lasts
	// a second in the run); a pause or a kill of the leader delays it by
	// a term.
	reapWindow = docket.AssignmentReapIntervalDefault + 5*time.Second
)

// Quality control in the chaos run (docs/quality.md): the pool holds
// GoldenUnits test questions; a contributor's 3rd, 6th, … assignments
// are test questions, no quiz, so that spammers judge regular units
// before their first test (every assignment is one while suspect); two
// answered, an accuracy under 0.8 with probability 0.9 flags them. Honest contributors answer
// what the unit's input says is right (test questions too), spammers at
// random (a third right: the field has three options, the right answer
// is never the third; every other spammer is a bot always on the third,
// flagged at its second test question however short the run): a spammer with two
// wrong answers and no more right ones than wrong is flagged (a miss on
// the first makes them suspect, tested until flagged or cleared; one
// who answered it right goes on with regular units until their tests
// go wrong). The pool's minimum is stricter than the default (0.6 with
// probability 0.95, which a random clicker rarely reaches within a short
// run) so that every short run flags, repairs and
// forgives: their judgments tainted and the units they judged repaired —
// reopened, recomputed — while processes are killed; an admin forgives
// one now and then (forgiver), and they may be flagged again after two
// more test questions.
const (
	// Spammers is how many of the Contributors answer at random: the
	// last ones.
	Spammers = 4
	// GoldenUnits is how many test questions the pool holds.
	GoldenUnits = 8
)

const humanTemplate = `{"title": "Which is it?",
 "instructions": "Pick a or b.",
 "fields": [{"name": "pick", "kind": "choice", "required": true, "options": [{"value": "a"}, {"value": "b"}, {"value": "c"}]}],
 "judgmentsPerUnit": {"min": 3}, "assignmentSeconds": 30,
 "quality": {"quizSize": 0, "testEvery": 3, "minTests": 2, "minTrust": 0.8, "certainty": 0.9}}`

// spammer reports whether contributor n answers at random.
func spammer(n int) bool { return n >= Contributors-Spammers }

// HumanShape is the workflow of the human runs: fetch (a job) → label
// (a human step, 3 judgments per unit) → ship (a job, given the label's
// aggregated answer).
var HumanShape = Shape{Name: "chaos_human", Want: flow.RunSucceeded, def: func() (*docket.WorkflowDefinition, error) {
	return docket.NewWorkflow("chaos_human").
		Job("fetch", StepType, docket.StepQueue(Queue)).
		Human("label", HumanTask, docket.After("fetch")).
		Job("ship", StepType, docket.StepQueue(Queue), docket.After("label")).
		Definition()
}}

// CrowdReport is what the simulated contributors did, as they saw it.
type CrowdReport struct {
	Takes      int // assignments taken (201)
	Judgments  int // judgments accepted (202, or 200 for a resend after a lost answer)
	Repeats    int // judgments sent twice on purpose, answered 200 with the same judgment
	Invalid    int // invalid judgments refused 422 (then sent valid)
	Releases   int // assignments given back
	Abandoned  int // assignments left to expire
	LateRefuse int // judgments sent after the assignment expired, refused 409
	Cut        int // requests cut by a kill, refused by a server that was down or answered 5xx while the database restarted: sent again
	// CutCommitted and CutLost are the judgments whose first send was
	// cut: committed before the cut (the resend was answered 200 with
	// the stored judgment) or not (202).
	CutCommitted, CutLost int
	// KillsDuringWork counts kill_serve faults aimed at a server while a
	// contributor's request was in flight on it, or while a contributor
	// was between a take it answered and the judgment or release.
	KillsDuringWork int
	// KillsMidJudgment counts kill_serve_judging faults that caught a
	// judgment as it was sent.
	KillsMidJudgment int
	// Refused counts takes refused 403 to a flagged spammer; Forgives
	// the forgivenesses an admin sent (of a spammer, flagged or not:
	// one not flagged is left as they are).
	Refused, Forgives int
	// Flags, Unflags and ResultChanges are read from the outbox after
	// the run: contributor.flagged, contributor.unflagged and
	// unit.result_changed; Tainted counts the tainted judgments.
	Flags, Unflags, ResultChanges, Tainted int
}

func (c *CrowdReport) String() string {
	return fmt.Sprintf("%d takes, %d judgments (%d sent twice on purpose, same judgment back), %d invalid refused 422, %d released, %d abandoned, %d late refused 409; %d requests cut (server killed or down, or PostgreSQL restarting) and sent again, among them %d judgments (%d had committed: 200 on the resend; %d had not: 202); %d kill_serve faults aimed at a server in the middle of a contributor's take → judgment, %d kill_serve_judging faults that caught a judgment as it was sent; quality control: %d flags, %d forgivenesses sent, %d un-flags, %d takes refused to a flagged spammer, %d judgments tainted, %d finalized results changed",
		c.Takes, c.Judgments, c.Repeats, c.Invalid, c.Releases, c.Abandoned, c.LateRefuse, c.Cut, c.CutCommitted+c.CutLost, c.CutCommitted, c.CutLost, c.KillsDuringWork, c.KillsMidJudgment,
		c.Flags, c.Forgives, c.Unflags, c.Refused, c.Tainted, c.ResultChanges)
}

// crowdSim is the simulated contributors.
type crowdSim struct {
	r        *run
	secrets  []string
	ids      []string       // the contributors' ids, by number
	pool     uuid.UUID      // the label step's pool
	inflight []atomic.Int32 // requests in flight by server
	// working counts, by server, the contributors between a take it
	// answered and their judgment or release (sent to it unless it is
	// cut): a kill there cuts the assignment's work in the middle.
	working []atomic.Int32
	// judging hands the server of a judgment being sent to the
	// kill_serve_judging fault waiting for one (never blocks a sender).
	judging chan int
	// until is when abandons and late judgments stop: their slots must
	// come back (one assignment duration and a reap later) while the
	// phase lasts.
	until time.Time

	mu sync.Mutex
	// refused are the spammers refused work (403): flagged, as far as
	// the admin knows; the forgiver picks among them.
	refused   map[int]bool
	rep       CrowdReport
	surprises []Violation
	stop      context.CancelFunc
	wg        sync.WaitGroup
}

// KindCrowdAnswer is an answer a contributor got that the API promises
// never to give: a late judgment accepted, a repeated judgment answered
// with another one, a 5xx that did not go away.
const KindCrowdAnswer = "crowd_answer"

// putHuman stores the task and the workflow of the human runs and makes
// the contributors and their keys (before any fault).
func (r *run) putHuman(ctx context.Context) error {
	tmpl, err := docket.ParseTask([]byte(humanTemplate))
	if err != nil {
		return err
	}
	if _, _, err := r.client.TaskPut(ctx, HumanTask, tmpl); err != nil {
		return fmt.Errorf("put task %s: %w", HumanTask, err)
	}
	def, err := HumanShape.def()
	if err != nil {
		return err
	}
	v, _, err := r.client.WorkflowPut(ctx, def)
	if err != nil {
		return fmt.Errorf("put workflow %s: %w", HumanShape.Name, err)
	}
	// The label step's pool, made now to hold the test questions.
	pool, _, err := r.client.PoolEnsure(ctx, HumanShape.Name, v.Version, "label", HumanTask)
	if err != nil {
		return fmt.Errorf("make the pool of %s: %w", HumanShape.Name, err)
	}
	golden := make([]docket.GoldenUnit, GoldenUnits)
	for i := range golden {
		right := rightAnswer(r.cfg.Seed, 1000+i)
		golden[i] = docket.GoldenUnit{Input: json.RawMessage(fmt.Sprintf(`{"input": {"right": %q, "golden": %d}}`, right, i)),
			Answer: json.RawMessage(fmt.Sprintf(`{"pick": %q}`, right))}
	}
	if _, err := r.client.GoldenAdd(ctx, pool.ID, golden); err != nil {
		return fmt.Errorf("add test questions: %w", err)
	}
	r.crowd = &crowdSim{r: r, pool: pool.ID, refused: map[int]bool{}, inflight: make([]atomic.Int32, len(r.servers)), working: make([]atomic.Int32, len(r.servers)), judging: make(chan int)}
	for i := range Contributors {
		var who struct {
			ContributorID string `json:"contributorId"`
		}
		body, _ := json.Marshal(map[string]any{"externalId": fmt.Sprintf("chaos-%d-%d", r.cfg.Seed, i), "name": fmt.Sprintf("contributor %d", i)})
		if err := r.call("POST", "/v1/contributors", body, i, &who, http.StatusCreated); err != nil {
			return fmt.Errorf("create contributor %d: %w", i, err)
		}
		var key struct {
			Secret string `json:"secret"`
		}
		if err := r.call("POST", "/v1/contributors/"+who.ContributorID+"/keys", []byte(`{"name": "chaos"}`), i, &key, http.StatusCreated); err != nil {
			return fmt.Errorf("key of contributor %d: %w", i, err)
		}
		r.crowd.secrets = append(r.crowd.secrets, key.Secret)
		r.crowd.ids = append(r.crowd.ids, who.ContributorID)
	}
	return nil
}

// rightAnswer is the right answer of the i-th human run's unit (or test
// question), by the seed.
func rightAnswer(seed uint64, i int) string {
	return []string{"a", "b"}[mrand.New(mrand.NewPCG(seed, 5000+uint64(i))).IntN(2)]
}

// rightOf reads the right answer from a unit's input ({"input":
// {"right": …}}): what an honest contributor answers.
func rightOf(input json.RawMessage) string {
	var in struct {
		Input struct {
			Right string `json:"right"`
		} `json:"input"`
	}
	if json.Unmarshal(input, &in) != nil {
		return ""
	}
	return in.Input.Right
}

// humanSpan is the part of the phase in which human runs start and
// contributors abandon assignments or judge late: what they hold comes
// back an assignment duration and a reap later, and the runs must finish
// soon after the phase.
func (r *run) humanSpan() time.Duration {
	return max(r.cfg.Duration-humanAssignment-reapWindow, r.cfg.Duration/3)
}

// submitHumanRuns starts cfg.HumanRuns runs of HumanShape spread over the
// human span.
func (r *run) submitHumanRuns(ctx context.Context) error {
	if r.cfg.HumanRuns == 0 {
		return nil
	}
	rnd := mrand.New(mrand.NewPCG(r.cfg.Seed, 4))
	gap := r.humanSpan() / time.Duration(r.cfg.HumanRuns+1)
	var wg sync.WaitGroup
	errs := make(chan error, r.cfg.HumanRuns)
	start := time.Now()
	for i := range r.cfg.HumanRuns {
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		in := runInput{MS: 5 + rnd.IntN(60), Right: rightAnswer(r.cfg.Seed, i)}
		key := fmt.Sprintf("chaos-human-%d-%d", r.cfg.Seed, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.startRun(HumanShape, in, key); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// startWork starts the contributors; stopWork stops them.
func (c *crowdSim) startWork(ctx context.Context) {
	ctx, c.stop = context.WithCancel(ctx)
	c.until = time.Now().Add(c.r.humanSpan())
	for i, secret := range c.secrets {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.work(ctx, i, secret)
		}()
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.forgiver(ctx)
	}()
}

// forgiver is an admin who, every 1.5–3 s of the first three quarters of
// the human span (so that some spammers are flagged again after; later
// only until a first forgiveness went out), forgives
// one of the spammers refused work since the last forgiveness, picked
// by the seed, over HTTP against the servers being killed (a
// forgiveness is idempotent: a contributor not flagged is left as they
// are).
func (c *crowdSim) forgiver(ctx context.Context) {
	rnd := mrand.New(mrand.NewPCG(c.r.cfg.Seed, 6))
	until := time.Now().Add(c.r.humanSpan() * 3 / 4)
	sent := 0
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(1500+rnd.IntN(1500)) * time.Millisecond):
		}
		if time.Now().After(until) && sent > 0 {
			// Past the window, but only once one forgiveness went out:
			// on a loaded machine the first flag may come late, and every
			// run must forgive one.
			return
		}
		c.mu.Lock()
		var flagged []int
		for i := range Contributors {
			if c.refused[i] {
				flagged = append(flagged, i)
			}
		}
		if len(flagged) == 0 {
			c.mu.Unlock()
			continue
		}
		i := flagged[rnd.IntN(len(flagged))]
		delete(c.refused, i)
		c.mu.Unlock()
		who := c.ids[i]
		path := "/v1/pools/" + c.pool.String() + "/contributors/" + who + "/forgive"
		if err := c.r.call("POST", path, nil, n, nil, http.StatusOK); err != nil {
			if ctx.Err() == nil {
				c.surprise("forgive contributor %s: %v", who, err)
			}
			continue
		}
		sent++
		c.count(func(r *CrowdReport) { r.Forgives++ })
	}
}

func (c *crowdSim) stopWork() {
	if c.stop != nil {
		c.stop()
	}
	c.wg.Wait()
}

// openUnits counts the regular units of the pool not final yet (a
// count of at most one page: 0 is what matters); -1 when it cannot read.
func (c *crowdSim) openUnits(ctx context.Context) int {
	no := false
	us, err := c.r.client.UnitList(ctx, c.pool, docket.UnitListParams{
		States: []docket.UnitState{docket.UnitNew, docket.UnitJudgable, docket.UnitPaused}, Golden: &no, Limit: 100})
	if err != nil {
		return -1
	}
	return len(us)
}

// busyServer is a server with a contributor's request in flight now, or
// else one in the middle of a contributor's take → judgment; -1 when
// there is none.
func (c *crowdSim) busyServer(rnd *mrand.Rand) int {
	for _, counts := range [][]atomic.Int32{c.inflight, c.working} {
		var busy []int
		for i := range counts {
			if counts[i].Load() > 0 {
				busy = append(busy, i)
			}
		}
		if len(busy) > 0 {
			return busy[rnd.IntN(len(busy))]
		}
	}
	return -1
}

func (c *crowdSim) surprise(format string, args ...any) {
	c.mu.Lock()
	c.surprises = append(c.surprises, Violation{Kind: KindCrowdAnswer, Detail: fmt.Sprintf(format, args...)})
	c.mu.Unlock()
}

func (c *crowdSim) count(f func(*CrowdReport)) {
	c.mu.Lock()
	f(&c.rep)
	c.mu.Unlock()
}

// answer is one HTTP answer to a contributor.
type answer struct {
	status int
	body   []byte
	cuts   int // sends of the request cut before this answer
}

// send sends a contributor's request to the servers in turn from *server
// until one answers other than 5xx or 429, for up to submitTimeout; *server
// moves on with each cut request, so the contributor stays on the
// server that answered.
func (c *crowdSim) send(ctx context.Context, secret, method, path string, body []byte, server *int) (answer, error) {
	deadline := time.Now().Add(submitTimeout)
	var last string
	cuts := 0
	for ctx.Err() == nil && time.Now().Before(deadline) {
		i := *server % len(c.r.urls)
		req, err := http.NewRequestWithContext(ctx, method, c.r.urls[i]+path, bytes.NewReader(body))
		if err != nil {
			return answer{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+secret)
		if path == "/v1/judgments" {
			select {
			case c.judging <- i:
			default:
			}
		}
		c.inflight[i].Add(1)
		res, err := c.r.http.Do(req)
		var data []byte
		if err == nil {
			data, err = io.ReadAll(res.Body)
			_ = res.Body.Close()
		}
		c.inflight[i].Add(-1)
		switch {
		case err != nil:
			last = err.Error()
		case res.StatusCode >= 500, res.StatusCode == http.StatusTooManyRequests:
			last = fmt.Sprintf("%d %s", res.StatusCode, data)
		default:
			return answer{status: res.StatusCode, body: data, cuts: cuts}, nil
		}
		if ctx.Err() != nil {
			break
		}
		cuts++
		c.count(func(r *CrowdReport) { r.Cut++ })
		*server = i + 1
		time.Sleep(200 * time.Millisecond) // back off from a server that is down, or a database restarting
	}
	if ctx.Err() != nil {
		return answer{}, ctx.Err()
	}
	c.surprise("%s %s: no answer but 5xx or a cut within %v: %s", method, path, submitTimeout, last)
	return answer{}, errors.New(last)
}

// work is one contributor's loop until ctx ends.
func (c *crowdSim) work(ctx context.Context, n int, secret string) {
	rnd := mrand.New(mrand.NewPCG(c.r.cfg.Seed, 100+uint64(n)))
	server := n
	var pool string
	takes := 0
	idle := func() {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(300+rnd.IntN(700)) * time.Millisecond):
		}
	}
	for ctx.Err() == nil {
		if pool == "" {
			a, err := c.send(ctx, secret, "GET", "/v1/me/pools", nil, &server)
			if err != nil {
				continue
			}
			var mine struct {
				Items []struct {
					PoolID   string `json:"poolId"`
					Workflow string `json:"workflow"`
				} `json:"items"`
			}
			if a.status == http.StatusOK && json.Unmarshal(a.body, &mine) == nil {
				for _, p := range mine.Items {
					if p.Workflow == HumanShape.Name {
						pool = p.PoolID
					}
				}
			}
			if pool == "" {
				idle()
			}
			continue
		}
		body, _ := json.Marshal(map[string]string{"poolId": pool})
		a, err := c.send(ctx, secret, "POST", "/v1/assignments", body, &server)
		if err != nil {
			continue
		}
		if a.status != http.StatusCreated {
			switch {
			case a.status == http.StatusForbidden && spammer(n):
				// Flagged: no more work here until an admin forgives.
				c.mu.Lock()
				c.rep.Refused++
				c.refused[n] = true
				c.mu.Unlock()
				select { // asks again less often than one who found no unit
				case <-ctx.Done():
				case <-time.After(time.Duration(1000+rnd.IntN(1000)) * time.Millisecond):
				}
			case a.status != http.StatusNotFound:
				c.surprise("POST /v1/assignments: %d %s", a.status, a.body)
			}
			idle()
			continue
		}
		var taken struct {
			AssignmentID string    `json:"assignmentId"`
			ExpiresAt    time.Time `json:"expiresAt"`
			Unit         struct {
				Input json.RawMessage `json:"input"`
			} `json:"unit"`
		}
		if err := json.Unmarshal(a.body, &taken); err != nil {
			c.surprise("POST /v1/assignments: %v in %s", err, a.body)
			continue
		}
		c.count(func(r *CrowdReport) { r.Takes++ })
		at := server % len(c.r.urls)
		c.working[at].Add(1)
		x := rnd.IntN(100)
		if takes++; takes == 1 && n < 4 {
			// Every run does each of the rare things at least once,
			// whatever the draws: contributor 0 abandons its first
			// assignment, 1 holds it past its expiry, 2 releases it, 3
			// judges it twice.
			x = []int{0, 5, 9, 22}[n]
		}
		pick := rightOf(taken.Unit.Input)
		switch {
		case spammer(n) && n%2 == 0:
			pick = "c" // a bot always on the one wrong option: flagged at its second test question
		case pick == "" || spammer(n):
			pick = []string{"a", "b", "c"}[rnd.IntN(3)] // a right answer is a or b: a third of the time
		}
		c.act(ctx, rnd, x, secret, &server, taken.AssignmentID, taken.ExpiresAt, pick, func() { c.working[at].Add(-1) })
	}
}

// act does one of the scripted things with an assignment just taken, by
// the draw x in [0, 100).
// done is called once when the contributor stops working on it (before
// a long wait).
func (c *crowdSim) act(ctx context.Context, rnd *mrand.Rand, x int, secret string, server *int, id string, expires time.Time, pick string, done func()) {
	var once sync.Once
	defer once.Do(done)
	early := time.Now().Before(c.until)
	data := fmt.Sprintf(`{"pick": %q}`, pick)
	// Think: a person reads the unit.
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(10+rnd.IntN(150)) * time.Millisecond):
	}
	switch {
	case x < 5 && early:
		c.count(func(r *CrowdReport) { r.Abandoned++ })
		return
	case x < 9 && early:
		// Hold it past its expiry, then judge: refused 409.
		once.Do(done)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(expires) + time.Duration(200+rnd.IntN(3000))*time.Millisecond):
		}
		a, err := c.judge(ctx, secret, server, id, data)
		switch {
		case err != nil:
		case a.status == http.StatusConflict && bytes.Contains(bytes.ToLower(a.body), []byte("expired")):
			c.count(func(r *CrowdReport) { r.LateRefuse++ })
		default:
			c.surprise("a judgment of assignment %s after its expiry at %s was answered %d %s", id, ts(expires), a.status, a.body)
		}
		return
	case x < 17:
		a, err := c.send(ctx, secret, "POST", "/v1/assignments/"+id+"/release", nil, server)
		switch {
		case err != nil:
		case a.status == http.StatusOK:
			c.count(func(r *CrowdReport) { r.Releases++ })
		case a.status == http.StatusConflict && a.cuts > 0:
			// A resend after a cut: the first one released it. On a
			// first send the assignment, taken a moment ago, must be
			// ACTIVE still.
			c.count(func(r *CrowdReport) { r.Releases++ })
		default:
			c.surprise("release of assignment %s: %d %s", id, a.status, a.body)
		}
		return
	case x < 22:
		a, err := c.judge(ctx, secret, server, id, `{"pick": "neither"}`)
		if err != nil {
			return
		}
		if a.status != http.StatusUnprocessableEntity || !bytes.Contains(a.body, []byte("pick")) {
			c.surprise("an invalid judgment of assignment %s was answered %d %s", id, a.status, a.body)
			return
		}
		c.count(func(r *CrowdReport) { r.Invalid++ })
	}
	a, err := c.judge(ctx, secret, server, id, data)
	if err != nil {
		return
	}
	var first struct {
		JudgmentID string `json:"judgmentId"`
	}
	// 200 (stored already) only answers a resend after a cut: on a first
	// send it is a judgment stored before this one was.
	if (a.status != http.StatusAccepted && (a.status != http.StatusOK || a.cuts == 0)) || json.Unmarshal(a.body, &first) != nil {
		c.surprise("judgment of assignment %s: %d %s", id, a.status, a.body)
		return
	}
	c.count(func(r *CrowdReport) {
		r.Judgments++
		switch {
		case a.cuts > 0 && a.status == http.StatusOK:
			r.CutCommitted++
		case a.cuts > 0:
			r.CutLost++
		}
	})
	if x >= 35 {
		return
	}
	// Sent twice: the same judgment, 200.
	a, err = c.judge(ctx, secret, server, id, data)
	if err != nil {
		return
	}
	var again struct {
		JudgmentID string `json:"judgmentId"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &again) != nil || again.JudgmentID != first.JudgmentID {
		c.surprise("the same judgment of assignment %s again was answered %d %s (the first: judgment %s)", id, a.status, a.body, first.JudgmentID)
		return
	}
	c.count(func(r *CrowdReport) { r.Repeats++ })
}

func (c *crowdSim) judge(ctx context.Context, secret string, server *int, id, data string) (answer, error) {
	body := `{"assignmentId": "` + id + `", "data": ` + data + `}`
	return c.send(ctx, secret, "POST", "/v1/judgments", []byte(body), server)
}

// report is what the contributors did and the surprises they met.
func (c *crowdSim) report() (CrowdReport, []Violation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rep, append([]Violation(nil), c.surprises...)
}

// humanSummary is the line of the report about the human runs' units.
func humanSummary(s *CrowdSnapshot) string {
	if s == nil {
		return ""
	}
	states := map[string]int{}
	for _, u := range s.Units {
		states["unit "+string(u.State)]++
	}
	for _, a := range s.Assignments {
		states["assignment "+string(a.State)]++
	}
	states["judgments"] = len(s.Judgments)
	return strings.TrimSpace(countsOf(states))
}

// checkCrowd checks the human work invariants on the database (the
// snapshot's job and run invariants were checked already): the checker's
// own (checkCrowd, with the reap window of the run, quality control's
// among them) and crowdcheck's queries for a pool under quality control
// on the human runs' pool, whose every unit must be FINALIZED with at
// least HumanJudgments clean judgments, no assignment left ACTIVE and
// the pool's counters equal to the tables. It fills the report's human
// work lines.
func (r *run) checkCrowd(ctx context.Context, snap *Snapshot, expectRuns map[string]flow.RunState, rep *Report) ([]Violation, error) {
	db, err := crowdcheck.Open(r.dbURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	cs, err := LoadCrowd(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("read the human work tables: %w", err)
	}
	only := &Snapshot{Jobs: snap.Jobs, Flows: snap.Flows, Crowd: cs}
	out := only.checkCrowd(cs, Expectations{ReapWindow: reapWindow}, time.Now())
	for pool, step := range cs.PoolSteps {
		if step != "label" {
			continue
		}
		results, err := crowdcheck.RunChecks(ctx, db, crowdcheck.QualityChecks(pool, HumanJudgments))
		if err != nil {
			return nil, err
		}
		for _, res := range crowdcheck.Failed(results) {
			out = append(out, Violation{Kind: KindCrowdCheck, Detail: fmt.Sprintf("pool %s: %s: %d", pool, res.Name, res.Violations)})
		}
	}
	crowdRep, surprises := r.crowd.report()
	out = append(out, surprises...)
	for k := range expectRuns {
		if strings.HasPrefix(k, "chaos-human-") {
			rep.HumanRuns++
		}
	}
	for _, ev := range cs.QualityEvents {
		switch ev.Type {
		case eventFlagged:
			crowdRep.Flags++
		case eventUnflagged:
			crowdRep.Unflags++
		case eventResultChanged:
			crowdRep.ResultChanges++
		}
	}
	for _, j := range cs.Judgments {
		if j.Tainted {
			crowdRep.Tainted++
		}
	}
	rep.Crowd = crowdRep
	rep.CrowdTables = humanSummary(cs)
	return out, nil
}

// KindCrowdCheck is a failed query of crowdcheck on the human runs' pool.
const KindCrowdCheck = "crowdcheck"
