package api

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/docket-run/docket"
)

// keyReadTimeout bounds one read of keys, which every request whose key
// is in it waits for (each also stops with its own request).
const keyReadTimeout = 5 * time.Second

// keyReadMaxSecret is the longest secret read together with others: a
// generated one is 43 bytes, an imported one any length from 16 (a
// passphrase); longer ones are read alone.
const keyReadMaxSecret = 256

// manyAuthenticator is an Authenticator that reads many keys in one
// query (docket.Client is one).
type manyAuthenticator interface {
	AuthenticateAPIKeys(ctx context.Context, secrets []string) (map[string]*docket.APIKey, error)
}

// keyReads are the reads of the keys missing from the server's cache: a
// key missing while no read is in flight is read at once, by its own
// request; those missing while one is in flight wait for it to end and
// are then read together, in one query. Many clients' first requests at
// once (a crowd arriving, or their cached keys expiring together
// authCacheTTL later) cost a query per round trip, not one per key.
type keyReads struct {
	mu      sync.Mutex
	reading bool     // a read is in flight
	next    *keyRead // the keys that wait for the next read, nil when none
	reads   int      // reads sent, for tests
}

// keyRead is one read of keys.
type keyRead struct {
	ctx     context.Context // the values of the request that began it
	secrets []string
	want    map[string]bool
	done    chan struct{} // closed when it ended
	keys    map[string]*docket.APIKey
	err     error
}

// readKey reads the key of secret, with the others missing meanwhile.
func (s *Server) readKey(ctx context.Context, many manyAuthenticator, secret string) (*docket.APIKey, error) {
	kr := &s.keyReads
	kr.mu.Lock()
	r := kr.next
	if r == nil {
		r = &keyRead{ctx: context.WithoutCancel(ctx), want: map[string]bool{}, done: make(chan struct{})}
		kr.next = r
	}
	if !r.want[secret] {
		r.want[secret] = true
		r.secrets = append(r.secrets, secret)
	}
	lead := !kr.reading
	if lead {
		kr.reading, kr.next = true, nil
		kr.reads++
	}
	kr.mu.Unlock()
	if lead {
		s.sendKeyRead(many, r)
		s.nextKeyRead(many)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, r.err
	}
	key, ok := r.keys[secret]
	if !ok {
		return nil, docket.ErrNotFound
	}
	return key, nil
}

// sendKeyRead reads r's keys and caches those found. A panic of the read
// is its error: the requests waiting for it are answered, and the reads
// after it still go (a read that never ended would hold every key
// missing from the cache from then on).
func (s *Server) sendKeyRead(many manyAuthenticator, r *keyRead) {
	defer close(r.done)
	defer func() {
		if p := recover(); p != nil {
			r.keys, r.err = nil, fmt.Errorf("read API keys: panic: %v", p)
		}
	}()
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.ctx, keyReadTimeout)
	defer cancel()
	r.keys, r.err = many.AuthenticateAPIKeys(ctx, r.secrets)
	if r.err == nil {
		s.rememberKeys(r.keys, start)
	}
}

// nextKeyRead, at the end of a read, sends the next one when keys wait
// for it, on a goroutine of its own (the request that sent the read that
// ended goes on with its answer), and so on until none waits.
func (s *Server) nextKeyRead(many manyAuthenticator) {
	kr := &s.keyReads
	kr.mu.Lock()
	r := kr.next
	if r == nil {
		kr.reading = false
		kr.mu.Unlock()
		return
	}
	kr.next = nil
	kr.reads++
	kr.mu.Unlock()
	go func() {
		s.sendKeyRead(many, r)
		s.nextKeyRead(many)
	}()
}
