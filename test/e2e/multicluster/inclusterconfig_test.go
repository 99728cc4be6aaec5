package multicluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
	"github.com/kcpsql/kcp/test/e2e/framework"
	"github.com/kcpsql/kcp/test/physical"
)

const operatorRBAC = `apiVersion: v1
kind: ServiceAccount
metadata: {name: operator, namespace: ops}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: operator, namespace: ops}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: operator, namespace: ops}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: operator}
subjects: [{kind: ServiceAccount, name: operator, namespace: ops}]
`

const operatorDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: operator, namespace: ops}
spec:
  replicas: 1
  selector: {matchLabels: {app: operator}}
  template:
    metadata: {labels: {app: operator}}
    spec:
      serviceAccountName: operator
      containers: [{name: manager, image: example.com/operator:v1}]
`

const physicalAPIDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: node-agent
  namespace: ops
  annotations: {workload.kcp.io/api-access: physical-cluster}
spec:
  replicas: 1
  selector: {matchLabels: {app: node-agent}}
  template:
    metadata: {labels: {app: node-agent}}
    spec:
      containers: [{name: agent, image: example.com/agent:v1}]
`

// TestOperatorsTalkToTheirWorkspace: an operator's pod, synced to a
// physical cluster, gets an in-cluster configuration that points at its
// workspace. The test plays the pod (KWOK runs no containers): it takes
// exactly what the syncer gave the downstream pod (its environment, and
// the files of the Secret it mounts at the in-cluster path, kept current
// as the kubelet keeps them) and runs a real controller-runtime operator
// with client-go's unchanged rest.InClusterConfig, in a mount namespace of
// its own where that Secret is at /var/run/secrets/kubernetes.io/serviceaccount.
// The operator reconciles in its workspace under the workspace's RBAC, and
// goes on across a token rotation and a kcp restart. The token is useless
// in another workspace and on the physical cluster, and cannot mint tokens
// of other accounts; the opt-out is the location's decision.
func TestOperatorsTalkToTheirWorkspace(t *testing.T) {
	if err := exec.Command("unshare", "-m", "true").Run(); err != nil {
		t.Skipf("SKIPPED LOUDLY: playing a pod needs a private mount namespace (unshare -m, as root): %v", err)
	}
	bins := binaries(t)
	operator, err := physical.Build("workspaceoperator", "./test/tools/workspaceoperator", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	s := framework.StartServer(t, "")
	const compute, team, other = "root:compute", "root:operators", "root:bystander"
	s.CreateWorkspaces(compute, team, other)
	admin := adminIn(t, s, compute)
	pcs := startPhysical(t, bins, "pc1")
	register(t, s, admin, "pc1", "region=eu", pcs["pc1"])
	down := downClient(t, pcs["pc1"])
	waitTargetsReady(t, s, compute, "pc1")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "placement.yaml", `apiVersion: workload.kcp.io/v1alpha1
kind: Placement
metadata: {name: apps}
spec: {locationWorkspace: "root:compute", namespaceSelector: {matchLabels: {run: "yes"}}}
`))
	s.Kubectl(team, "create", "namespace", "ops")
	s.Kubectl(team, "label", "namespace", "ops", "run=yes")
	s.Kubectl(other, "create", "namespace", "ops")
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "rbac.yaml", operatorRBAC))
	s.Kubectl(team, "apply", "-f", framework.WriteFile(t, "operator.yaml", operatorDeployment))

	ctx := context.Background()
	dns := syncer.DownstreamNamespace(logicalcluster.Name(team), "ops")
	var pod corev1.Pod
	framework.Eventually(t, 90*time.Second, "the operator's pod downstream", func() (bool, string) {
		pods, err := down.CoreV1().Pods(dns).List(ctx, metav1.ListOptions{LabelSelector: "app=operator"})
		if err != nil || len(pods.Items) == 0 {
			return false, fmt.Sprint("no pod yet ", err)
		}
		pod = pods.Items[0]
		return true, ""
	})

	// What the syncer gave the pod: kcp's address, no physical token, the
	// workspace token's Secret at the in-cluster path.
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] == "" || env["KUBERNETES_SERVICE_PORT"] != fmt.Sprint(s.Port) {
		t.Fatalf("the pod's KUBERNETES_SERVICE_HOST/PORT do not name kcp (port %d): %v", s.Port, env)
	}
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("the physical cluster's own token is mounted: automountServiceAccountToken=%v", a)
	}
	secretName := ""
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			for _, m := range pod.Spec.Containers[0].VolumeMounts {
				if m.Name == v.Name && m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount" {
					secretName = v.Secret.SecretName
				}
			}
		}
		if v.Projected != nil {
			t.Errorf("a projected volume (the physical cluster's token) is mounted: %+v", v)
		}
	}
	if secretName == "" {
		t.Fatalf("no Secret mounted at the in-cluster path: %+v", pod.Spec)
	}

	// The test's kubelet: the Secret's keys as files, kept current.
	dir := t.TempDir()
	kubelet := newFakeKubelet(t, down, dns, secretName, dir)
	kubelet.waitFiles(t)
	if ns := kubelet.file("namespace"); ns != "ops" {
		t.Errorf("the pod's namespace file says %q, want the workspace's namespace ops", ns)
	}

	// The operator, unchanged, with the pod's environment.
	logPath := filepath.Join(t.TempDir(), "operator.log")
	startOperator(t, operator, dir, logPath, env)
	s.Kubectl(team, "-n", "ops", "create", "configmap", "settings", "--from-literal=color=blue")
	s.Kubectl(team, "-n", "ops", "label", "configmap", "settings", "app=demo")
	waitReconciled(t, s, team, "settings", logPath)
	framework.Eventually(t, 30*time.Second, "the operator refused what its Role does not grant", func() (bool, string) {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "listing secrets is forbidden") && strings.Contains(string(b), `"system:serviceaccount:ops:operator"`), tail(string(b))
	})
	if out := s.Kubectl(other, "-n", "ops", "get", "configmaps", "-o", "name"); strings.Contains(out, "settings") {
		t.Errorf("the operator wrote into another workspace: %s", out)
	}

	t.Run("the token is its workspace's only", func(t *testing.T) {
		token, ca := kubelet.file("token"), kubelet.file("ca.crt")
		kcpURL := fmt.Sprintf("https://%s:%s", env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"])
		c := clientWithCA(t, []byte(ca))
		if code := call(t, c, "GET", kcpURL+"/api/v1/namespaces/ops/configmaps", token, nil); code != 200 {
			t.Errorf("its own workspace without a path: %d, want 200", code)
		}
		if code := call(t, c, "GET", kcpURL+"/clusters/"+other+"/api/v1/namespaces/ops/configmaps", token, nil); code != http.StatusUnauthorized {
			t.Errorf("another workspace: %d, want 401", code)
		}
		if code := call(t, c, "GET", kcpURL+"/clusters/root/api/v1/namespaces", token, nil); code != http.StatusUnauthorized {
			t.Errorf("root: %d, want 401", code)
		}
		insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		if code := call(t, insecure, "GET", fmt.Sprintf("https://127.0.0.1:%d/api/v1/namespaces", pcs["pc1"].Port), token, nil); code != http.StatusUnauthorized {
			t.Errorf("the physical cluster: %d, want 401", code)
		}
		body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}`)
		if code := call(t, c, "POST", kcpURL+"/api/v1/namespaces/ops/serviceaccounts/default/token", token, body); code != http.StatusForbidden {
			t.Errorf("a token of another ServiceAccount: %d, want 403", code)
		}
	})

	t.Run("a tenant's Secret cannot take the token's name", func(t *testing.T) {
		before := kubelet.file("token")
		s.Kubectl(team, "-n", "ops", "create", "secret", "generic", secretName, "--from-literal=token=forged")
		time.Sleep(3 * time.Second) // the syncer has seen it (it syncs in well under a second here)
		sec, err := down.CoreV1().Secrets(dns).Get(ctx, secretName, metav1.GetOptions{})
		if err != nil || string(sec.Data["token"]) != before {
			t.Errorf("the tenant's Secret %s reached the pod's token: %v %q", secretName, err, sec.Data["token"])
		}
	})

	t.Run("rotation", func(t *testing.T) {
		before := kubelet.file("token")
		// Time passes: the token is due for renewal.
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, syncer.TokenRefreshAnnotation, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
		if _, err := down.CoreV1().Secrets(dns).Patch(ctx, secretName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "a renewed token", func() (bool, string) {
			return kubelet.file("token") != before, ""
		})
		// client-go rereads the token file every minute; the old token is
		// valid until it expires, so the operator is not interrupted.
		s.Kubectl(team, "-n", "ops", "create", "configmap", "after-rotation", "--from-literal=x=1")
		s.Kubectl(team, "-n", "ops", "label", "configmap", "after-rotation", "app=demo")
		waitReconciled(t, s, team, "after-rotation", logPath)
	})

	t.Run("kcp restart", func(t *testing.T) {
		s.Stop()
		s.Start()
		s.Kubectl(team, "-n", "ops", "create", "configmap", "after-restart", "--from-literal=x=1")
		s.Kubectl(team, "-n", "ops", "label", "configmap", "after-restart", "app=demo")
		waitReconciled(t, s, team, "after-restart", logPath)
	})

	t.Run("opting out is the location's decision", func(t *testing.T) {
		out, err := s.KubectlErr(team, physicalAPIDeployment, "create", "-f", "-")
		if err == nil || !strings.Contains(out, "spec.workspaceAPI.allowPhysicalAPI") {
			t.Fatalf("a workload asking for the physical cluster's API where the location does not allow it: %v\n%s", err, out)
		}
		// Allowed for other workspaces only: still refused, saying so.
		s.Kubectl(compute, "patch", "synctarget", "pc1", "--type=merge", "-p", `{"spec":{"workspaceAPI":{"allowPhysicalAPI":true,"physicalAPIWorkspaces":["root:infra:*"]}}}`)
		framework.Eventually(t, 30*time.Second, "the opt-out refused for a workspace the list does not name", func() (bool, string) {
			out, err := s.KubectlErr(team, physicalAPIDeployment, "create", "-f", "-", "--dry-run=server")
			return err != nil && strings.Contains(out, "physicalAPIWorkspaces does not name "+team), out
		})
		s.Kubectl(compute, "patch", "synctarget", "pc1", "--type=merge", "-p", `{"spec":{"workspaceAPI":{"physicalAPIWorkspaces":["root:infra:*","`+team+`"]}}}`)
		framework.Eventually(t, 30*time.Second, "the opt-out accepted once allowed", func() (bool, string) {
			out, err := s.KubectlErr(team, physicalAPIDeployment, "create", "-f", "-")
			return err == nil, out
		})
		framework.Eventually(t, 90*time.Second, "its pod keeps the physical cluster's configuration", func() (bool, string) {
			pods, err := down.CoreV1().Pods(dns).List(ctx, metav1.ListOptions{LabelSelector: "app=node-agent"})
			if err != nil || len(pods.Items) == 0 {
				return false, fmt.Sprint("no pod yet ", err)
			}
			p := pods.Items[0]
			for _, e := range p.Spec.Containers[0].Env {
				if e.Name == "KUBERNETES_SERVICE_HOST" {
					return false, "KUBERNETES_SERVICE_HOST set: " + e.Value
				}
			}
			for _, v := range p.Spec.Volumes {
				if v.Secret != nil && strings.HasPrefix(v.Secret.SecretName, syncer.APIAccessSecretPrefix) {
					return false, "the workspace token is mounted"
				}
			}
			return true, ""
		})
	})
}

// fakeKubelet keeps a directory equal to a downstream Secret's keys, as the
// kubelet keeps a Secret volume (atomically, through a rename).
type fakeKubelet struct {
	mu    sync.Mutex
	files map[string]string
}

func newFakeKubelet(t *testing.T, down *kubernetes.Clientset, ns, name, dir string) *fakeKubelet {
	k := &fakeKubelet{files: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			if sec, err := down.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				for key, v := range sec.Data {
					k.mu.Lock()
					changed := k.files[key] != string(v)
					k.mu.Unlock()
					if !changed {
						continue
					}
					tmp := filepath.Join(dir, "."+key+".tmp")
					if os.WriteFile(tmp, v, 0o644) == nil && os.Rename(tmp, filepath.Join(dir, key)) == nil {
						k.mu.Lock()
						k.files[key] = string(v)
						k.mu.Unlock()
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return k
}

func (k *fakeKubelet) file(key string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.files[key]
}

func (k *fakeKubelet) waitFiles(t *testing.T) {
	framework.Eventually(t, 60*time.Second, "the token Secret's files", func() (bool, string) {
		return k.file("token") != "" && k.file("ca.crt") != "" && k.file("namespace") != "", ""
	})
}

// startOperator runs the operator in a mount namespace of its own in which
// dir is the in-cluster path.
func startOperator(t *testing.T, bin, dir, logPath string, env map[string]string) {
	const script = `mkdir -p /var/run/secrets/kubernetes.io/serviceaccount && mount --bind "$0" /var/run/secrets/kubernetes.io/serviceaccount && exec "$1"`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, dir, bin)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("operator log:\n%s", tail(string(b)))
		}
	})
}

func waitReconciled(t *testing.T, s *framework.Server, ws, name, logPath string) {
	t.Helper()
	framework.Eventually(t, 90*time.Second, "the operator reconciled "+name+" in its workspace", func() (bool, string) {
		out, err := s.KubectlErr(ws, "", "-n", "ops", "get", "configmap", name+"-reconciled", "-o", "jsonpath={.data.reconciledBy}")
		if err == nil && out == "workspaceoperator" {
			return true, ""
		}
		b, _ := os.ReadFile(logPath)
		return false, out + "\n" + tail(string(b))
	})
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

func clientWithCA(t *testing.T, ca []byte) *http.Client {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("the pod's ca.crt holds no certificate")
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func call(t *testing.T, c *http.Client, method, url, token string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
