package workloadapis

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/warning"
	api "k8s.io/kubernetes/pkg/apis/core"
	svcreg "k8s.io/kubernetes/pkg/registry/core/service"
	"k8s.io/utils/ptr"

	"github.com/kcpsql/kcp/schema/workload"
)

const loc = "root:compute"

var keyA, keyB = workload.TargetKey(loc, "a"), workload.TargetKey(loc, "b")

// first and second are the targets a and b in key order.
func ordered() (first, second string) {
	if keyA < keyB {
		return "a", "b"
	}
	return "b", "a"
}

func newService(typ api.ServiceType, targets ...string) *api.Service {
	labels := map[string]string{}
	for _, t := range targets {
		labels[workload.StateLabel(loc, t)] = workload.StateSync
	}
	svc := &api.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", ResourceVersion: "1", Labels: labels},
		Spec: api.ServiceSpec{Type: typ, Selector: map[string]string{"app": "web"}, SessionAffinity: api.ServiceAffinityNone,
			InternalTrafficPolicy: ptr.To(api.ServiceInternalTrafficPolicyCluster),
			Ports: []api.ServicePort{{Name: "http", Port: 80, Protocol: api.ProtocolTCP, TargetPort: intstr.FromInt32(8080)},
				{Name: "admin", Port: 81, Protocol: api.ProtocolTCP, TargetPort: intstr.FromInt32(8081)}}},
	}
	if typ == api.ServiceTypeNodePort || typ == api.ServiceTypeLoadBalancer {
		svc.Spec.ExternalTrafficPolicy = api.ServiceExternalTrafficPolicyCluster
	}
	if typ == api.ServiceTypeLoadBalancer {
		svc.Spec.AllocateLoadBalancerNodePorts = ptr.To(true)
	}
	return svc
}

// report is the annotation a target's syncer writes.
func report(t *testing.T, svc *api.Service, target string, ips []string, nodePorts map[string]int32) {
	t.Helper()
	raw, err := json.Marshal(workload.ServiceAllocation{Target: loc + "/" + target, ClusterIPs: ips, NodePorts: nodePorts})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations[workload.StatusAnnotationPrefix+workload.TargetKey(loc, target)] = string(raw)
}

type recorder struct{ got []string }

func (r *recorder) AddWarning(_, text string) { r.got = append(r.got, text) }

func ctxWithWarnings() (context.Context, *recorder) {
	r := &recorder{}
	ctx := genericapirequest.WithNamespace(context.Background(), "default")
	return warning.WithWarningRecorder(ctx, r), r
}

// update runs a client's update through the strategy as the store does
// (prepare, then validate) and returns the stored object.
func update(t *testing.T, status bool, svc, old *api.Service) (*api.Service, []string, error) {
	t.Helper()
	ctx, warnings := ctxWithWarnings()
	svc = svc.DeepCopy()
	if status {
		st := serviceStatusStrategy{svcreg.StatusStrategy}
		st.PrepareForUpdate(ctx, svc, old)
		if errs := st.ValidateUpdate(ctx, svc, old); len(errs) > 0 {
			return svc, warnings.got, errs.ToAggregate()
		}
		return svc, warnings.got, nil
	}
	serviceStrategyWithIPs.PrepareForUpdate(ctx, svc, old)
	if errs := serviceStrategyWithIPs.ValidateUpdate(ctx, svc, old); len(errs) > 0 {
		return svc, warnings.got, errs.ToAggregate()
	}
	return svc, warnings.got, nil
}

func shows(t *testing.T, what string, svc *api.Service, ip string, http, admin int32) {
	t.Helper()
	wantIPs := []string{ip}
	if ip == "" {
		wantIPs = nil
	}
	if svc.Spec.ClusterIP != ip || len(svc.Spec.ClusterIPs) != len(wantIPs) || (ip != "" && svc.Spec.ClusterIPs[0] != ip) {
		t.Errorf("%s: clusterIP %q clusterIPs %v, want %q", what, svc.Spec.ClusterIP, svc.Spec.ClusterIPs, ip)
	}
	if got := [2]int32{svc.Spec.Ports[0].NodePort, svc.Spec.Ports[1].NodePort}; got != [2]int32{http, admin} {
		t.Errorf("%s: node ports %v, want [%d %d]", what, got, http, admin)
	}
}

