package physical

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	kwokcrd "sigs.k8s.io/kwok/kustomize/crd"
	"sigs.k8s.io/yaml"
)

// What kwok's kubelet endpoint serves for every pod of the cluster's fake
// nodes (kwok's ClusterLogs, ClusterExec, ClusterAttach and
// ClusterPortForward configuration):
//
//   - logs: the lines of DefaultLog ("kwok container log of cluster
//     <name>"), and DefaultPreviousLog for --previous; a pod given lines of
//     its own with SetPodLogs shows those (kwok's Logs objects, whose CRD
//     the harness installs);
//   - exec: the command runs as a local process of the test machine, in
//     the cluster's directory, with PHYSICAL_CLUSTER=<name> in its
//     environment;
//   - attach: the pod's default log;
//   - port-forward: every port echoes what it receives (cat).
const (
	DefaultLog         = "kwok container log of cluster %s"
	DefaultPreviousLog = "previous kwok container log of cluster %s"
)

var logsGVR = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "logs"}

// debuggingConfig installs kwok's Logs CRD, writes the default log files
// and returns kwok's configuration documents for the debugging endpoints.
func (c *Cluster) debuggingConfig(ctx context.Context, client kubernetes.Interface) (string, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return "", err
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(kwokcrd.Logs, &crd); err != nil {
		return "", fmt.Errorf("kwok's Logs CRD: %v", err)
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("installing kwok's Logs CRD: %v", err)
	}
	// kwok lists Logs objects from its start: a CRD not yet served makes
	// its informer back off (up to half a minute), and a pod's own lines
	// show that late. Start kwok on an established CRD.
	if err := poll(ctx, time.Minute, func() error {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("kwok's Logs CRD is not established yet")
	}); err != nil {
		return "", err
	}
	logs := c.logsDir()
	if err := os.MkdirAll(logs, 0o700); err != nil {
		return "", err
	}
	current, previous := filepath.Join(logs, "default.log"), filepath.Join(logs, "default-previous.log")
	if err := writeCRILog(current, fmt.Sprintf(DefaultLog, c.Name)); err != nil {
		return "", err
	}
	if err := writeCRILog(previous, fmt.Sprintf(DefaultPreviousLog, c.Name)); err != nil {
		return "", err
	}
	return fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: default
spec:
  logs:
  - logsFile: %[1]q
    previousLogsFile: %[2]q
    follow: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata:
  name: default
spec:
  execs:
  - local:
      workDir: %[3]q
      envs:
      - name: PHYSICAL_CLUSTER
        value: %[4]q
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterAttach
metadata:
  name: default
spec:
  attaches:
  - logsFile: %[1]q
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterPortForward
metadata:
  name: default
spec:
  forwards:
  - command: ["cat"]
`, current, previous, c.Dir, c.Name), nil
}

func (c *Cluster) logsDir() string { return filepath.Join(c.Dir, "logs") }

// SetPodLogs makes the containers of one pod (by its namespace and name on
// this cluster) show lines as their log, and each line prefixed with
// "previous " as their previous log (--previous); it returns the log
// file, to which AppendPodLog adds lines (kubectl logs -f sees them).
func (c *Cluster) SetPodLogs(ctx context.Context, namespace, pod string, lines ...string) (string, error) {
	file := filepath.Join(c.logsDir(), namespace+"_"+pod+".log")
	if err := writeCRILog(file, lines...); err != nil {
		return "", err
	}
	previous := make([]string, len(lines))
	for i, l := range lines {
		previous[i] = "previous " + l
	}
	if err := writeCRILog(file+".previous", previous...); err != nil {
		return "", err
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		return "", err
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
		"metadata": map[string]interface{}{"name": pod, "namespace": namespace},
		"spec":     map[string]interface{}{"logs": []interface{}{map[string]interface{}{"logsFile": file, "previousLogsFile": file + ".previous", "follow": true}}},
	}}
	if _, err := d.Resource(logsGVR).Namespace(namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	return file, nil
}

// AppendPodLog adds lines to a log file.
func AppendPodLog(file string, lines ...string) error {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(criLines(lines...))
	return err
}

// writeCRILog writes lines in the container runtime's log format, which
// kwok reads.
func writeCRILog(file string, lines ...string) error {
	return os.WriteFile(file, []byte(criLines(lines...)), 0o600)
}

func criLines(lines ...string) string {
	var b strings.Builder
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, l := range lines {
		fmt.Fprintf(&b, "%s stdout F %s\n", now, l)
	}
	return b.String()
}
