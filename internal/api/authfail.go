package api

import (
	"crypto/sha256"
	"math"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// What an unknown bearer token costs. Every request's key is looked up
// in the database unless it is cached, so a client sending made-up
// tokens would cost a read each. Two bounds:
//
//   - unknownKeys remembers the SHA-256 of tokens that matched no valid
//     key for unknownKeyTTL: the same unknown token again is refused
//     from memory. A key created meanwhile (on another server, or with
//     docket keys create) is accepted at most unknownKeyTTL after its
//     secret was last refused.
//   - authFailures counts failed authentications per client address (a
//     token bucket): past the limit, a request whose key is not cached is
//     refused with 429 and Retry-After before anything is read.
const (
	unknownKeyTTL = 5 * time.Second
	// unknownKeysMax bounds the remembered unknown tokens; full, the
	// expired ones are dropped, then any.
	unknownKeysMax = 10000
	// authFailureAddrsMax bounds the client addresses counted; full,
	// those whose bucket is full again are dropped (at most once every
	// authFailureSweepEvery), and with none to drop a new address is
	// counted in one overflow bucket shared by all such addresses.
	authFailureAddrsMax   = 10000
	authFailureSweepEvery = time.Second
)

// AuthFailureLimitDefault is Config.AuthFailureLimit's default: 30 failed
// authentications a minute per client address.
const AuthFailureLimitDefault = 30.0 / 60

// unknownKeys is the negative cache of bearer tokens, by SHA-256.
type unknownKeys struct {
	mu      sync.Mutex
	expires map[[sha256.Size]byte]time.Time
}

func (u *unknownKeys) has(h [sha256.Size]byte, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	exp, ok := u.expires[h]
	return ok && now.Before(exp)
}

func (u *unknownKeys) add(h [sha256.Size]byte, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.expires == nil {
		u.expires = map[[sha256.Size]byte]time.Time{}
	}
	if _, ok := u.expires[h]; !ok && len(u.expires) >= unknownKeysMax {
		for k, exp := range u.expires {
			if !now.Before(exp) {
				delete(u.expires, k)
			}
		}
		for k := range u.expires {
			if len(u.expires) < unknownKeysMax {
				break
			}
			delete(u.expires, k)
		}
	}
	u.expires[h] = now.Add(unknownKeyTTL)
}

// authFailures is a token bucket of failed authentications per client
// address: each failure takes a token; with none left, the address's
// requests whose key is not cached are refused until one refills.
type authFailures struct {
	rate  float64 // tokens a second
	burst float64

	mu      sync.Mutex
	buckets map[netip.Addr]*failBucket
	// overflow counts the addresses that found buckets full with none
	// to drop, together (bucket).
	overflow failBucket
	sweptAt  time.Time // when buckets was last swept of full ones
}

type failBucket struct {
	tokens float64
	at     time.Time // when tokens was counted
}

func newAuthFailures(perSecond float64, burst int) *authFailures {
	if burst < 1 {
		burst = max(1, int(math.Ceil(perSecond*60)))
	}
	return &authFailures{rate: perSecond, burst: float64(burst), buckets: map[netip.Addr]*failBucket{}}
}

// refill brings b's tokens up to now; a.mu is held.
func (a *authFailures) refill(b *failBucket, now time.Time) {
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.tokens = min(a.burst, b.tokens+el*a.rate)
		b.at = now
	}
}

// wait is how many seconds addr must wait before its next failure may
// be tried (at least 1), 0 when it may go ahead.
func (a *authFailures) wait(addr netip.Addr, now time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.bucket(addr, now, false)
	if b == nil {
		return 0
	}
	a.refill(b, now)
	if b.tokens >= 1 {
		return 0
	}
	return max(1, int(math.Ceil((1-b.tokens)/a.rate)))
}

// fail takes a token of addr's bucket.
func (a *authFailures) fail(addr netip.Addr, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.bucket(addr, now, true)
	a.refill(b, now)
	b.tokens = max(0, b.tokens-1)
}

// bucket is addr's bucket; a.mu is held. An address not tracked gets
// one of its own when create is set and there is room, after dropping
// the buckets that have refilled to full (they hold nothing a new one
// would not) when the map is full, at most once every
// authFailureSweepEvery so that a flood of new addresses does not scan
// the map each. With no room, the address shares the overflow bucket
// (same limit): a tracked bucket, exhausted ones included, is never
// dropped for it, so an address cannot reset its bucket by making
// failures from many others. Without create, an untracked address has
// nil while there is room (never failed), else the overflow bucket.
func (a *authFailures) bucket(addr netip.Addr, now time.Time, create bool) *failBucket {
	if b := a.buckets[addr]; b != nil {
		return b
	}
	if create && len(a.buckets) >= authFailureAddrsMax && now.Sub(a.sweptAt) >= authFailureSweepEvery {
		a.sweptAt = now
		for k, o := range a.buckets {
			if a.refill(o, now); o.tokens >= a.burst {
				delete(a.buckets, k)
			}
		}
	}
	if len(a.buckets) < authFailureAddrsMax {
		if !create {
			return nil
		}
		b := &failBucket{tokens: a.burst, at: now}
		a.buckets[addr] = b
		return b
	}
	return &a.overflow
}

// clientAddr is the address failed authentications are counted by: the
// connection's peer (RemoteAddr; the server trusts no forwarded header
// for addresses, so behind a proxy every client shares the proxy's), an
// IPv6 one by its /64 (one host commonly holds a whole /64).
func clientAddr(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.Addr()
	}
	return addr
}
