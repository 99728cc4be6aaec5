package physical

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
)

// TestPhysicalLogsAndExec: a pod on a KWOK node has logs (the cluster's
// default, then lines of its own) and runs exec'd commands, as a kubelet's
// pod would, through the physical cluster's API server.
func TestPhysicalLogsAndExec(t *testing.T) {
	bins, err := EnsureBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := Start(ctx, bins, Options{Name: "dbg", Dir: t.TempDir(), Nodes: 1, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, 60*time.Second, func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod web is %s", p.Status.Phase)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	logs := func(previous bool) (string, error) {
		b, err := cs.CoreV1().Pods("default").GetLogs("web", &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
		return string(b), err
	}
	want := fmt.Sprintf(DefaultLog, "dbg")
	if err := poll(ctx, 30*time.Second, func() error {
		got, err := logs(false)
		if err != nil {
			return err
		}
		if strings.TrimSpace(got) != want {
			return fmt.Errorf("logs %q, want %q", got, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := logs(true); err != nil || strings.TrimSpace(got) != fmt.Sprintf(DefaultPreviousLog, "dbg") {
		t.Errorf("previous logs: %q, %v", got, err)
	}
	if _, err := c.SetPodLogs(ctx, "default", "web", "its own line"); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, 30*time.Second, func() error {
		got, err := logs(false)
		if err != nil {
			return err
		}
		if strings.TrimSpace(got) != "its own line" {
			return fmt.Errorf("logs %q, want its own line", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("web").SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: []string{"sh", "-c", "echo hello from $PHYSICAL_CLUSTER"}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		t.Fatalf("exec: %v (stderr %q)", err, errOut.String())
	}
	if strings.TrimSpace(out.String()) != "hello from dbg" {
		t.Errorf("exec printed %q, want hello from dbg", out.String())
	}
}
