package natsembed_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/docket-run/docket/natsembed"
)

// TestStorageIsLocked: one server per storage directory; it is free again
// once the server is closed.
func TestStorageIsLocked(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "nats")
	srv, err := natsembed.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := srv.InProcessConn()
	if err != nil {
		t.Fatalf("in-process connection: %v", err)
	}
	_ = conn.Close()
	if _, err := natsembed.Start(dir); err == nil || !strings.Contains(err.Error(), "in use by another embedded server") {
		t.Fatalf("second server on %s: %v", dir, err)
	}
	srv.Close()
	srv.Close() // twice is fine
	again, err := natsembed.Start(dir)
	if err != nil {
		t.Fatalf("restart after close: %v", err)
	}
	again.Close()
	if _, err := natsembed.Start(""); err == nil {
		t.Fatal("no directory accepted")
	}
}
