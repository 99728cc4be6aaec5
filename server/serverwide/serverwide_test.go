package serverwide

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestIsServerWide(t *testing.T) {
	for path, want := range map[string]bool{
		"/metrics": true, "/debug/pprof/": true, "/debug/flags/v": true, "/statusz": true, "/flagz": true,
		"/debug/api_priority_and_fairness/dump_requests": true, "/healthz": true, "/readyz/etcd": true, "/": true,
		"/apix": true, "/versionz": true, "/metrics/slis": true,
		"/api": false, "/api/v1": false, "/apis": false, "/apis/apps/v1": false, "/openapi/v2": false,
		"/openapi/v3/apis/apps/v1": false, "/version": false, "/.well-known/openid-configuration": false, "/openid/v1/jwks": false,
	} {
		if got := IsServerWide(path); got != want {
			t.Errorf("IsServerWide(%q) = %v, want %v", path, got, want)
		}
	}
}

type rootAllows struct{}

func (rootAllows) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionAllow, `RBAC: allowed by ClusterRoleBinding "root-secret-binding"`, nil
}

func (rootAllows) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(rootAllows{}.Authorize(ctx, a))
}

func (rootAllows) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionNoOpinion, "", nil
}

// A request for a server-wide URL through a tenant's prefix is root's to
// decide; an access review in the tenant's cluster asking about that URL
// is answered for the tenant's cluster: root is not asked and not named.
func TestReviewStaysInCluster(t *testing.T) {
	a := Authorizer{Root: rootAllows{}, Next: rootAllows{}}
	attr := authorizer.AttributesRecord{Verb: "get", Path: "/metrics"}
	tenant := logicalcluster.WithCluster(context.Background(), "root:acme")
	serving := request.WithRequestInfo(tenant, &request.RequestInfo{IsResourceRequest: false, Path: "/metrics", Verb: "get"})
	if d, _, _ := a.Authorize(serving, attr); d != authorizer.DecisionAllow {
		t.Errorf("the request itself: %v, want root's allow", d)
	}
	sar := request.WithRequestInfo(tenant, &request.RequestInfo{IsResourceRequest: true, APIGroup: "authorization.k8s.io", Resource: "subjectaccessreviews", Verb: "create"})
	d, reason, _ := a.Authorize(sar, attr)
	c := a.ConditionsAwareAuthorize(sar, attr)
	for _, got := range []struct {
		allowed bool
		reason  string
	}{{d == authorizer.DecisionAllow, reason}, {c.IsAllow(), c.Reason()}} {
		if got.allowed || strings.Contains(got.reason, "root-secret-binding") || !strings.Contains(got.reason, "root:acme") {
			t.Errorf("a review in root:acme about /metrics: allowed %v, %q; want no allow, no root names, the cluster named", got.allowed, got.reason)
		}
	}
	inRoot := request.WithRequestInfo(logicalcluster.WithCluster(context.Background(), logicalcluster.Root), &request.RequestInfo{IsResourceRequest: true})
	if d, _, _ := a.Authorize(inRoot, attr); d != authorizer.DecisionAllow {
		t.Errorf("a review in root: %v, want root's answer", d)
	}
}