func listed(svc *api.Service) []string {
	var out []string
	var list []workload.ServiceAllocation
	_ = json.Unmarshal([]byte(svc.Annotations[workload.AllocationsAnnotation]), &list)
	for _, a := range list {
		out = append(out, a.Target+"="+strings.Join(a.ClusterIPs, ","))
	}
	return out
}

func TestServiceShowsTheAllocationOfItsCluster(t *testing.T) {
	// Created with addresses of the client's own: not used (each physical
	// cluster allocates its own), with a warning.
	ctx, warnings := ctxWithWarnings()
	created := newService(api.ServiceTypeNodePort, "a")
	created.Spec.ClusterIP = "10.96.0.10"
	created.Spec.Ports[0].NodePort = 30080
	serviceStrategyWithIPs.PrepareForCreate(ctx, created)
	shows(t, "created", created, "", 0, 0)
	if len(warnings.got) != 2 || !strings.Contains(warnings.got[0], "10.96.0.10] is not used") || !strings.Contains(warnings.got[1], "nodePort 30080 is not used") {
		t.Errorf("create warnings: %q", warnings.got)
	}
	if errs := serviceStrategyWithIPs.Validate(ctx, created); len(errs) > 0 {
		t.Fatalf("created: %v", errs)
	}

	// The syncer reports through the status subresource: the spec shows it.
	reported := created.DeepCopy()
	report(t, reported, "a", []string{"10.96.4.7"}, map[string]int32{"http": 31001, "admin": 31002})
	stored, w, err := update(t, true, reported, created)
	if err != nil || len(w) > 0 {
		t.Fatalf("status write: %v %q", err, w)
	}
	shows(t, "reported", stored, "10.96.4.7", 31001, 31002)
	if got := listed(stored); len(got) != 1 || got[0] != loc+"/a=10.96.4.7" {
		t.Errorf("listed: %v", got)
	}

	// A tenant's update that omits them keeps them, silently.
	omit := stored.DeepCopy()
	omit.Spec.ClusterIP, omit.Spec.ClusterIPs = "", nil
	omit.Spec.Ports[0].NodePort, omit.Spec.Ports[1].NodePort = 0, 0
	omit.Labels["tier"] = "front"
	kept, w, err := update(t, false, omit, stored)
	if err != nil || len(w) > 0 {
		t.Fatalf("update omitting them: %v %q", err, w)
	}
	shows(t, "omitted", kept, "10.96.4.7", 31001, 31002)

	// The placement controller removes the only target's report: kcp
	// keeps it listed and shown.
	cleared := kept.DeepCopy()
	delete(cleared.Annotations, workload.StatusAnnotationPrefix+keyA)
	kept2, _, err := update(t, false, cleared, kept)
	if err != nil {
		t.Fatal(err)
	}
	shows(t, "report removed", kept2, "10.96.4.7", 31001, 31002)

	// Other values of the tenant's are not used, with a warning; not even
	// another workspace's address.
	forged := kept2.DeepCopy()
	forged.Spec.ClusterIP, forged.Spec.ClusterIPs = "10.96.0.1", []string{"10.96.0.1"}
	forged.Spec.Ports[1].NodePort = 32000
	replaced, w, err := update(t, false, forged, kept2)
	if err != nil {
		t.Fatalf("update with other values: %v", err)
	}
	shows(t, "forged", replaced, "10.96.4.7", 31001, 31002)
	if len(w) != 2 {
		t.Errorf("warnings: %q", w)
	}

	// A report under a target's key that names another target counts for
	// nothing.
	lying := replaced.DeepCopy()
	raw, _ := json.Marshal(workload.ServiceAllocation{Target: loc + "/b", ClusterIPs: []string{"10.96.9.9"}})
	lying.Annotations[workload.StatusAnnotationPrefix+keyA] = string(raw)
	notTaken, _, err := update(t, true, lying, replaced)
	if err != nil {
		t.Fatal(err)
	}
	shows(t, "report naming another target", notTaken, "10.96.4.7", 31001, 31002)

	// A tenant cannot make it headless (as upstream refuses).
	headless := notTaken.DeepCopy()
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = "None", []string{"None"}
	headless.Spec.Type = api.ServiceTypeClusterIP
	for i := range headless.Spec.Ports {
		headless.Spec.Ports[i].NodePort = 0
	}
	if _, _, err := update(t, false, headless, notTaken); err == nil || !strings.Contains(err.Error(), "may not change once set") {
		t.Errorf("making an allocated Service headless: %v", err)
	}

	// Type NodePort -> ClusterIP: the node ports go, the cluster IP stays.
	toClusterIP := notTaken.DeepCopy()
	toClusterIP.Spec.Type = api.ServiceTypeClusterIP
	ci, _, err := update(t, false, toClusterIP, notTaken)
	if err != nil {
		t.Fatalf("to ClusterIP: %v", err)
	}
	shows(t, "to ClusterIP", ci, "10.96.4.7", 0, 0)

	// The Service moves from a to b: nothing shown until b reports, then
	// b's, and a drops out of the list.
	moved := notTaken.DeepCopy()
	delete(moved.Labels, workload.StateLabel(loc, "a"))
	delete(moved.Annotations, workload.StatusAnnotationPrefix+keyA)
	moved.Labels[workload.StateLabel(loc, "b")] = workload.StateSync
	m1, _, err := update(t, false, moved, notTaken)
	if err != nil {
		t.Fatalf("move: %v", err)
	}
	shows(t, "moved, not reported", m1, "", 0, 0)
	if got := listed(m1); len(got) != 0 {
		t.Errorf("listed after the move: %v", got)
	}
	r := m1.DeepCopy()
	report(t, r, "b", []string{"10.97.0.3"}, map[string]int32{"http": 30500})
	m2, _, err := update(t, true, r, m1)
	if err != nil {
		t.Fatalf("b's report: %v", err)
	}
	shows(t, "moved, reported", m2, "10.97.0.3", 30500, 0)
}

