package docket_test

import (
	"os/exec"
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
