package docket_test

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestInsertAndWorkDoesNotLinkNATSServer: a program that imports docket
// only to insert and work jobs runs, and does not link the embedded NATS
// server (docs/dependencies.md): only serve, through package natsembed,
// does.
func TestInsertAndWorkDoesNotLinkNATSServer(t *testing.T) {
	t.Parallel()
	const prog = "./testdata/insertonly"
	run := exec.Command("go", "run", prog)
	var stderr strings.Builder
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil || strings.TrimSpace(string(out)) != "worked" {
		t.Fatalf("go run %s: %v\nstdout: %s\nstderr: %s", prog, err, out, stderr.String())
	}
	deps, err := exec.Command("go", "list", "-deps", prog).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", prog, err, deps)
	}
	var sawRoot bool
	for _, dep := range strings.Fields(string(deps)) {
		sawRoot = sawRoot || dep == "github.com/docket-run/docket"
		if strings.HasPrefix(dep, "github.com/nats-io/nats-server") || dep == "github.com/docket-run/docket/natsembed" {
			t.Errorf("%s depends on %s", prog, dep)
		}
	}
	if !sawRoot {
		t.Fatalf("go list -deps %s does not list package docket: the check checks nothing\n%s", prog, deps)
	}
	// And the check can fail: serve links it.
	deps, err = exec.Command("go", "list", "-deps", "./cmd/docket").CombinedOutput()
	if err != nil || !strings.Contains(string(deps), "github.com/nats-io/nats-server/v2/server") {
		t.Fatalf("docket serve should link the NATS server through natsembed: %v", err)
	}
}

// TestPublicBoundary: the HTTP server, the dashboard and the CLI see package docket and
// package remote only (docs/dependencies.md, "The public boundary"): no
// import of the store, the event machinery, webhooks or the job types, so
// whatever they do a Go program outside the module can do too. Test files
// are held to it as well, but for the exceptions the document lists.
func TestPublicBoundary(t *testing.T) {
	t.Parallel()
	const module = "github.com/docket-run/docket/"
	banned := []string{module + "internal/store", module + "internal/events", module + "internal/webhook", module + "internal/job"}
	// Test files allowed a banned import, as listed in docs/dependencies.md.
	exceptions := map[string][]string{
		"internal/api/deadletters_test.go":      {module + "internal/store"},
		"internal/api/webhooks_oldrows_test.go": {module + "internal/store"},
		"internal/web/dead_paging_test.go":      {module + "internal/store"},
	}
	for _, pkg := range []string{"./internal/api", "./internal/web", "./cmd/docket"} {
		out, err := exec.Command("go", "list", "-json", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		var info struct {
			Dir                                string
			Imports                            []string
			GoFiles, TestGoFiles, XTestGoFiles []string
		}
		if err := json.Unmarshal(out, &info); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(info.Imports, "github.com/docket-run/docket") {
			t.Fatalf("%s does not import package docket: the check checks nothing (imports %v)", pkg, info.Imports)
		}
		files := slices.Concat(info.GoFiles, info.TestGoFiles, info.XTestGoFiles)
		for _, name := range files {
			path := filepath.Join(info.Dir, name)
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			rel := filepath.ToSlash(filepath.Join(strings.TrimPrefix(pkg, "./"), name))
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, b := range banned {
					if (p == b || strings.HasPrefix(p, b+"/")) && !slices.Contains(exceptions[rel], p) {
						t.Errorf("%s imports %s, behind the public boundary", rel, p)
					}
				}
			}
		}
	}
	// The check can fail: package docket itself imports the store.
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, ".").Output()
	if err != nil || !strings.Contains(string(out), module+"internal/store") {
		t.Fatalf("package docket should import internal/store (%v): %s", err, out)
	}
}