func TestServiceOnTwoClustersShowsTheFirst(t *testing.T) {
	first, second := ordered()
	svc := newService(api.ServiceTypeClusterIP, "a", "b")
	ctx, _ := ctxWithWarnings()
	serviceStrategyWithIPs.PrepareForCreate(ctx, svc)

	// The second target's report alone shows nothing: the spec is the
	// first's, which has not reported.
	r := svc.DeepCopy()
	report(t, r, second, []string{"10.96.2.2"}, nil)
	s1, _, err := update(t, true, r, svc)
	if err != nil {
		t.Fatal(err)
	}
	shows(t, "second reported", s1, "", 0, 0)
	r = s1.DeepCopy()
	report(t, r, first, []string{"10.96.1.1"}, nil)
	s2, _, err := update(t, true, r, s1)
	if err != nil {
		t.Fatal(err)
	}
	shows(t, "both reported", s2, "10.96.1.1", 0, 0)
	if got := listed(s2); len(got) != 2 || got[0] != loc+"/"+first+"=10.96.1.1" || got[1] != loc+"/"+second+"=10.96.2.2" {
		t.Errorf("listed: %v", got)
	}
	// The second's new allocation is listed; the spec stays the first's.
	r = s2.DeepCopy()
	report(t, r, second, []string{"10.96.2.3"}, nil)
	s3, _, err := update(t, true, r, s2)
	if err != nil {
		t.Fatal(err)
	}
	shows(t, "second re-allocated", s3, "10.96.1.1", 0, 0)
	if got := listed(s3); len(got) != 2 || got[1] != loc+"/"+second+"=10.96.2.3" {
		t.Errorf("listed: %v", got)
	}
	// The first target leaves: the second's allocation is shown (the
	// cluster IP changes, which only kcp can do).
	gone := s3.DeepCopy()
	delete(gone.Labels, workload.StateLabel(loc, first))
	delete(gone.Annotations, workload.StatusAnnotationPrefix+workload.TargetKey(loc, first))
	s4, _, err := update(t, false, gone, s3)
	if err != nil {
		t.Fatalf("first target leaves: %v", err)
	}
	shows(t, "first left", s4, "10.96.2.3", 0, 0)
}

