package multicluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// testTenantAssignmentAttacks: mallory, admin of team-a only, tries to
// rewrite kcp's assignment data (issue 49, item 6) on every subresource,
// in every patch dialect, through a mutating policy of her workspace and
// through Placement overrides. configmap cfg, service web and namespace
// default of team-a are assigned to pc1 (label l1, finalizer f1); l2 and
// f2 are pc2's, which team-a's Placement does not select.
func testTenantAssignmentAttacks(t *testing.T, s *framework.Server, teamA, l1, f1, l2, f2 string, assigned func(kind, name string) string) {
	s.GrantAccess("root", "mallory", strings.TrimPrefix(teamA, "root:"))
	s.Kubectl(teamA, "create", "clusterrolebinding", "mallory-admin", "--clusterrole=cluster-admin", "--user=mallory")
	mallory := attackClient{t: t, base: s.URL(), client: framework.UserClient(t, s, "mallory")}
	l2Pointer := strings.ReplaceAll(l2, "/", "~1")
	ns := "/clusters/" + teamA + "/api/v1/namespaces/default"

	// A PUT of the status subresource with kcp's data changed.
	forgedPut := func(kind, name string) string {
		var obj map[string]any
		if err := json.Unmarshal([]byte(s.Kubectl(teamA, "get", kind, name, "-o", "json")), &obj); err != nil {
			t.Fatal(err)
		}
		meta := obj["metadata"].(map[string]any)
		meta["labels"] = map[string]any{l2: "Sync"}
		meta["finalizers"] = []any{f2}
		meta["annotations"] = map[string]any{workload.AssignedTargetAnnotation: "root:compute/pc2"}
		out, _ := json.Marshal(obj)
		return string(out)
	}
	before := map[string]string{}
	for _, o := range []string{"configmap/cfg", "service/web", "namespace/default"} {
		kind, name, _ := strings.Cut(o, "/")
		before[o] = assigned(kind, name)
	}
	merge := `{"metadata":{"finalizers":null,"labels":{"` + l1 + `":null,"` + l2 + `":"Sync"},"annotations":{"` + workload.AssignedTargetAnnotation + `":"root:compute/pc2"}}}`
	jsonPatch := `[{"op":"remove","path":"/metadata/finalizers/0"},{"op":"add","path":"/metadata/labels/` + l2Pointer + `","value":"Sync"}]`
	strategic := `{"metadata":{"$deleteFromPrimitiveList/finalizers":["` + f1 + `"],"labels":{"` + l2 + `":"Sync"}}}`
	replace := `{"metadata":{"labels":{"$patch":"replace","app":"x"},"finalizers":["` + f2 + `"]}}`
	apply := func(kind string) string {
		return `{"apiVersion":"v1","kind":"` + kind + `","metadata":{"name":"NAME","labels":{"` + l2 + `":"Sync"},"finalizers":["` + f2 + `"]}}`
	}
	type row struct {
		what, object, method, path, ct, body string
	}
	var rows []row
	for _, target := range []struct{ object, kind, path string }{
		{"service/web", "Service", ns + "/services/web/status"},
		{"namespace/default", "Namespace", ns + "/status"},
		{"service/web", "Service", ns + "/services/web"},
		{"configmap/cfg", "ConfigMap", ns + "/configmaps/cfg"},
	} {
		name := strings.Split(target.object, "/")[1]
		rows = append(rows,
			row{"merge patch", target.object, "PATCH", target.path, "application/merge-patch+json", merge},
			row{"strategic merge patch", target.object, "PATCH", target.path, "application/strategic-merge-patch+json", strategic},
			row{"strategic merge patch with $patch: replace on labels", target.object, "PATCH", target.path, "application/strategic-merge-patch+json", replace},
			row{"apply", target.object, "PATCH", target.path + "?fieldManager=mallory&force=true", "application/apply-patch+yaml", strings.Replace(apply(target.kind), "NAME", name, 1)},
			row{"update", target.object, "PUT", target.path, "application/json", ""},
		)
		if target.object != "namespace/default" { // a namespace has no finalizer of kcp's
			rows = append(rows, row{"JSON patch", target.object, "PATCH", target.path, "application/json-patch+json", jsonPatch})
		}
	}
	for _, r := range rows {
		body := r.body
		if r.method == "PUT" {
			kind, name, _ := strings.Cut(r.object, "/")
			body = forgedPut(kind, name)
		}
		code, out := mallory.do(r.method, r.path, r.ct, body)
		kind, name, _ := strings.Cut(r.object, "/")
		after := assigned(kind, name)
		// Dropped (kcp's values restored, as on any update) or refused;
		// never kept.
		if (code != http.StatusOK && code != http.StatusForbidden) || after != before[r.object] {
			t.Errorf("tenant, %s of %s (%s): got %d, %.200s\n before %s\n after  %s", r.what, strings.TrimPrefix(r.path, ns), r.object, code, out, before[r.object], after)
		}
	}

	// A mutating admission policy of her workspace sets pc2's assignment
	// label (and a label of hers, which shows that the policy ran): if it
	// runs after kcp restored its data, the request is refused with a
	// message that says the keys are kcp's; kcp's data never changes.
	s.Kubectl(teamA, "apply", "-f", framework.WriteFile(t, "steal.yaml", `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: steal}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  matchConditions:
  - {name: mallory, expression: 'request.userInfo.username == "mallory"'}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"stolen": "yes", "`+l2+`": "Sync"}}}'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: steal}
spec:
  policyName: steal
`))
	i := 0
	framework.Eventually(t, 30*time.Second, "the workspace's mutating policy to run", func() (bool, string) {
		i++
		name := fmt.Sprintf("stolen-%d", i)
		code, out := mallory.do("POST", ns+"/configmaps", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+name+`"}}`)
		switch {
		case code == http.StatusForbidden && strings.Contains(out, "are kcp's"):
			return true, out
		case code != http.StatusCreated:
			return false, fmt.Sprintf("%d %.300s", code, out)
		}
		m, _ := kcpMeta(t, s, teamA, "configmap", name)
		if m.Labels[l2] != "" || m.Labels[l1] != workload.StateSync || !slices.Equal(m.Finalizers, []string{f1}) {
			t.Errorf("a mutating policy of the workspace changed kcp's data of a new ConfigMap: %v %v", m.Labels, m.Finalizers)
		}
		return m.Labels["stolen"] == "yes", fmt.Sprint(m.Labels)
	})
	code, out := mallory.do("PATCH", ns+"/configmaps/cfg", "application/merge-patch+json", `{"metadata":{"labels":{"tier":"eu"}}}`)
	if (code != http.StatusOK && code != http.StatusForbidden) || (code == http.StatusForbidden && !strings.Contains(out, "are kcp's")) {
		t.Errorf("an update that the workspace's mutating policy gives pc2's label: got %d, want 403 (kcp's keys) or 200: %.300s", code, out)
	}
	if after := assigned("configmap", "cfg"); after != before["configmap/cfg"] {
		t.Errorf("the mutating policy changed kcp's data on cfg:\n before %s\n after  %s", before["configmap/cfg"], after)
	}
	s.Kubectl(teamA, "delete", "mutatingadmissionpolicybinding", "steal")
	s.Kubectl(teamA, "delete", "mutatingadmissionpolicy", "steal")

	// Placement overrides that would drop or set kcp's keys downstream.
	for i, patch := range []string{
		`{metadata: {labels: {$patch: replace, app: x}}}`,
		`{metadata: {annotations: {$patch: delete}}}`,
		`{metadata: {labels: {$retainKeys: [app]}}}`,
		`{metadata: {labels: null}}`,
		`{metadata: null}`,
		`{metadata: {$setElementOrder/labels: []}}`,
		`{metadata: {labels: {` + l2 + `: Sync}}}`,
	} {
		out, err := s.KubectlErr(teamA, "", "apply", "-f", framework.WriteFile(t, "override.yaml", fmt.Sprintf(`apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: override-%d}
spec:
  locationWorkspace: root:compute
  locationSelector: {matchLabels: {region: pc1}}
  namespaceSelector: {matchLabels: {none: none}}
  overrides: [{patch: %s}]
`, i, patch)))
		if err == nil {
			// The API server drops a null it would store (the patch is
			// not nullable): what is stored must be harmless.
			stored := s.Kubectl(teamA, "get", "placement", fmt.Sprintf("override-%d", i), "-o", "jsonpath={.spec.overrides[0].patch}")
			if strings.Contains(stored, "null") || strings.Contains(stored, "$") || strings.Contains(stored, "kcp.io") {
				t.Errorf("a Placement override %s was stored as %s", patch, stored)
			}
			t.Logf("a Placement override %s was stored as %s", patch, stored)
			s.Kubectl(teamA, "delete", "placement", fmt.Sprintf("override-%d", i))
			continue
		}
		if !strings.Contains(out, "spec.overrides[0].patch") {
			t.Errorf("a Placement override %s: want a refusal naming spec.overrides[0].patch, got %v\n%s", patch, err, out)
		}
	}
}
