// Package spawn holds what the harnesses that start docket processes share
// (the chaos run, the load run, the black-box tests): the environment they
// start them in and building the binary.
package spawn

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EnvWithout is this process's environment without the variables whose
// names start with prefix.
func EnvWithout(prefix string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

// BuildDocket builds cmd/docket into a new temporary directory (named
// after pattern, as os.MkdirTemp) and returns the binary's path and a
// function that removes the directory.
func BuildDocket(pattern string) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	bin = filepath.Join(dir, "docket")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/docket-run/docket/cmd/docket").CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go build ./cmd/docket: %w\n%s", err, out)
	}
	return bin, cleanup, nil
}
