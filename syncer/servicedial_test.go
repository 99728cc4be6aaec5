package syncer

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestServiceDialPaths: a service dial names a namespace, a Service and a
// port, nothing else.
func TestServiceDialPaths(t *testing.T) {
	if ns, name, port, ok := parseServiceDialPath(ServiceDialPath("kcp-0123456789abcdef", "hook", 443)); !ok || ns != "kcp-0123456789abcdef" || name != "hook" || port != 443 {
		t.Errorf("round trip: %s %s %d %v", ns, name, port, ok)
	}
	for _, p := range []string{
		ServiceDialPrefix + "ns/hook",
		ServiceDialPrefix + "ns/hook/0",
		ServiceDialPrefix + "ns/hook/65536",
		ServiceDialPrefix + "ns/hook/0443",
		ServiceDialPrefix + "ns/hook/443/x",
		ServiceDialPrefix + "../hook/443",
		ServiceDialPrefix + "ns/Hook/443",
		ServiceDialPrefix + "ns/1hook/443",
		ServiceDialPrefix + "ns/hook.other/443",
		"/api/v1/namespaces/ns/services/hook/proxy",
	} {
		if _, _, _, ok := parseServiceDialPath(p); ok {
			t.Errorf("%s: accepted", p)
		}
	}
}

// TestReadyEndpoints: only ready endpoints of the Service's pods, from
// slices the physical cluster's endpointslice controller made for that
// very Service, on the port the Service maps to, are dialed.
func TestReadyEndpoints(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: "ns", UID: "svc-uid"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "hook"},
			Ports: []corev1.ServicePort{{Name: "https", Port: 443}, {Name: "metrics", Port: 8080}}},
	}
	yes, no := true, false
	owned := func(name string, uid types.UID, managedBy string, port int32, portName string, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		ctrl := true
		return discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
				Labels:          map[string]string{discoveryv1.LabelServiceName: "hook", discoveryv1.LabelManagedBy: managedBy},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "hook", UID: uid, Controller: &ctrl}}},
			Ports:     []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
			Endpoints: eps,
		}
	}
	ep := func(ip, pod string, ready *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod}}
	}
	const ctl = "endpointslice-controller.k8s.io"
	for _, c := range []struct {
		name   string
		svc    *corev1.Service
		port   int32
		slices []discoveryv1.EndpointSlice
		want   []string
		err    string
	}{
		{"the controller's ready endpoint", svc, 443, []discoveryv1.EndpointSlice{owned("a", "svc-uid", ctl, 9443, "https", ep("10.0.0.5", "p1", &yes))}, []string{"10.0.0.5:9443"}, ""},
		{"the port is the service port's target", svc, 8080, []discoveryv1.EndpointSlice{owned("a", "svc-uid", ctl, 9443, "https", ep("10.0.0.5", "p1", &yes)), owned("b", "svc-uid", ctl, 9090, "metrics", ep("10.0.0.5", "p1", &yes))}, []string{"10.0.0.5:9090"}, ""},
		{"not ready", svc, 443, []discoveryv1.EndpointSlice{owned("a", "svc-uid", ctl, 9443, "https", ep("10.0.0.5", "p1", &no), ep("10.0.0.6", "p2", nil))}, nil, "none ready"},
		{"another manager's slice", svc, 443, []discoveryv1.EndpointSlice{owned("a", "svc-uid", "tenant.example.com", 9443, "https", ep("10.0.0.5", "p1", &yes))}, nil, "no ready pod"},
		{"the controller's label, another owner", svc, 443, []discoveryv1.EndpointSlice{owned("a", "other-uid", ctl, 9443, "https", ep("10.0.0.5", "p1", &yes))}, nil, "no ready pod"},
		{"not a pod", svc, 443, []discoveryv1.EndpointSlice{owned("a", "svc-uid", ctl, 9443, "https", discoveryv1.Endpoint{Addresses: []string{"10.0.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}})}, nil, "no ready pod"},
		{"loopback", svc, 443, []discoveryv1.EndpointSlice{owned("a", "svc-uid", ctl, 9443, "https", ep("127.0.0.1", "p1", &yes), ep("169.254.169.254", "p2", &yes))}, nil, "no ready pod"},
		{"no such port", svc, 444, nil, nil, "no TCP port 444"},
		{"selectorless", &corev1.Service{ObjectMeta: svc.ObjectMeta, Spec: corev1.ServiceSpec{Ports: svc.Spec.Ports}}, 443, nil, nil, "no pod selector"},
	} {
		got, err := readyEndpoints(c.svc, c.port, c.slices)
		var addrs []string
		for _, g := range got {
			addrs = append(addrs, g.addr)
		}
		if strings.Join(addrs, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: endpoints %v, want %v", c.name, addrs, c.want)
		}
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
		if err != nil && c.err != "" && !strings.Contains(c.err, "port") && !strings.Contains(c.err, "selector") && !errors.Is(err, ErrNoEndpoint) {
			t.Errorf("%s: %v does not wrap ErrNoEndpoint", c.name, err)
		}
	}
}
