package remote_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoHeavyDependencies: a worker built on this package links no
// database driver and no NATS.
func TestNoHeavyDependencies(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/docket-run/docket/remote").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/jackc/", "modernc.org/", "github.com/nats-io/", "github.com/docket-run/docket/internal/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("remote depends on %s", dep)
			}
		}
		if dep == "github.com/docket-run/docket" {
			t.Errorf("remote depends on the root package (and through it on the stores)")
		}
	}
}
