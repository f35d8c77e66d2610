package sqlite

import (
	"sync"

	"github.com/google/uuid"
)

// rowidHints remembers the rowid of every job this store acquired, so that
// finishing it goes to its row directly instead of searching the id index
// first. A hint is only a locator: the finish still matches the id, and a
// hint that misses (the row was deleted, or VACUUM renumbered the table) is
// retried by id. Entries leave when the job is finished through this store;
// the map is dropped whole if it ever grows past hintsMax (jobs that left
// RUNNING another way).
type rowidHints struct {
	mu sync.Mutex
	m  map[uuid.UUID]int64
}

// hintsMax is far above the leases one process holds at once (its handler
// slots), and small enough not to matter in memory.
const hintsMax = 1 << 16

func (h *rowidHints) put(id uuid.UUID, rowid int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= hintsMax {
		h.m = make(map[uuid.UUID]int64)
	}
	h.m[id] = rowid
}

// take returns and forgets id's rowid; 0 when there is none.
func (h *rowidHints) take(id uuid.UUID) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	rowid, ok := h.m[id]
	if ok {
		delete(h.m, id)
	}
	return rowid
}
