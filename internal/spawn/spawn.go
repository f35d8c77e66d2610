// Package spawn holds what the harnesses that start docket processes share
// (the chaos run, the load run, the black-box tests): the environment they
// start them in and building the binary.
package spawn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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

// A harness lets each server it starts pick a free port itself and then
// asks which: listening on port 0, closing, and passing the number on
// leaves a window in which another process may take it. docket serve
// writes its bound address to --addr-file; nats-server started with
// "-p -1 --ports_file_dir DIR" writes its URLs to a ports file in DIR.

// ReadAddrFile returns the host:port docket serve wrote to its
// --addr-file, or "" while the file does not exist yet.
func ReadAddrFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// NATSPortsURL returns the client URL the nats-server process pid wrote
// to its ports file in dir (--ports_file_dir), or "" while it has not
// written it.
func NATSPortsURL(dir string, pid int) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, fmt.Sprintf("*_%d.ports", pid)))
	if err != nil || len(files) == 0 {
		return "", err
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		return "", err
	}
	var ports struct {
		NATS []string `json:"nats"`
	}
	if err := json.Unmarshal(data, &ports); err != nil {
		return "", nil // written but not whole yet
	}
	if len(ports.NATS) == 0 {
		return "", fmt.Errorf("%s names no client URL", files[0])
	}
	return ports.NATS[0], nil
}
