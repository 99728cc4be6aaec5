// Package outbound owns the calls the server makes on a tenant's behalf
// (conversion webhooks of a logical cluster's CRDs, admission webhooks):
// which networks a URL the tenant chose may reach, that a service
// reference reaches only the tenant's own Service (Policy.Services), that
// they carry no server credentials, and that nothing the remote end says
// comes back to the tenant except a well-formed answer. One Policy serves
// every such caller.
package outbound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// deniedByDefault are the networks a tenant's URL must not reach unless the
// operator allows them: the server's own host, the networks it sits in, and
// cloud metadata services (169.254.169.254 is link-local).
var deniedByDefault = mustCIDRs(
	"0.0.0.0/8",         // "this network"; 0.0.0.0 reaches the local host
	"10.0.0.0/8",        // private
	"100.64.0.0/10",     // carrier-grade NAT, often a cluster's pod network
	"127.0.0.0/8",       // loopback
	"169.254.0.0/16",    // link-local, cloud metadata
	"172.16.0.0/12",     // private
	"192.0.0.0/24",      // IETF protocol assignments
	"192.168.0.0/16",    // private
	"198.18.0.0/15",     // benchmarking
	"224.0.0.0/4",       // multicast
	"240.0.0.0/4",       // reserved, broadcast
	"::/128", "::1/128", // unspecified, loopback
	"64:ff9b::/96", // NAT64 of any IPv4 address
	"fc00::/7",     // unique local
	"fe80::/10",    // link-local
	"ff00::/8",     // multicast
)

func mustCIDRs(cidrs ...string) []*net.IPNet {
	var out []*net.IPNet
	for _, c := range cidrs {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			panic(err)
		}
		out = append(out, n)
	}
	return out
}

// FlagName is the server flag that allows networks; messages name it so an
// operator knows the fix.
const FlagName = "--webhook-allowed-networks"

// Policy decides which addresses tenant-supplied URLs may reach.
type Policy struct {
	// Allowed networks are reachable even if denied by default (an operator
	// running webhooks in a private network lists it here).
	Allowed []*net.IPNet
	// Services calls webhooks served by a Service of a workspace (nil:
	// such webhooks are refused).
	Services ServiceDialer
}

// ErrNotAllowed is wrapped by every refusal of the policy.
var ErrNotAllowed = errors.New("address not allowed for tenant-supplied URLs")

// CheckIP returns an error naming the address and the flag if ip may not
// be reached.
func (p *Policy) CheckIP(ip net.IP) error {
	// IPv4-mapped IPv6 addresses are checked as the IPv4 address they are
	// (a ::ffff:0:0/96 entry would, to net.IPNet, contain every IPv4 address).
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
	}
	for _, n := range p.allowed() {
		if n.Contains(ip) {
			return nil
		}
	}
	for _, n := range deniedByDefault {
		if n.Contains(ip) {
			return fmt.Errorf("%w: %s is in %s, which the server does not call on a tenant's behalf (an operator may allow it with %s)", ErrNotAllowed, ip, n, FlagName)
		}
	}
	return nil
}

func (p *Policy) allowed() []*net.IPNet {
	if p == nil {
		return nil
	}
	return p.Allowed
}

// CheckURL refuses, before any call, a URL whose host is obviously not
// allowed: an IP literal in a refused network, or a name of the local host.
// Names that resolve to refused addresses are caught when dialing.
func (p *Policy) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("unparsable URL: %v", err)
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		if p.CheckIP(net.IPv4(127, 0, 0, 1)) != nil {
			return fmt.Errorf("%w: %q names the server's own host", ErrNotAllowed, host)
		}
		return nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return p.CheckIP(ip)
	}
	return nil
}

// DialContext dials like net.Dialer but refuses, at connect time, every
// address the policy does not allow. The check sees the address actually
// dialed, after name resolution, so a name that resolves to an allowed
// address when checked and to a refused one when used (DNS rebinding), and
// redirects, are caught too.
func (p *Policy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip := net.ParseIP(host)
			if ip == nil {
				return fmt.Errorf("%w: %q is not an IP address", ErrNotAllowed, host)
			}
			return p.CheckIP(ip)
		},
	}
	return d.DialContext(ctx, network, addr)
}

// NoProxy makes a client dial directly even if HTTPS_PROXY is set, so the
// policy sees the real destination rather than the proxy's.
func NoProxy(*http.Request) (*url.URL, error) { return nil, nil }
