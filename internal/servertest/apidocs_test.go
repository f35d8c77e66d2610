package servertest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/testdb"
)

// docs/api.md and docs/workflows.md are checked by running them: every
// ```sh block that starts with "# doc-test" runs, in order, in one bash per
// page (so variables carry over from one example to the next, as for a
// reader following along), against a real server with $DOCKET and $KEY
// set. When an ```http sample follows
// the block, the status of the block's last curl call must be the sample's
// and the block's output must have the sample's JSON fields (and values,
// but for ids, times, cursors and details, which differ from run to run).
// Every other curl call must answer 2xx.

// apiDocs are the pages whose examples run this way, each against its own
// server: the HTTP API, and the HTTP chapter of the workflows page.
var apiDocs = []string{"../../docs/api.md", "../../docs/workflows.md", "../../docs/human-work.md"}

// docSeeds prepare the server of a page before its examples run and give
// them environment variables: the human work page needs a pool, which
// only a run (or the Go API) makes.
var docSeeds = map[string]func(t *testing.T, databaseURL string) map[string]string{
	"docs/human-work.md": seedHumanWork,
}

// seedHumanWork stores the task same-product and a workflow
// product-match whose step label uses it, makes the step's pool with one
// unit, and gives its id as $POOL.
func seedHumanWork(t *testing.T, databaseURL string) map[string]string {
	ctx := context.Background()
	c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: databaseURL})
	require.NoError(t, err)
	defer c.Close()
	tmpl, err := docket.ParseTask([]byte(`{"title": "Same product?",
	 "instructions": "Do the two records describe the same product?",
	 "display": [{"kind": "text", "from": "unit.left"}, {"kind": "text", "from": "unit.right"}],
	 "fields": [{"name": "same", "kind": "choice", "required": true,
	             "options": [{"value": "yes", "label": "Same"}, {"value": "no", "label": "Different"}]}],
	 "judgmentsPerUnit": {"min": 3}, "skills": ["en"]}`))
	require.NoError(t, err)
	_, _, err = c.TaskPut(ctx, "same-product", tmpl)
	require.NoError(t, err)
	def, err := docket.DecodeWorkflow([]byte(`{"name": "product-match", "steps": [
	  {"name": "fetch", "job": {"type": "fetch-pair"}},
	  {"name": "label", "after": ["fetch"], "human": {"task": "same-product"}}]}`))
	require.NoError(t, err)
	_, _, err = c.WorkflowPut(ctx, def)
	require.NoError(t, err)
	pool, _, err := c.PoolEnsure(ctx, "product-match", 1, "label", "same-product")
	require.NoError(t, err)
	_, err = c.UnitsAdd(ctx, pool.ID, []json.RawMessage{json.RawMessage(`{"left": "Acme anvil 10kg", "right": "ACME Anvil, 10 kg"}`)})
	require.NoError(t, err)
	return map[string]string{"POOL": pool.ID.String()}
}

// docExample is one doc-test block and the sample answer after it.
type docExample struct {
	Line   int    // of the block in its page
	Script string // the block's commands
	Sample *docSample
}

type docSample struct {
	Status int
	Body   string
}

var (
	docBlock    = regexp.MustCompile("(?s)```sh\n# doc-test\n(.*?)```\n(?:\n```http\n(.*?)```\n)?")
	sampleFirst = regexp.MustCompile(`^HTTP/1\.1 (\d{3}) `)
)

func parseDocExamples(t *testing.T, name, doc string) []docExample {
	t.Helper()
	var out []docExample
	for _, m := range docBlock.FindAllStringSubmatchIndex(doc, -1) {
		ex := docExample{Line: 1 + strings.Count(doc[:m[0]], "\n"), Script: doc[m[2]:m[3]]}
		if m[4] >= 0 {
			sample := doc[m[4]:m[5]]
			sm := sampleFirst.FindStringSubmatch(sample)
			require.NotNil(t, sm, "%s:%d: the sample must start with HTTP/1.1 <status>", name, ex.Line)
			status, _ := strconv.Atoi(sm[1])
			_, body, _ := strings.Cut(sample, "\n\n") // after the headers
			ex.Sample = &docSample{Status: status, Body: body}
		}
		out = append(out, ex)
	}
	return out
}

