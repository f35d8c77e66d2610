package testdb

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a TCP proxy in front of the test PostgreSQL that a test takes
// down and brings back, to see what docket does while its database is
// unreachable. Connect through it with URL; it is closed when the test
// ends.
type Proxy struct {
	t      testing.TB
	target string // the server's host:port
	addr   string // the proxy's, kept across Down and Up

	mu    sync.Mutex
	state proxyState
	ln    net.Listener        // nil while down
	conns map[net.Conn]func() // every open connection's end, and how to end it
	wg    sync.WaitGroup
}

type proxyState int

const (
	proxyUp   proxyState = iota
	proxyCut             // connections end at their next bytes; new ones at once
	proxyMute            // as cut, but new connections are held and never answered
	proxyDown            // nothing listens: connection refused
)

// NewProxy starts a proxy to the server of ServerURL (skipping the test
// as ServerURL does when there is none).
func NewProxy(t testing.TB) *Proxy {
	t.Helper()
	u, err := url.Parse(ServerURL(t))
	if err != nil {
		t.Fatalf("parse %s: %v", EnvURL, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{t: t, target: u.Host, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]func(){}}
	p.wg.Add(1)
	go p.serve(ln)
	t.Cleanup(p.close)
	return p
}

// URL is dbURL (of the test server, such as PostgresURL's) through the
// proxy.
func (p *Proxy) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		p.t.Fatalf("parse %s: %v", dbURL, err)
	}
	u.Host = p.addr
	return u.String()
}

// Cut breaks every connection: an open one ends (both ways) when the
// client next sends on it, a statement's bytes never reaching the server
// (a connection reset under a statement, as the client sees it); a new
// one is closed as soon as it is accepted.
func (p *Proxy) Cut() { p.set(proxyCut) }

// Mute is Cut but for new connections, which are accepted and never
// answered: a server that does not answer.
func (p *Proxy) Mute() { p.set(proxyMute) }

// Down stops listening, so that connecting is refused, and closes every
// connection.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state = proxyDown
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.closeConnsLocked()
}

// Up forwards again, on the same address.
func (p *Proxy) Up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeConnsLocked() // held mute connections, and any Cut left
	p.state = proxyUp
	if p.ln == nil {
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			p.t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
		}
		p.ln = ln
		p.wg.Add(1)
		go p.serve(ln)
	}
}

func (p *Proxy) set(s proxyState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == proxyDown {
		p.t.Fatalf("proxy: Cut or Mute while down: call Up first")
	}
	p.state = s
}

func (p *Proxy) close() {
	p.Down()
	p.wg.Wait()
}

func (p *Proxy) closeConnsLocked() {
	for _, end := range p.conns {
		end()
	}
	clear(p.conns)
}

func (p *Proxy) serve(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		state := p.state
		p.mu.Unlock()
		if state != proxyUp {
			p.refuse(c, state)
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		var once sync.Once
		end := func() { once.Do(func() { _ = c.Close(); _ = s.Close() }) }
		p.mu.Lock()
		if p.state != proxyUp {
			p.mu.Unlock()
			end()
			continue
		}
		p.conns[c] = end
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s, end, true)
		go p.pipe(s, c, end, false)
	}
}

// refuse ends a connection accepted while the proxy is not up: at once
// (cut), or once the proxy's state changes (mute: held unanswered).
func (p *Proxy) refuse(c net.Conn, state proxyState) {
	if state != proxyMute {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c] = func() { _ = c.Close() }
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_, _ = io.Copy(io.Discard, c)
	}()
}

// pipe copies src to dst until either ends; a client's bytes are
// forwarded only while the proxy is up, else they end the connection.
func (p *Proxy) pipe(src, dst net.Conn, end func(), fromClient bool) {
	defer p.wg.Done()
	defer func() {
		end()
		if fromClient {
			p.mu.Lock()
			delete(p.conns, src)
			p.mu.Unlock()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient {
				p.mu.Lock()
				up := p.state == proxyUp
				p.mu.Unlock()
				if !up {
					return
				}
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
