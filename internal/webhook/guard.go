package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrHostNotAllowed: a webhook URL's host, or an address it resolves to,
// is not a permitted target.
var ErrHostNotAllowed = errors.New("host not allowed")

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// guard decides which hosts webhooks may reach (no SSRF by default). A
// target is allowed when:
//   - allowAny is set (DOCKET_WEBHOOK_ALLOW_ANY), or
//   - its host name is listed (exactly, or under a "*.example.com" entry):
//     the operator vouches for that name, whatever it resolves to; or
//   - every address it connects to is loopback or inside a listed CIDR
//     (or equal to a listed IP).
//
// Names are checked when subscribing (all their addresses must pass) and,
// because DNS can change (rebinding), again on every connection: the dialer
// resolves the name itself and its Control function refuses a socket whose
// peer address is not allowed, before it connects.
type guard struct {
	allowAny bool
	names    map[string]bool
	suffixes []string // ".example.com" for "*.example.com"
	prefixes []netip.Prefix
	resolver Resolver
}

// newGuard parses DOCKET_WEBHOOK_ALLOW_HOSTS entries: host names,
// "*.domain" wildcards, IP addresses and CIDRs.
func newGuard(allowHosts []string, allowAny bool, resolver Resolver) (*guard, error) {
	g := &guard{allowAny: allowAny, names: map[string]bool{}, resolver: resolver}
	for _, h := range allowHosts {
		h = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(h), "."))
		switch {
		case h == "":
		case strings.Contains(h, "/"):
			p, err := netip.ParsePrefix(h)
			if err != nil {
				return nil, fmt.Errorf("allowed host %q: not a CIDR such as 10.0.0.0/8", h)
			}
			g.prefixes = append(g.prefixes, p.Masked())
		case strings.HasPrefix(h, "*."):
			g.suffixes = append(g.suffixes, h[1:])
		default:
			if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
				g.prefixes = append(g.prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				continue
			}
			if strings.ContainsAny(h, " :*") {
				return nil, fmt.Errorf("allowed host %q: want a host name, *.domain, an IP address or a CIDR", h)
			}
			g.names[h] = true
		}
	}
	return g, nil
}

// nameAllowed: the operator allowed this host by name (or everything).
func (g *guard) nameAllowed(host string) bool {
	if g.allowAny {
		return true
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if g.names[host] {
		return true
	}
	for _, s := range g.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// addrAllowed: loopback, or inside an allowed prefix.
func (g *guard) addrAllowed(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() {
		return true
	}
	for _, p := range g.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseTarget checks that raw is an absolute http or https URL with a
// host, and returns the host. Its error message is for the API's "url"
// field.
func parseTarget(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() {
		return "", errors.New("must be an absolute http or https URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", errors.New("must be an http or https URL")
	}
	if u.Hostname() == "" {
		return "", errors.New("must name a host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("port %s: must be 1 to 65535", p)
		}
	}
	return u.Hostname(), nil
}

// checkURL validates a subscription's URL: parseTarget, and a host that is
// allowed now. Its error message is for the API's "url" field.
func (g *guard) checkURL(ctx context.Context, raw string) error {
	host, err := parseTarget(raw)
	if err != nil {
		return err
	}
	if g.nameAllowed(host) {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if !g.addrAllowed(a) {
			return &notAllowedError{"host " + host}
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := g.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return &notAllowedError{"host " + host + ", which does not resolve,"}
	}
	for _, a := range addrs {
		if !g.addrAllowed(a) {
			return &notAllowedError{"host " + host + " resolves to " + a.String() + ", which"}
		}
	}
	return nil
}

// notAllowedError is ErrHostNotAllowed with what was refused and what is
// allowed.
type notAllowedError struct{ what string }

func (e *notAllowedError) Error() string {
	return e.what + " is not allowed: webhooks may reach loopback addresses and the hosts of " +
		"DOCKET_WEBHOOK_ALLOW_HOSTS (DOCKET_WEBHOOK_ALLOW_ANY=true lifts the limit)"
}

func (e *notAllowedError) Is(target error) bool { return target == ErrHostNotAllowed }

// dialContext is the delivery transport's dialer. For a host not allowed
// by name it resolves the name itself and dials each address with a
// Control function that refuses a disallowed peer before connecting.
func (g *guard) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if g.nameAllowed(host) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	var port uint16
	if _, err := fmt.Sscanf(portText, "%d", &port); err != nil {
		return nil, fmt.Errorf("dial %s: bad port", addr)
	}
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a)
	} else if addrs, err = g.resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	d := &net.Dialer{Control: g.control}
	var errs []error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(a.Unmap(), port).String())
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	return nil, errors.Join(errs...)
}

// control runs after the socket is made and before it connects: the last
// word on the peer address, whatever resolved it.
func (g *guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("address %s: %w", address, ErrHostNotAllowed)
	}
	if !g.addrAllowed(ap.Addr()) {
		return &notAllowedError{"address " + ap.Addr().String()}
	}
	return nil
}

// CheckAllowHosts reports the first entry of DOCKET_WEBHOOK_ALLOW_HOSTS that
// is neither a host name, a "*.domain" wildcard, an IP address nor a CIDR.
func CheckAllowHosts(hosts []string) error {
	_, err := newGuard(hosts, false, nil)
	return err
}
