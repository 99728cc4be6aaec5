package workloadapis

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/kubernetes/pkg/apis/apps"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/networking"
	svcreg "k8s.io/kubernetes/pkg/registry/core/service"

	"k8s.io/utils/ptr"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestUnplacedCondition(t *testing.T) {
	now := metav1.Now()
	d := &apps.Deployment{Status: apps.DeploymentStatus{Conditions: []apps.DeploymentCondition{{Type: "Available", Status: "True"}}}}
	if !setCondition(d, PlacedCondition, NoPlacementReason, "m", now) || !hasCondition(d, PlacedCondition, NoPlacementReason) {
		t.Fatalf("deployment: %+v", d.Status)
	}
	if c := d.Status.Conditions[1]; c.Type != PlacedCondition || c.Status != "False" || c.Message != "m" || !c.LastUpdateTime.Equal(&now) || !c.LastTransitionTime.Equal(&now) {
		t.Errorf("deployment condition: %+v", c)
	}
	setCondition(d, PlacedCondition, NoPlacementReason, "again", now)
	if len(d.Status.Conditions) != 2 || d.Status.Conditions[1].Message != "again" {
		t.Errorf("a second set replaces: %+v", d.Status.Conditions)
	}

	s := &api.Service{}
	if !setCondition(s, PlacedCondition, NoPlacementReason, "m", now) || len(s.Status.Conditions) != 1 || s.Status.Conditions[0].Reason != NoPlacementReason || !s.Status.Conditions[0].LastTransitionTime.Equal(&now) {
		t.Errorf("service: %+v", s.Status)
	}

	in := &networking.Ingress{}
	if setCondition(in, PlacedCondition, NoPlacementReason, "m", now) || hasConditions(in) || hasCondition(in, PlacedCondition, NoPlacementReason) {
		t.Errorf("an Ingress has no conditions")
	}
}

func TestUnplacedStrategy(t *testing.T) {
	unplaced := map[string]bool{"waiting": true}
	s := unplacedAware{RESTCreateStrategy: serviceStrategyWithIPs, resource: "services",
		unplaced: func(_ context.Context, _ logicalcluster.Name, ns string) bool { return unplaced[ns] }}
	for ns, want := range map[string]bool{"waiting": true, "placed": false} {
		ctx := genericapirequest.WithNamespace(logicalcluster.WithCluster(context.Background(), logicalcluster.Name("root:a")), ns)
		svc := &api.Service{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ns}, Spec: api.ServiceSpec{
			ClusterIP: "None", Type: api.ServiceTypeClusterIP, SessionAffinity: api.ServiceAffinityNone,
			InternalTrafficPolicy: ptr.To(api.ServiceInternalTrafficPolicyCluster)}}
		s.PrepareForCreate(ctx, svc)
		if got := hasCondition(svc, PlacedCondition, NoPlacementReason); got != want {
			t.Errorf("%s: condition %v, want %v", ns, got, want)
		}
		if got := len(s.WarningsOnCreate(ctx, svc)) > 0; got != want {
			t.Errorf("%s: warning %v, want %v", ns, got, want)
		}
		if len(svc.Spec.ClusterIPs) != 1 || svc.Spec.ClusterIPs[0] != "None" {
			t.Errorf("%s: clusterIPs %v", ns, svc.Spec.ClusterIPs)
		}
		if errs := svcreg.Strategy.Validate(ctx, svc); len(errs) > 0 {
			t.Errorf("%s: a headless Service is valid: %v", ns, errs)
		}
	}
}

func TestSyncClusterIPs(t *testing.T) {
	for _, tc := range []struct {
		typ        api.ServiceType
		ip         string
		ips        []string
		wantIP     string
		wantIPsLen int
	}{
		{ip: "None", wantIP: "None", wantIPsLen: 1},
		{ips: []string{"None"}, wantIP: "None", wantIPsLen: 1},
		{ip: "10.0.0.1", ips: []string{"10.0.0.1", "fd00::1"}, wantIP: "10.0.0.1", wantIPsLen: 2},
		{},
		{typ: api.ServiceTypeExternalName, ip: "None", wantIP: "None"},
	} {
		svc := &api.Service{Spec: api.ServiceSpec{Type: tc.typ, ClusterIP: tc.ip, ClusterIPs: tc.ips}}
		syncClusterIPs(svc)
		if svc.Spec.ClusterIP != tc.wantIP || len(svc.Spec.ClusterIPs) != tc.wantIPsLen {
			t.Errorf("%+v: got %q %v", tc, svc.Spec.ClusterIP, svc.Spec.ClusterIPs)
		}
	}
}
