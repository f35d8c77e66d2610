//go:build unix

package natsembed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive lock on dir (creating it) for the embedded
// server's lifetime: two servers on one JetStream storage would corrupt it.
func lockDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create NATS storage %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "docket.lock"), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("lock NATS storage %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("NATS storage %s is in use by another embedded server (another docket serve?): give each its own DOCKET_NATS_DIR, or share an external NATS with DOCKET_NATS_URL", dir)
		}
		return nil, fmt.Errorf("lock NATS storage %s: %w", dir, err)
	}
	return func() { _ = f.Close() }, nil
}
