package multicluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestSyncerAndAssignmentAttacks is the attack table of issue 49, items 5
// and 6, on both datastores: what a syncer credential (pc1's) and a
// tenant (mallory, admin of her workspace only) try against the data kcp
// owns. No physical cluster is needed: the test registers two
// SyncTargets with the real kubectl kcp workload sync and writes their
// heartbeats itself, so that a Placement assigns a namespace to pc1.
func TestSyncerAndAssignmentAttacks(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) { testSyncerAndAssignmentAttacks(t, framework.DatastoreFor(t, d)) })
	}
}

// attackClient sends raw requests (content types and bodies exactly as
// an attacker writes them).
type attackClient struct {
	t      *testing.T
	base   string
	client *http.Client
}

func (c attackClient) do(method, path, contentType, body string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.base+path, bytes.NewBufferString(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// syncerClient is a client with a syncer's kcp kubeconfig, and its
// location workspace.
func syncerClient(t *testing.T, kubeconfig string) (attackClient, string) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	base, location, err := syncer.SplitServer(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return attackClient{t: t, base: base, client: hc}, string(location)
}

// fakeHeartbeat writes what a syncer's heartbeat writes: Ready.
func fakeHeartbeat(t *testing.T, s *framework.Server, location, name string) {
	now := time.Now().UTC().Format(time.RFC3339)
	s.Kubectl(location, "patch", "synctarget", name, "--subresource=status", "--type=merge", "-p", fmt.Sprintf(
		`{"status":{"lastHeartbeatTime":%q,"conditions":[{"type":%q,"status":"True","reason":%q,"message":"written by the test","lastTransitionTime":%q}]}}`,
		now, workload.ConditionReady, workload.ReasonHeartbeat, now))
}

// kcpMeta is an object's metadata as the API server stores it.
func kcpMeta(t *testing.T, s *framework.Server, cluster, kind, name string) (metav1.ObjectMeta, map[string]string) {
	t.Helper()
	var obj struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Data     map[string]string `json:"data"`
	}
	if err := json.Unmarshal([]byte(s.Kubectl(cluster, "get", kind, name, "-o", "json")), &obj); err != nil {
		t.Fatal(err)
	}
	return obj.Metadata, obj.Data
}

func testSyncerAndAssignmentAttacks(t *testing.T, datastore string) {
	s := framework.StartServer(t, datastore, "--synctarget-heartbeat-timeout=1h")
	const compute, teamA = "root:compute", "root:team-a"
	s.CreateWorkspaces(compute, teamA)
	admin := adminIn(t, s, compute)
	creds := map[string]string{}
	for _, name := range []string{"pc1", "pc2"} {
		creds[name] = filepath.Join(t.TempDir(), name+"-syncer.kubeconfig")
		if out, err := s.KubectlPlugin(admin, "kcp", "workload", "sync", name, "--kcp-kubeconfig-out", creds[name], "--labels", "region="+name); err != nil {
			t.Fatalf("kubectl kcp workload sync %s: %v\n%s", name, err, out)
		}
		fakeHeartbeat(t, s, compute, name)
	}
	waitTargetsReady(t, s, compute, "pc1", "pc2")
	s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: pc1}
spec:
  locationWorkspace: `+compute+`
  locationSelector: {matchLabels: {region: pc1}}
  namespaceSelector: {}
`))
	framework.Eventually(t, 30*time.Second, "the Placement to assign default to pc1", func() (bool, string) {
		out := s.Kubectl(teamA, "get", "placement", "pc1", "-o", `jsonpath={.status.selectedTargets} {.status.namespaces} {.status.conditions[?(@.type=="Ready")].status}`)
		return out == `["root:compute/pc1"] 1 True`, out
	})
	l1, f1 := workload.StateLabel(compute, "pc1"), workload.Finalizer(compute, "pc1")
	l2, f2 := workload.StateLabel(compute, "pc2"), workload.Finalizer(compute, "pc2")
	l2Pointer := strings.ReplaceAll(l2, "/", "~1")
	s.Kubectl(teamA, "create", "configmap", "cfg", "--from-literal=color=blue")
	s.Kubectl(teamA, "create", "service", "clusterip", "web", "--tcp=80:80")
	for _, kind := range []string{"configmap/cfg", "service/web", "namespace/default"} {
		framework.Eventually(t, 30*time.Second, kind+" assigned to pc1", func() (bool, string) {
			m, _ := kcpMeta(t, s, teamA, strings.Split(kind, "/")[0], strings.Split(kind, "/")[1])
			return m.Labels[l1] == workload.StateSync && (kind == "namespace/default" || slices.Contains(m.Finalizers, f1)), fmt.Sprint(m.Labels, m.Finalizers)
		})
	}
	// assigned reports what an attacker would change: kcp's keys and the
	// tenant's data.
	assigned := func(kind, name string) string {
		m, data := kcpMeta(t, s, teamA, kind, name)
		var keys []string
		for k, v := range m.Labels {
			if strings.Contains(k, "kcp.io") {
				keys = append(keys, k+"="+v)
			}
		}
		for k, v := range m.Annotations {
			if strings.HasPrefix(k, "workload.kcp.io") {
				keys = append(keys, k+"="+v)
			}
		}
		slices.Sort(keys)
		return fmt.Sprintf("labels %v finalizers %v data %v", keys, m.Finalizers, data)
	}

	// Item 5: the syncer credential (pc1's) through its view.
	pc1, location := syncerClient(t, creds["pc1"])
	pc2, _ := syncerClient(t, creds["pc2"])
	view := "/services/syncer/" + location + "/pc1/clusters/" + teamA
	cfgBefore, webBefore := assigned("configmap", "cfg"), assigned("service", "web")
	for _, c := range []struct {
		what, path, ct, body string
	}{
		{"a JSON patch whose remove carries an add of tenant data in exact case (OP, PATH in upper case)", "/api/v1/namespaces/default/configmaps/cfg", "application/json-patch+json",
			`[{"op":"test","path":"/metadata/finalizers/0","value":"` + f1 + `"},{"op":"add","path":"/data/pwned","value":"by-syncer","OP":"remove","PATH":"/metadata/finalizers/0"}]`},
		{"a JSON patch whose remove carries another target's assignment label", "/api/v1/namespaces/default/configmaps/cfg", "application/json-patch+json",
			`[{"op":"test","path":"/metadata/finalizers/0","value":"` + f1 + `"},{"op":"add","path":"/metadata/labels/` + l2Pointer + `","value":"Sync","Op":"remove","Path":"/metadata/finalizers/0"}]`},
		{"a JSON patch whose test is an add (Op, Path in mixed case)", "/api/v1/namespaces/default/configmaps/cfg", "application/json-patch+json",
			`[{"op":"add","path":"/data/pwned","value":"` + f1 + `","Op":"test","Path":"/metadata/finalizers/0"},{"op":"remove","path":"/metadata/finalizers/0"}]`},
		{"a JSON patch replacing the finalizer with another target's", "/api/v1/namespaces/default/configmaps/cfg", "application/json-patch+json",
			`[{"op":"test","path":"/metadata/finalizers/0","value":"` + f1 + `"},{"op":"replace","path":"/metadata/finalizers/0","value":"` + f2 + `","OP":"remove","PATH":"/metadata/finalizers/0"}]`},
		{"a status merge patch with metadata in another letter case", "/api/v1/namespaces/default/services/web/status", "application/merge-patch+json",
			`{"status":{},"Metadata":{"labels":{"` + l2 + `":"Sync"}}}`},
		{"a status merge patch with status twice", "/api/v1/namespaces/default/services/web/status", "application/merge-patch+json",
			`{"status":{},"status":{"loadBalancer":{"ingress":[{"ip":"6.6.6.6"}]}}}`},
		{"a status strategic merge patch", "/api/v1/namespaces/default/services/web/status", "application/strategic-merge-patch+json",
			`{"metadata":{"labels":{"` + l2 + `":"Sync"}}}`},
		{"a status apply patch", "/api/v1/namespaces/default/services/web/status?fieldManager=x&force=true", "application/apply-patch+yaml",
			`{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","labels":{"` + l2 + `":"Sync"}}}`},
	} {
		code, body := pc1.do("PATCH", view+c.path, c.ct, c.body)
		if code != http.StatusForbidden || !strings.Contains(body, "a syncer may") {
			t.Errorf("syncer credential, %s: got %d, want 403 saying what a syncer may do: %s", c.what, code, body)
		}
	}
	if got := assigned("configmap", "cfg"); got != cfgBefore {
		t.Errorf("the syncer credential changed a tenant's ConfigMap:\n before %s\n after  %s", cfgBefore, got)
	}
	if got := assigned("service", "web"); got != webBefore {
		t.Errorf("the syncer credential changed a tenant's Service:\n before %s\n after  %s", webBefore, got)
	}

	// Its APIResourceImports: its own, not pc2's, by any route.
	imports := "/clusters/" + location + "/apis/apiresource.kcp.io/v1alpha1/apiresourceimports"
	for target, c := range map[string]attackClient{"pc1": pc1, "pc2": pc2} {
		if code, body := c.do("POST", imports, "application/json", `{"apiVersion":"apiresource.kcp.io/v1alpha1","kind":"APIResourceImport",
"metadata":{"name":"`+target+`.gadgets.example.com"},"spec":{"syncTarget":"`+target+`","crd":{"group":"example.com",
"names":{"plural":"gadgets","singular":"gadget","kind":"Gadget","listKind":"GadgetList"},"scope":"Namespaced",
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}}`); code != http.StatusCreated {
			t.Fatalf("%s writes its own import: %d %s", target, code, body)
		}
	}
	for _, c := range []struct {
		what      string
		client    attackClient
		path      string
		want      int
		forbidden string
	}{
		{"pc1 reads pc2's import", pc1, imports + "/pc2.gadgets.example.com", 403, "pc2"},
		{"pc1 reads pc2's import through its view", pc1, "/services/syncer/" + location + "/pc1" + imports + "/pc2.gadgets.example.com", 403, "pc2"},
		{"pc1 lists imports", pc1, imports, 403, "pc2"},
		{"pc1 lists imports through its view", pc1, "/services/syncer/" + location + "/pc1/clusters/*/apis/apiresource.kcp.io/v1alpha1/apiresourceimports", 200, "pc2"},
		{"pc1 watches imports", pc1, imports + "?watch=true&timeoutSeconds=1", 403, "pc2"},
		{"pc2 reads pc1's import", pc2, imports + "/pc1.gadgets.example.com", 403, "pc1"},
		{"pc1 reads its own import", pc1, imports + "/pc1.gadgets.example.com", 200, "pc2"},
	} {
		code, body := c.client.do("GET", c.path, "", "")
		if code != c.want || strings.Contains(body, `"syncTarget":"`+c.forbidden+`"`) {
			t.Errorf("%s: got %d, want %d and nothing of %s: %.300s", c.what, code, c.want, c.forbidden, body)
		}
	}

	testTenantAssignmentAttacks(t, s, teamA, l1, f1, l2, f2, assigned)

	// The syncer's own request still works: it removes its finalizer
	// from an object being deleted.
	s.Kubectl(teamA, "create", "configmap", "bye")
	framework.Eventually(t, 30*time.Second, "configmap bye assigned", func() (bool, string) {
		m, _ := kcpMeta(t, s, teamA, "configmap", "bye")
		return slices.Equal(m.Finalizers, []string{f1}), fmt.Sprint(m.Finalizers)
	})
	s.Kubectl(teamA, "delete", "configmap", "bye", "--wait=false")
	if code, body := pc1.do("PATCH", view+"/api/v1/namespaces/default/configmaps/bye", "application/json-patch+json",
		`[{"op":"test","path":"/metadata/finalizers/0","value":"`+f1+`"},{"op":"remove","path":"/metadata/finalizers/0"}]`); code != 200 {
		t.Errorf("the syncer removes its own finalizer: got %d: %s", code, body)
	}
	if out, err := s.KubectlErr(teamA, "", "get", "configmap", "bye"); err == nil {
		t.Errorf("configmap bye still exists after its last finalizer went: %s", out)
	}
}
