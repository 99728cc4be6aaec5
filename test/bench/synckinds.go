package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kcpsql/kcp/schema/workload"
)

var (
	syncApp         = flag.Bool("sync-app", true, "each placed workspace of the sync benchmark runs a Deployment, a StatefulSet and a Job (false: a Deployment only)")
	syncKindSamples = flag.Int("sync-kind-samples", 50, "creates per kind for the create -> downstream latency of each synced kind (0 skips)")
)

// deployApp adds, to a placed workspace that has its Deployment, a
// one-replica StatefulSet and a one-completion Job.
func deployApp(s *server, ws string) error {
	ctx := context.Background()
	c, err := s.client(ws)
	if err != nil {
		return err
	}
	one := int32(1)
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: appsv1.StatefulSetSpec{Replicas: &one, ServiceName: "db",
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres"}}}}}}
	if _, err := c.AppsV1().StatefulSets("default").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("%s: StatefulSet: %v", ws, err)
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "migrate"}, Spec: batchv1.JobSpec{Completions: &one,
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "migrate", Image: "busybox", Command: []string{"true"}}}}}}}
	if _, err := c.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("%s: Job: %v", ws, err)
	}
	return nil
}

// appDownstream counts the workloads of placed workspaces on the physical
// cluster (from its watch cache).
func appDownstream(ctx context.Context, down *kubernetes.Clientset) (deployments, statefulsets, jobs int) {
	o := metav1.ListOptions{LabelSelector: "workload.kcp.io/sync-target", ResourceVersion: "0"}
	if l, err := down.AppsV1().Deployments("").List(ctx, o); err == nil {
		deployments = len(l.Items)
	}
	if l, err := down.AppsV1().StatefulSets("").List(ctx, o); err == nil {
		statefulsets = len(l.Items)
	}
	if l, err := down.BatchV1().Jobs("").List(ctx, o); err == nil {
		jobs = len(l.Items)
	}
	return
}

// projectedPods counts the pods projected into all workspaces (kcp's
// list across logical clusters).
func projectedPods(ctx context.Context, s *server) (int, error) {
	c, err := s.client("*")
	if err != nil {
		return 0, err
	}
	n, cont := 0, ""
	for {
		l, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: workload.ProjectedFromLabel, Limit: 500, Continue: cont})
		if err != nil {
			return n, err
		}
		n += len(l.Items)
		if cont = l.Continue; cont == "" {
			return n, nil
		}
	}
}

// syncKinds are the objects whose create -> downstream latency is
// measured, one of each kind a placed workspace syncs.
var syncKinds = []struct {
	gvr  schema.GroupVersionResource
	yaml string
}{
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, `{apiVersion: v1, kind: ConfigMap, data: {a: b}}`},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, `{apiVersion: apps/v1, kind: Deployment, spec: {replicas: 0, selector: {matchLabels: {app: lat}}, template: {metadata: {labels: {app: lat}}, spec: {containers: [{name: c, image: nginx}]}}}}`},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, `{apiVersion: apps/v1, kind: StatefulSet, spec: {replicas: 0, serviceName: lat, selector: {matchLabels: {app: lat}}, template: {metadata: {labels: {app: lat}}, spec: {containers: [{name: c, image: nginx}]}}}}`},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, `{apiVersion: apps/v1, kind: DaemonSet, spec: {selector: {matchLabels: {app: lat}}, template: {metadata: {labels: {app: lat}}, spec: {nodeSelector: {none: none}, containers: [{name: c, image: nginx}]}}}}`},
	{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, `{apiVersion: batch/v1, kind: Job, spec: {suspend: true, template: {spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}}}}`},
	{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}, `{apiVersion: batch/v1, kind: CronJob, spec: {schedule: "0 0 1 1 *", suspend: true, jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}}}}}}`},
	{schema.GroupVersionResource{Version: "v1", Resource: "services"}, `{apiVersion: v1, kind: Service, spec: {ports: [{port: 80}]}}`},
	{schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, `{apiVersion: v1, kind: PersistentVolumeClaim, spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}`},
	{schema.GroupVersionResource{Version: "v1", Resource: "pods"}, `{apiVersion: v1, kind: Pod, spec: {containers: [{name: c, image: nginx}]}}`},
	{schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, `{apiVersion: policy/v1, kind: PodDisruptionBudget, spec: {maxUnavailable: 1, selector: {matchLabels: {app: lat}}}}`},
	{schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}, `{apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, spec: {maxReplicas: 3, scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: none}}}`},
	{schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}, `{apiVersion: networking.k8s.io/v1, kind: NetworkPolicy, spec: {podSelector: {}}}`},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, `{apiVersion: rbac.authorization.k8s.io/v1, kind: Role, rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]}`},
}

type kindLatency struct {
	kind     string
	p50, p99 time.Duration
}

// kindLatencies creates samples objects of each synced kind in namespace
// default of ws, each timed until it exists in dns on the physical
// cluster (a watch there).
func kindLatencies(ctx context.Context, s *server, ws, dns string, down dynamic.Interface, samples int, log func(string, ...any)) ([]kindLatency, error) {
	cfg, err := s.config(ws)
	if err != nil {
		return nil, err
	}
	up, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var out []kindLatency
	for _, k := range syncKinds {
		var proto map[string]interface{}
		if err := yaml.Unmarshal([]byte(k.yaml), &proto); err != nil {
			return nil, fmt.Errorf("%s: %v", k.gvr.Resource, err)
		}
		var lat []time.Duration
		for i := 0; i < samples; i++ {
			name := fmt.Sprintf("kind-%d", i)
			obj := (&unstructured.Unstructured{Object: proto}).DeepCopy()
			obj.SetName(name)
			w, err := down.Resource(k.gvr).Namespace(dns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
			if err != nil {
				return nil, err
			}
			t := time.Now()
			if _, err := up.Resource(k.gvr).Namespace("default").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				w.Stop()
				return nil, fmt.Errorf("creating %s %s: %v", k.gvr.Resource, name, err)
			}
			if err := waitFor(w, 30*time.Second, func(e watch.Event) bool { return e.Type == watch.Added }); err != nil {
				return nil, fmt.Errorf("%s %s downstream: %v", k.gvr.Resource, name, err)
			}
			lat = append(lat, time.Since(t))
		}
		kl := kindLatency{kind: fmt.Sprint(proto["kind"]), p50: percentile(lat, 0.5), p99: percentile(lat, 0.99)}
		log("  %s: create -> downstream p50 %s p99 %s (%d)", kl.kind, kl.p50.Round(100*time.Microsecond), kl.p99.Round(100*time.Microsecond), samples)
		out = append(out, kl)
	}
	return out, nil
}
