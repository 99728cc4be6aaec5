package physical

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
)

// TestPhysicalMetrics: a cluster started with Metrics serves
// metrics.k8s.io through its aggregator: metrics-server reports a pod's
// usage as kwok simulates it from the pod's annotations, and its nodes'.
func TestPhysicalMetrics(t *testing.T) {
	bins, err := EnsureBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := Start(ctx, bins, Options{Name: "pcm", Dir: t.TempDir(), Nodes: 1, Metrics: true, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "busy", Annotations: map[string]string{UsageCPUAnnotation: "250m", UsageMemoryAnnotation: "100Mi"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	mc, err := metricsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = poll(ctx, 4*MetricResolution+30*time.Second, func() error {
		m, err := mc.MetricsV1beta1().PodMetricses("default").Get(ctx, "busy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(m.Containers) != 1 {
			return fmt.Errorf("containers: %+v", m.Containers)
		}
		cpu, mem := m.Containers[0].Usage.Cpu().MilliValue(), m.Containers[0].Usage.Memory().Value()
		if cpu < 200 || cpu > 300 || mem != 100<<20 {
			return fmt.Errorf("usage cpu %dm memory %d", cpu, mem)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pod metrics: %v\n%s", err, c.LogTail("metrics-server", 20))
	}
	nodes, err := mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("node metrics: %v %+v", err, nodes)
	}
}
