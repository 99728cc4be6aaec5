package syncer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// Service dials: kcp calls a webhook (admission or CRD conversion) served
// by a Service of a workspace whose pods run on a physical cluster by
// asking the SyncTarget's syncer, through its tunnel, for a TCP connection
// to one ready endpoint of that Service:
//
//	GET ServiceDialPrefix<downstream namespace>/<service>/<port>
//	Connection: Upgrade
//	Upgrade: ServiceDialProtocol
//
// answered 101 and then the raw connection (kcp speaks TLS on it, verified
// against the webhook's caBundle), or an error status with a text saying
// why. Push mode does the same from kcp with kcp's configuration of the
// cluster (ServiceEndpoints). Only endpoints the physical cluster's
// endpointslice controller found for the Service's own pods are dialed:
// never an address anyone wrote.
const (
	ServiceDialPrefix   = "/kcp/service-dial/"
	ServiceDialProtocol = "kcp-service-dial"
)

// Labels and values the endpointslice controller of a physical cluster
// puts on the slices it manages.
const (
	serviceNameLabel       = discoveryv1.LabelServiceName
	managedByLabel         = discoveryv1.LabelManagedBy
	endpointSliceControler = "endpointslice-controller.k8s.io"
)

// ServiceDialPath is the tunnel path of a dial to port of Service name in
// a downstream namespace.
func ServiceDialPath(namespace, name string, port int32) string {
	return ServiceDialPrefix + namespace + "/" + name + "/" + strconv.Itoa(int(port))
}

