package physical

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestPhysicalCluster starts a real cluster, runs a Deployment to
// Available on KWOK nodes, kills the whole cluster and brings it back with
// its state.
func TestPhysicalCluster(t *testing.T) {
	bins, err := EnsureBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := Start(ctx, bins, Options{Name: "pc", Dir: t.TempDir(), Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	available := func() error {
		return poll(ctx, 60*time.Second, func() error {
			got, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.AvailableReplicas != 3 {
				return errorf("deployment web: %d of 3 available", got.Status.AvailableReplicas)
			}
			return nil
		})
	}
	if err := available(); err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" {
			t.Errorf("pod %s: phase %s on node %q, want Running on a node", p.Name, p.Status.Phase, p.Spec.NodeName)
		}
	}

	c.Kill()
	if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("the killed cluster still answers")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := available(); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
}