// docPreamble makes curl record the status of every call in $DOC_STATUS
// and print the body as curl would.
const docPreamble = `set -euo pipefail
curl() {
  local out
  out=$(command curl -w '\n%{http_code}' "$@") || return
  printf '%s\n' "${out##*$'\n'}" >> "$DOC_STATUS"
  out=${out%$'\n'*}
  printf '%s\n' "${out%$'\n'}"
}
`

// needTools skips the test when a program it runs is missing, except under
// CI, where that is a failure.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is needed to run the examples of the docs: %v", tool, err)
			}
			t.Skipf("%s is needed to run the examples of the docs: %v", tool, err)
		}
	}
}

func TestAPIDocExamples(t *testing.T) {
	t.Parallel()
	needTools(t, "bash", "curl", "jq")
	for _, path := range apiDocs {
		name := strings.TrimPrefix(path, "../../")
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			runDocExamples(t, name, path)
		})
	}
}

// runDocExamples runs the doc-test examples of the page at path (name is
// its path in the repository) against a new server.
func runDocExamples(t *testing.T, name, path string) {
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	examples := parseDocExamples(t, name, string(doc))
	require.NotEmpty(t, examples)

	key := servertest.NewAdminKey()
	dbURL := testdb.SQLiteURL(t)
	// The examples test what the docs say the server answers; its races are
	// other tests' subject, so it runs without the race detector (see
	// servertest.PlainBinary), as does the docket command they run.
	srv := servertest.Start(t, servertest.Options{DatabaseURL: dbURL, Env: map[string]string{"DOCKET_ADMIN_KEY": key}, Plain: true})
	var seeded map[string]string
	if seed := docSeeds[name]; seed != nil {
		seeded = seed(t, dbURL)
	}

	statusFile := filepath.Join(t.TempDir(), "status")
	var script strings.Builder
	script.WriteString(docPreamble)
	for i, ex := range examples {
		// Markers split the output and the statuses by example.
		fmt.Fprintf(&script, "printf '\\n::doc-example %d\\n'\necho '::%d' >> \"$DOC_STATUS\"\n%s\n", i, i, ex.Script)
	}
	// Generous: human-work.md's walkthrough has 8 simulated contributors
	// judge 1,000 units three times; with a race-built server on SQLite,
	// beside the rest of the suite on two cores, that took 1.5–5.4 minutes,
	// and the plain build it runs now takes about one.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKET") && !strings.HasPrefix(kv, "KEY=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// The docket command of the examples is the binary under test.
	cmd.Env = append(cmd.Env, "DOCKET="+srv.URL, "KEY="+key, "DOC_STATUS="+statusFile,
		"PATH="+filepath.Dir(servertest.PlainBinary(t))+string(os.PathListSeparator)+os.Getenv("PATH"))
	for k, v := range seeded {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()

	outputs := regexp.MustCompile(`\n::doc-example \d+\n`).Split(stdout.String(), -1)[1:]
	statuses := map[int][]int{}
	recorded, err := os.ReadFile(statusFile)
	require.NoError(t, err)
	current := -1
	for _, line := range strings.Fields(string(recorded)) {
		if n, ok := strings.CutPrefix(line, "::"); ok {
			current, _ = strconv.Atoi(n)
			continue
		}
		code, _ := strconv.Atoi(line)
		statuses[current] = append(statuses[current], code)
	}
	if runErr != nil {
		ex := examples[len(outputs)-1]
		t.Fatalf("the example at %s:%d failed (%v)\n%s\noutput:\n%s\nstderr:\n%s",
			name, ex.Line, runErr, ex.Script, outputs[len(outputs)-1], stderr.String())
	}
	require.Len(t, outputs, len(examples))

	for i, ex := range examples {
		codes := statuses[i]
		where := fmt.Sprintf("%s:%d", name, ex.Line)
		require.NotEmpty(t, codes, "%s: the example calls no curl", where)
		last := codes[len(codes)-1]
		for _, c := range codes[:len(codes)-1] {
			require.True(t, c >= 200 && c < 300, "%s: a call before the last one answered %d\noutput:\n%s", where, c, outputs[i])
		}
		if ex.Sample == nil {
			require.True(t, last >= 200 && last < 300, "%s: answered %d\noutput:\n%s", where, last, outputs[i])
			continue
		}
		require.Equal(t, ex.Sample.Status, last, "%s: the status of the sample\noutput:\n%s", where, outputs[i])
		var want, got any
		if json.Unmarshal([]byte(ex.Sample.Body), &want) != nil {
			continue // not a JSON sample (metrics)
		}
		require.NoError(t, json.Unmarshal([]byte(outputs[i]), &got), "%s: the output is not JSON like the sample:\n%s", where, outputs[i])
		if diffs := compareSample("", want, got); len(diffs) > 0 {
			t.Errorf("%s: the output differs from the sample:\n  %s\noutput:\n%s", where, strings.Join(diffs, "\n  "), outputs[i])
		}
	}
}

// variableFields differ from run to run: only their JSON type is compared.
var variableFields = []string{
	"id", "jobId", "leaseId", "createdAt", "updatedAt", "scheduledAt", "finishedAt",
	"startedAt", "expiresAt", "leaseExpiresAt", "nextCursor", "detail", "durationMs",
	"runId", "poolId", "unitId", "contributorId", "assignmentId", "judgmentId", "keyId", "secret", "prefix",
	"heartbeatAt", "finalizedAt",
}

// compareSample lists how got differs from the sample want: the same
// fields everywhere, the same array lengths, the same values but for
// variableFields (same type).
func compareSample(path string, want, got any) []string {
	name := path[strings.LastIndex(path, ".")+1:]
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, got %v", path, got)}
		}
		var diffs []string
		var keys []string
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			wv, inWant := w[k]
			gv, inGot := g[k]
			switch {
			case !inGot:
				diffs = append(diffs, fmt.Sprintf("%s.%s: in the sample, not in the answer", path, k))
			case !inWant:
				diffs = append(diffs, fmt.Sprintf("%s.%s: in the answer, not in the sample", path, k))
			default:
				diffs = append(diffs, compareSample(path+"."+k, wv, gv)...)
			}
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %d items, got %v", path, len(w), got)}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, compareSample(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	}
	if slices.Contains(variableFields, name) {
		if fmt.Sprintf("%T", want) != fmt.Sprintf("%T", got) {
			return []string{fmt.Sprintf("%s: want a %T, got %v", path, want, got)}
		}
		return nil
	}
	if want != got {
		return []string{fmt.Sprintf("%s: want %v, got %v", path, want, got)}
	}
	return nil
}

