package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

const tenantFlowSchema = `apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: batch}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: batch-jobs}
spec:
  priorityLevelConfiguration: {name: batch}
  matchingPrecedence: 1000
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: User, user: {name: batcher}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
`

// TestPriorityAndFairnessPerTenant is issue 17's fair sharing: root's
// configuration sees every tenant as one flow of its kcp-tenants level,
// whatever user or group the tenant's request carries (a tenant's
// service account in kube-system is not root's kube-system); a tenant's
// own FlowSchema and priority level classify its requests (the response
// headers name them) and apply in that tenant only; root's requests keep
// root's classification.
func TestPriorityAndFairnessPerTenant(t *testing.T) {
	s := framework.StartServer(t, "")
	const a, b = "root:apf-a", "root:apf-b"
	s.CreateWorkspaces(a, b)
	ctx := context.Background()
	root := s.Client("root")
	uid := func(kind, name string) string {
		t.Helper()
		switch kind {
		case "fs":
			fs, err := root.FlowcontrolV1().FlowSchemas().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return string(fs.UID)
		default:
			pl, err := root.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return string(pl.UID)
		}
	}
	tenantsFS, tenantsPL := uid("fs", "kcp-tenants"), uid("pl", "kcp-tenants")
	globalFS, workloadHighFS := uid("fs", "global-default"), uid("fs", "kube-system-service-accounts")

	// classified returns the FlowSchema UID a request as user (groups) in
	// cluster was classified by; the admin impersonates, as the
	// conformance spec does.
	admin := framework.UserClient(t, s, "apf-admin", "system:masters")
	classified := func(cluster, user string, groups ...string) (string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL()+"/clusters/"+cluster+"/api/v1/namespaces/default/configmaps", nil)
		req.Header.Set("Impersonate-User", user)
		for _, g := range groups {
			req.Header.Add("Impersonate-Group", g)
		}
		resp, err := admin.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"), resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
	}
	if fs, pl := classified(a, "alice", "system:authenticated"); fs != tenantsFS || pl != tenantsPL {
		t.Errorf("a tenant's user: classified by %s/%s, want root's kcp-tenants %s/%s", fs, pl, tenantsFS, tenantsPL)
	}
	if fs, _ := classified(a, "system:serviceaccount:kube-system:robot", "system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"); fs != tenantsFS {
		t.Errorf("a tenant's kube-system service account: classified by %s, want kcp-tenants %s (not workload-high %s)", fs, tenantsFS, workloadHighFS)
	}
	if fs, _ := classified("root", "alice", "system:authenticated"); fs != globalFS {
		t.Errorf("root's user: classified by %s, want root's global-default %s", fs, globalFS)
	}

	// A's own FlowSchema classifies A's batcher, not B's.
	if out, err := s.KubectlErr(a, tenantFlowSchema, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	fs, err := s.Client(a).FlowcontrolV1().FlowSchemas().Get(ctx, "batch-jobs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := s.Client(a).FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, "batch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "A's FlowSchema classifies A's batcher", func() (bool, string) {
		gotFS, gotPL := classified(a, "batcher", "system:authenticated")
		return gotFS == string(fs.UID) && gotPL == string(pl.UID), fmt.Sprintf("%s/%s", gotFS, gotPL)
	})
	if got, _ := classified(b, "batcher", "system:authenticated"); got != tenantsFS {
		t.Errorf("B's batcher: classified by %s, want kcp-tenants %s", got, tenantsFS)
	}
	if got, _ := classified("root", "batcher", "system:authenticated"); got != globalFS {
		t.Errorf("root's batcher: classified by %s, want global-default %s", got, globalFS)
	}
	// A tenant's wide list (its last answer held more than 100 objects)
	// goes to root's kcp-tenant-lists level, in that tenant only: B's small
	// list and root's list of the same size keep their levels.
	listsFS, listsPL := uid("fs", "kcp-tenant-lists"), uid("pl", "kcp-tenant-lists")
	for _, cluster := range []string{a, b, "root"} {
		// alice may list (upstream's APF runs before authorization, so a
		// forbidden list would be classified too, but has no size).
		if out, err := s.KubectlErr(cluster, "", "create", "clusterrolebinding", "alice-admin", "--clusterrole=cluster-admin", "--user=alice"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if cluster == b {
			continue
		}
		for i := range 101 {
			if _, err := s.Client(cluster).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("wide-%d", i)}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if fs, _ := classified(a, "alice", "system:authenticated"); fs != tenantsFS {
		t.Errorf("a tenant's first list of 101 objects: classified by %s, want kcp-tenants %s (its size is not known yet)", fs, tenantsFS)
	}
	if fs, pl := classified(a, "alice", "system:authenticated"); fs != listsFS || pl != listsPL {
		all, _ := root.FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{})
		for _, f := range all.Items {
			if string(f.UID) == fs {
				fs = f.Name
			}
		}
		t.Errorf("a tenant's list of 101 objects: classified by %s/%s, want kcp-tenant-lists %s/%s", fs, pl, listsFS, listsPL)
	}
	if fs, _ := classified(b, "alice", "system:authenticated"); fs != tenantsFS {
		t.Errorf("another tenant's small list: classified by %s, want kcp-tenants %s", fs, tenantsFS)
	}
	for range 2 {
		if fs, _ := classified("root", "alice", "system:authenticated"); fs != globalFS {
			t.Errorf("root's list of 101 objects: classified by %s, want global-default %s", fs, globalFS)
		}
	}
	// Root's own kcp-tenants objects are the operator's: a tenant cannot
	// see or change them from its workspace.
	if _, err := s.Client(a).FlowcontrolV1().FlowSchemas().Get(ctx, "kcp-tenants", metav1.GetOptions{}); err == nil {
		t.Error("root's kcp-tenants FlowSchema is visible in a tenant")
	}
}

// TestTenantSlotsYieldToWebhooks: with one execution slot per workspace
// (--tenant-max-inflight=1), a tenant's create waits for the workspace's
// admission webhook, which lists the same workspace as the same tenant
// before it answers. The waiting create gives its slot back, so the
// webhook's list runs and the create succeeds; held, the list would wait
// for the create and the webhook would time out.
func TestTenantSlotsYieldToWebhooks(t *testing.T) {
	var tenant atomic.Pointer[http.Client]
	var base string
	var callbacks atomic.Int32
	hook := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(rw, fmt.Sprint(err), http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: false,
			Result: &metav1.Status{Code: http.StatusForbidden, Message: "the webhook's own list failed"}}
		if c := tenant.Load(); c != nil {
			if lr, err := c.Get(base + "/api/v1/namespaces/default/configmaps"); err == nil {
				lr.Body.Close()
				if lr.StatusCode == http.StatusOK {
					callbacks.Add(1)
					resp.Allowed, resp.Result = true, nil
				}
			}
		}
		review.Response, review.Request = resp, nil
		json.NewEncoder(rw).Encode(review)
	}))
	hook.StartTLS()
	t.Cleanup(hook.Close)
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hook.Certificate().Raw}))

	s := framework.StartServer(t, "", "--webhook-allowed-networks=127.0.0.1/32", "--tenant-max-inflight=1")
	c := tenantAdmin(t, s, "slot-hooks", "slot-user")
	base = s.URL() + "/clusters/root:slot-hooks"
	tenant.Store(c)
	if out, err := s.KubectlErr("root:slot-hooks", webhookConfig("ValidatingWebhookConfiguration", "callback",
		`{url: "`+hook.URL+`/validate", caBundle: "`+ca+`"}`, "Fail", 5, "callback: \"yes\""), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	n := 0
	framework.Eventually(t, 60*time.Second, "the tenant's create passes its webhook, which lists the same workspace", func() (bool, string) {
		n++
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%d","labels":{"callback":"yes"}}}`, n)
		start := time.Now()
		resp, err := c.Post(base+"/api/v1/namespaces/default/configmaps", "application/json", strings.NewReader(body))
		if err != nil {
			return false, err.Error()
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusCreated && callbacks.Load() > 0,
			fmt.Sprintf("%d after %v (webhook's lists: %d): %s", resp.StatusCode, time.Since(start).Round(time.Millisecond), callbacks.Load(), msg)
	})
}