// parseServiceDialPath checks a service dial's path.
func parseServiceDialPath(p string) (namespace, name string, port int32, ok bool) {
	rest, found := strings.CutPrefix(p, ServiceDialPrefix)
	if !found {
		return "", "", 0, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || len(validation.IsDNS1123Label(parts[0])) > 0 || len(validation.IsDNS1035Label(parts[1])) > 0 {
		return "", "", 0, false
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != parts[2] {
		return "", "", 0, false
	}
	return parts[0], parts[1], int32(n), true
}

// ErrNoEndpoint is wrapped when a Service has no endpoint that may be
// called (none ready, none reachable).
var ErrNoEndpoint = errors.New("no ready endpoint")

// ServiceEndpoints finds and dials the endpoints of the Services one
// syncer synced to its physical cluster.
type ServiceEndpoints struct {
	// Client reads the physical cluster.
	Client kubernetes.Interface
	// Key is the SyncTarget's key (TargetLabel).
	Key string
	// Dial connects to an endpoint (a net.Dialer's by default).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// candidate is one ready endpoint address.
type candidate struct {
	addr, pod string
}

// DialService connects to port of Service name in a downstream namespace
// of the target: to one ready endpoint of the Service's own pods, on the
// port the Service maps port to. The namespace and the Service must be the
// syncer's (TargetLabel); the endpoints come only from the EndpointSlices
// the physical cluster's endpointslice controller manages for that Service
// (controlled by it, same UID), so nothing a tenant or anyone else wrote
// decides the address.
func (e ServiceEndpoints) DialService(ctx context.Context, namespace, name string, port int32) (net.Conn, error) {
	cands, err := e.endpoints(ctx, namespace, name, port)
	if err != nil {
		return nil, err
	}
	dial := e.Dial
	if dial == nil {
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	var errs []string
	for _, c := range cands {
		conn, err := dial(ctx, "tcp", c.addr)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, fmt.Sprintf("pod %s at %s: %v", c.pod, c.addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("%w reachable: %s", ErrNoEndpoint, strings.Join(errs, "; "))
}

// endpoints lists the ready endpoints of a Service's port.
func (e ServiceEndpoints) endpoints(ctx context.Context, namespace, name string, port int32) ([]candidate, error) {
	ns, err := e.Client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && ns.Labels[TargetLabel] != e.Key) {
		return nil, fmt.Errorf("the namespace is not one this syncer synced to its physical cluster (not there yet?)")
	}
	if err != nil {
		return nil, fmt.Errorf("reading the namespace on the physical cluster: %v", err)
	}
	svc, err := e.Client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && svc.Labels[TargetLabel] != e.Key) {
		return nil, fmt.Errorf("the Service is not on the physical cluster (not synced there yet?)")
	}
	if err != nil {
		return nil, fmt.Errorf("reading the Service on the physical cluster: %v", err)
	}
	slices, err := e.Client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: serviceNameLabel + "=" + name + "," + managedByLabel + "=" + endpointSliceControler,
	})
	if err != nil {
		return nil, fmt.Errorf("listing the Service's EndpointSlices on the physical cluster: %v", err)
	}
	out, err := readyEndpoints(svc, port, slices.Items)
	if err != nil {
		return nil, err
	}
	// A host-network pod's address is its node's: refused, the port
	// would be any of the node's.
	kept := out[:0]
	for _, c := range out {
		pod, err := e.Client.CoreV1().Pods(namespace).Get(ctx, c.pod, metav1.GetOptions{})
		if err != nil || pod.Spec.HostNetwork {
			continue
		}
		kept = append(kept, c)
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("%w: the Service's ready pods use the host network (kcp does not call a node's address)", ErrNoEndpoint)
	}
	return kept, nil
}

// readyEndpoints picks, from a Service's EndpointSlices, the ready
// endpoints of its pods on the port the Service maps port to: only from
// slices the endpointslice controller manages and that the Service
// controls (its UID), only endpoints of pods, not terminating, with an
// address that is not the host's own (loopback, link-local, unspecified).
func readyEndpoints(svc *corev1.Service, port int32, slices []discoveryv1.EndpointSlice) ([]candidate, error) {
	if len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, fmt.Errorf("the Service has no pod selector: kcp calls only the endpoints the physical cluster finds for the Service's own pods")
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.Port == port && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
			sp = p
		}
	}
	if sp == nil {
		return nil, fmt.Errorf("the Service has no TCP port %d", port)
	}
	var out []candidate
	notReady := 0
	for i := range slices {
		s := &slices[i]
		if s.Labels[managedByLabel] != endpointSliceControler || s.Labels[serviceNameLabel] != svc.Name || !metav1.IsControlledBy(s, svc) {
			continue
		}
		target := int32(-1)
		for _, p := range s.Ports {
			if p.Port != nil && ptrString(p.Name) == sp.Name && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
				target = *p.Port
			}
		}
		if target < 1 || target > 65535 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" || len(ep.Addresses) == 0 {
				continue
			}
			if ep.Conditions.Ready == nil || !*ep.Conditions.Ready || (ep.Conditions.Terminating != nil && *ep.Conditions.Terminating) {
				notReady++
				continue
			}
			ip := net.ParseIP(ep.Addresses[0])
			if ip == nil || ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsMulticast() {
				continue
			}
			out = append(out, candidate{addr: net.JoinHostPort(ip.String(), strconv.Itoa(int(target))), pod: ep.TargetRef.Name})
		}
	}
	if len(out) == 0 {
		if notReady > 0 {
			return nil, fmt.Errorf("%w: %d endpoint(s) of the Service's pods, none ready", ErrNoEndpoint, notReady)
		}
		return nil, fmt.Errorf("%w: no ready pod of the Service runs on this physical cluster", ErrNoEndpoint)
	}
	return out, nil
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// serveServiceDial answers a service dial sent through the tunnel: it
// dials and then copies bytes both ways until either side closes.
func serveServiceDial(w http.ResponseWriter, req *http.Request, eps ServiceEndpoints) {
	namespace, name, port, ok := parseServiceDialPath(req.URL.Path)
	if !ok || req.Method != http.MethodGet || !strings.EqualFold(req.Header.Get("Upgrade"), ServiceDialProtocol) {
		http.Error(w, "syncer tunnel: a service dial is GET "+ServiceDialPrefix+"<namespace>/<service>/<port> with Upgrade: "+ServiceDialProtocol, http.StatusForbidden)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 20*time.Second)
	conn, err := eps.DialService(ctx, namespace, name, port)
	cancel()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer conn.Close()
	up, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "syncer tunnel: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer up.Close()
	up.SetDeadline(time.Time{})
	if _, err := io.WriteString(up, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+ServiceDialProtocol+"\r\n\r\n"); err != nil {
		return
	}
	Pipe(&bufferedConn{Conn: up, r: buf.Reader}, conn)
}

// Pipe copies bytes both ways between a and b until either ends, then
// closes both.
func Pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

// DialThroughTunnel asks the syncer at the other end of a tunnel stream
// for a connection to a Service's endpoint (ServiceDialPath); the stream
// becomes that connection. The error carries the syncer's reason.
func DialThroughTunnel(ctx context.Context, stream net.Conn, namespace, name string, port int32) (net.Conn, error) {
	if dl, ok := ctx.Deadline(); ok {
		stream.SetDeadline(dl)
	} else {
		stream.SetDeadline(time.Now().Add(30 * time.Second))
	}
	req, err := http.NewRequest(http.MethodGet, "http://syncer-tunnel"+ServiceDialPath(namespace, name, port), nil)
	if err != nil {
		stream.Close()
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", ServiceDialProtocol)
	if err := req.Write(stream); err != nil {
		stream.Close()
		return nil, fmt.Errorf("asking the syncer: %v", err)
	}
	br := bufio.NewReader(stream)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		stream.Close()
		return nil, fmt.Errorf("reading the syncer's answer: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		stream.Close()
		msg := strings.TrimSpace(string(body))
		if msg == "" {
			msg = resp.Status
		}
		return nil, errors.New(msg)
	}
	stream.SetDeadline(time.Time{})
	return &bufferedConn{Conn: stream, r: br}, nil
}
