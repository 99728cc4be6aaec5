package outbound

import (
	"net"
	"testing"
)

func TestCheckIP(t *testing.T) {
	_, lab, _ := net.ParseCIDR("10.20.0.0/16")
	for _, tc := range []struct {
		ip      string
		allowed []*net.IPNet
		ok      bool
	}{
		{"127.0.0.1", nil, false}, {"::1", nil, false}, {"::ffff:127.0.0.1", nil, false}, {"169.254.169.254", nil, false},
		{"10.20.1.1", nil, false}, {"192.168.1.1", nil, false}, {"fd00::1", nil, false}, {"0.0.0.0", nil, false},
		{"203.0.113.7", nil, true}, {"8.8.8.8", nil, true}, {"2001:db8::1", nil, true},
		{"10.20.1.1", []*net.IPNet{lab}, true}, {"10.21.1.1", []*net.IPNet{lab}, false},
	} {
		p := &Policy{Allowed: tc.allowed}
		if err := p.CheckIP(net.ParseIP(tc.ip)); (err == nil) != tc.ok {
			t.Errorf("CheckIP(%s) with %v = %v, want allowed=%v", tc.ip, tc.allowed, err, tc.ok)
		}
	}
}
