package multicluster

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestPushModeIsNoConfusedDeputy is issue 49's item 7 as an attack table: in
// an infrastructure workspace, a user who may create and edit SyncTargets,
// and read only the Secrets of its own namespace, tries to make kcp run a
// push-mode syncer with another team's kubeconfig Secret (and to read that
// kubeconfig's server from the SyncTarget's status). Each row names the
// hole. No physical cluster is needed: the kubeconfigs point at closed
// loopback ports, whose URLs are markers to look for in what the attacker
// can read. SQLite only: what is checked is admission and the controller,
// not storage.
func TestPushModeIsNoConfusedDeputy(t *testing.T) {
	s := framework.StartServer(t, "", "--push-mode", "--webhook-allowed-networks=127.0.0.0/8")
	const ws = "root:compute-sec"
	s.CreateWorkspaces(ws)
	s.GrantAccess("root", "attacker", "compute-sec")
	kubeconfig := func(server string) string {
		return "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: '" + server + "'}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\n" +
			"current-context: c\nusers:\n- name: u\n  user: {token: secret-token}\n"
	}
	const victimURL, attackerURL = "https://127.0.0.1:7/victim-private-url", "https://127.0.0.1:9/attacker-url"
	s.Kubectl(ws, "create", "namespace", "infra")
	s.Kubectl(ws, "create", "namespace", "attacker-ns")
	s.Kubectl(ws, "-n", "infra", "create", "secret", "generic", "victim-kubeconfig", "--from-file=kubeconfig="+framework.WriteFile(t, "victim.kubeconfig", kubeconfig(victimURL)))
	s.Kubectl(ws, "-n", "infra", "create", "secret", "generic", "victim-2", "--from-file=kubeconfig="+framework.WriteFile(t, "victim2.kubeconfig", kubeconfig(victimURL)))
	s.Kubectl(ws, "-n", "attacker-ns", "create", "secret", "generic", "own-kubeconfig", "--from-file=kubeconfig="+framework.WriteFile(t, "own.kubeconfig", kubeconfig(attackerURL)))
	if out, err := s.KubectlErr(ws, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: target-editor}
rules:
- {apiGroups: [workload.kcp.io], resources: [synctargets], verbs: [create, get, list, watch, update, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: target-editor}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: target-editor}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: attacker}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: own-secrets, namespace: attacker-ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: attacker}]
`, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The victim's own push-mode target: allowed, kcp runs it.
	s.Kubectl(ws, "apply", "-f", framework.WriteFile(t, "victim-target.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: SyncTarget
metadata: {name: st-victim}
spec: {push: {secretNamespace: infra, secretName: victim-kubeconfig}}
`))

	attacker := framework.UserClient(t, s, "attacker")
	base := s.URL() + "/clusters/" + ws + "/apis/workload.kcp.io/v1alpha1/synctargets/"
	merge := map[string]string{"Content-Type": "application/merge-patch+json"}
	target := func(name, ns, secret, extraMeta string) string {
		push := ""
		if secret != "" {
			push = fmt.Sprintf(`"push":{"secretNamespace":%q,"secretName":%q}`, ns, secret)
		}
		return fmt.Sprintf(`{"apiVersion":"workload.kcp.io/v1alpha1","kind":"SyncTarget","metadata":{"name":%q%s},"spec":{%s}}`, name, extraMeta, push)
	}
	refused := func(what string, code int, body, secret string) {
		t.Helper()
		if code != http.StatusForbidden || !strings.Contains(body, `\"attacker\" may not name Secret `+secret+` in spec.push`) ||
			!strings.Contains(body, `needs the verb \"get\" on that Secret`) {
			t.Errorf("%s: want 403 naming the Secret and the verb, got %d %s", what, code, body)
		}
		if strings.Contains(body, victimURL) {
			t.Errorf("%s: the answer shows the victim's server: %s", what, body)
		}
	}
	pushOf := func(name string) string {
		return s.Kubectl(ws, "get", "synctarget", name, "-o", "jsonpath={.spec.push.secretNamespace}/{.spec.push.secretName}")
	}

	// Hole: naming another team's kubeconfig Secret at create.
	code, body := framework.Do(t, attacker, http.MethodPost, base, target("st-steal", "infra", "victim-kubeconfig", ""))
	refused("create naming infra/victim-kubeconfig", code, body, "infra/victim-kubeconfig")
	// ... also as a dry run (the answer is the real one's).
	code, body = framework.Do(t, attacker, http.MethodPost, base+"?dryRun=All", target("st-steal", "infra", "victim-kubeconfig", ""))
	refused("dry-run create naming infra/victim-kubeconfig", code, body, "infra/victim-kubeconfig")
	// ... with kcp's record forged by the client.
	forged := fmt.Sprintf(`,"annotations":{%q:"infra/victim-kubeconfig"}`, workload.PushSecretCheckedAnnotation)
	code, body = framework.Do(t, attacker, http.MethodPost, base, target("st-steal", "infra", "victim-kubeconfig", forged))
	refused("create naming infra/victim-kubeconfig with a forged record", code, body, "infra/victim-kubeconfig")
	if out, err := s.KubectlErr(ws, "", "get", "synctarget", "st-steal"); err == nil {
		t.Errorf("a refused SyncTarget was stored: %s", out)
	}

	// Not a hole: its own Secret (the record a client sends is replaced).
	if code, body := framework.Do(t, attacker, http.MethodPost, base, target("st-own", "attacker-ns", "own-kubeconfig", forged)); code != http.StatusCreated {
		t.Fatalf("the attacker names its own Secret: %d %s", code, body)
	}
	if rec := s.Kubectl(ws, "get", "synctarget", "st-own", "-o", "jsonpath={.metadata.annotations.workload\\.kcp\\.io/push-secret-checked}"); rec != "attacker-ns/own-kubeconfig" {
		t.Errorf("the record of st-own: %q", rec)
	}
	// Hole: changing an allowed reference to another team's Secret.
	code, body = framework.DoWith(t, attacker, http.MethodPatch, base+"st-own", `{"spec":{"push":{"secretNamespace":"infra","secretName":"victim-kubeconfig"}}}`, merge)
	refused("patching st-own to infra/victim-kubeconfig", code, body, "infra/victim-kubeconfig")
	code, body = framework.DoWith(t, attacker, http.MethodPatch, base+"st-own", `[{"op":"replace","path":"/spec/push/secretNamespace","value":"infra"},{"op":"replace","path":"/spec/push/secretName","value":"victim-kubeconfig"}]`,
		map[string]string{"Content-Type": "application/json-patch+json"})
	refused("JSON-patching st-own to infra/victim-kubeconfig", code, body, "infra/victim-kubeconfig")
	// Hole: the record alone, forged on the allowed target, then the
	// reference (kcp keeps its record; the change is still checked).
	if code, body := framework.DoWith(t, attacker, http.MethodPatch, base+"st-own", `{"metadata":{"annotations":{"workload.kcp.io/push-secret-checked":"infra/victim-kubeconfig"}}}`, merge); code != http.StatusOK ||
		!strings.Contains(body, `"workload.kcp.io/push-secret-checked":"attacker-ns/own-kubeconfig"`) {
		t.Errorf("forging the record of st-own: want it kept, got %d %s", code, body)
	}
	if p := pushOf("st-own"); p != "attacker-ns/own-kubeconfig" {
		t.Errorf("st-own names %s", p)
	}
	// Hole: adding push to a target that had none.
	if code, body := framework.Do(t, attacker, http.MethodPost, base, target("st-plain", "", "", "")); code != http.StatusCreated {
		t.Fatalf("a SyncTarget without push: %d %s", code, body)
	}
	code, body = framework.DoWith(t, attacker, http.MethodPatch, base+"st-plain", `{"spec":{"push":{"secretNamespace":"infra","secretName":"victim-kubeconfig"}}}`, merge)
	refused("adding push to st-plain naming infra/victim-kubeconfig", code, body, "infra/victim-kubeconfig")
	// Hole: repointing the victim's target at another of its Secrets. Not a
	// hole: editing the rest of a target whose reference someone allowed
	// set (the attacker may edit SyncTargets).
	code, body = framework.DoWith(t, attacker, http.MethodPatch, base+"st-victim", `{"spec":{"push":{"secretName":"victim-2"}}}`, merge)
	refused("repointing st-victim to infra/victim-2", code, body, "infra/victim-2")
	if code, body := framework.DoWith(t, attacker, http.MethodPatch, base+"st-victim", `{"metadata":{"labels":{"region":"eu"}}}`, merge); code != http.StatusOK {
		t.Errorf("labelling st-victim: %d %s", code, body)
	}
	if p := pushOf("st-victim"); p != "infra/victim-kubeconfig" {
		t.Errorf("st-victim names %s", p)
	}

	// kcp runs the attacker's own target (its status shows its own
	// server) and nothing of the attacker's shows the victim's server.
	condition := func(name string) string {
		return s.Kubectl(ws, "get", "synctarget", name, "-o", `jsonpath={.status.conditions[?(@.type=="PushSyncer")].reason}: {.status.conditions[?(@.type=="PushSyncer")].message}`)
	}
	framework.Eventually(t, 30*time.Second, "kcp to run the syncers of st-own and st-victim", func() (bool, string) {
		own, victim := condition("st-own"), condition("st-victim")
		return strings.Contains(own, attackerURL) && strings.Contains(victim, victimURL), own + " | " + victim
	})
	code, body = framework.Do(t, attacker, http.MethodGet, base+"?labelSelector=!region", "")
	if code != http.StatusOK || strings.Contains(body, victimURL) || strings.Contains(body, "victim-private") {
		t.Errorf("the attacker's SyncTargets show the victim's server: %d %s", code, body)
	}
}