// TestAPIDocCoversEveryOperation: every operation of the OpenAPI document
// has a section "### METHOD /path" in docs/api.md (or, for workflows,
// docs/workflows.md) with a doc-test example, and no page documents an
// operation the document does not have.
func TestAPIDocCoversEveryOperation(t *testing.T) {
	t.Parallel()
	var doc []byte
	for _, path := range apiDocs {
		page, err := os.ReadFile(path)
		require.NoError(t, err)
		doc = append(append(doc, page...), '\n')
	}
	spec, err := os.ReadFile("../api/openapi.json")
	require.NoError(t, err)
	var openapi struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(spec, &openapi))

	sections := map[string]string{} // "METHOD /path" -> section text
	parts := regexp.MustCompile(`(?m)^### `).Split(string(doc), -1)
	for _, part := range parts[1:] {
		heading, body, _ := strings.Cut(part, "\n")
		body, _, _ = strings.Cut(body, "\n## ") // a section ends at the next chapter
		sections[heading] = body
	}
	var ops []string
	for path, item := range openapi.Paths {
		for method := range item {
			ops = append(ops, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(ops)
	require.NotEmpty(t, ops)
	for _, op := range ops {
		body, ok := sections[op]
		require.True(t, ok, "none of %v has a section \"### %s\"", apiDocs, op)
		require.Contains(t, body, "```sh\n# doc-test\n", "docs, section %s: no doc-test example", op)
	}
	for heading := range sections {
		if regexp.MustCompile(`^[A-Z]+ /`).MatchString(heading) {
			require.Contains(t, ops, heading, "the docs document %s, which is not in openapi.json", heading)
		}
	}
}