func TestHeadlessAndExternalNameServicesKeepTheirs(t *testing.T) {
	ctx, warnings := ctxWithWarnings()
	headless := newService(api.ServiceTypeClusterIP, "a")
	headless.Spec.ClusterIP = "None"
	serviceStrategyWithIPs.PrepareForCreate(ctx, headless)
	if headless.Spec.ClusterIP != "None" || len(headless.Spec.ClusterIPs) != 1 || len(warnings.got) > 0 {
		t.Fatalf("headless created: %q %v %q", headless.Spec.ClusterIP, headless.Spec.ClusterIPs, warnings.got)
	}
	r := headless.DeepCopy()
	report(t, r, "a", []string{"None"}, nil)
	h1, _, err := update(t, true, r, headless)
	if err != nil {
		t.Fatal(err)
	}
	omit := h1.DeepCopy()
	omit.Spec.ClusterIP, omit.Spec.ClusterIPs = "", nil
	h2, _, err := update(t, false, omit, h1)
	if err != nil || h2.Spec.ClusterIP != "None" {
		t.Errorf("headless updated without clusterIP: %v %q", err, h2.Spec.ClusterIP)
	}

	ext := newService(api.ServiceTypeExternalName, "a")
	ext.Spec.ExternalName, ext.Spec.Selector, ext.Spec.InternalTrafficPolicy = "db.example.com", nil, nil
	serviceStrategyWithIPs.PrepareForCreate(ctx, ext)
	r = ext.DeepCopy()
	report(t, r, "a", nil, nil)
	e1, _, err := update(t, true, r, ext)
	if err != nil || e1.Spec.ClusterIP != "" || e1.Spec.ExternalName != "db.example.com" {
		t.Errorf("ExternalName: %v %+v", err, e1.Spec)
	}
}

func TestAllocationOfADownstreamService(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.5", ClusterIPs: []string{"10.96.0.5"}, HealthCheckNodePort: 32100,
		Ports: []corev1.ServicePort{{Name: "http", NodePort: 30001}, {Name: "grpc"}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}}}}
	a := workload.AllocationOf(loc+"/a", svc)
	if a.Key() != keyA || a.ClusterIPs[0] != "10.96.0.5" || a.NodePorts["http"] != 30001 || len(a.NodePorts) != 1 || a.HealthCheckNodePort != 32100 || a.LoadBalancer[0].IP != "192.0.2.1" {
		t.Errorf("allocation: %+v", a)
	}
	raw, _ := json.Marshal(a)
	if _, err := workload.ParseServiceAllocation(keyB, string(raw)); err == nil {
		t.Error("a's report taken as b's")
	}
	if _, err := workload.ParseServiceAllocation(keyA, string(raw)); err != nil {
		t.Error(err)
	}
}

func TestLocalLoadBalancerWithoutHealthCheckNodePortIsValid(t *testing.T) {
	ctx, _ := ctxWithWarnings()
	lb := newService(api.ServiceTypeLoadBalancer, "a")
	lb.Spec.ExternalTrafficPolicy = api.ServiceExternalTrafficPolicyLocal
	serviceStrategyWithIPs.PrepareForCreate(ctx, lb)
	if errs := serviceStrategyWithIPs.Validate(ctx, lb); len(errs) > 0 {
		t.Fatalf("a local LoadBalancer before its cluster allocated: %v", errs)
	}
	lb.Spec.HealthCheckNodePort = 70000
	if errs := serviceStrategyWithIPs.Validate(ctx, lb); len(errs) == 0 {
		t.Error("an invalid health check node port passed")
	}
	lb.Spec.HealthCheckNodePort = 0
	r := lb.DeepCopy()
	raw, _ := json.Marshal(workload.ServiceAllocation{Target: loc + "/a", ClusterIPs: []string{"10.96.0.9"}, HealthCheckNodePort: 32222})
	r.Annotations = map[string]string{workload.StatusAnnotationPrefix + keyA: string(raw)}
	got, _, err := update(t, true, r, lb)
	if err != nil || got.Spec.HealthCheckNodePort != 32222 {
		t.Fatalf("reported: %v %d", err, got.Spec.HealthCheckNodePort)
	}
	omit := got.DeepCopy()
	omit.Spec.HealthCheckNodePort = 0
	kept, _, err := update(t, false, omit, got)
	if err != nil || kept.Spec.HealthCheckNodePort != 32222 {
		t.Errorf("update omitting it: %v %d", err, kept.Spec.HealthCheckNodePort)
	}
}
