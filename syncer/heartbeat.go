// Package syncer is the library behind cmd/syncer (pull mode, beside the
// physical cluster) and, later, push mode inside kcp: it connects one
// physical cluster ("downstream") to its SyncTarget in kcp ("upstream").
// It reports the cluster's health and capacity (heartbeat.go) and syncs the
// objects assigned to the target through kcp's syncer view (sync.go).
package syncer

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
)

// Heartbeat reports, every interval until ctx ends, the downstream cluster's
// Kubernetes version, its nodes and their summed capacity and allocatable
// resources into the status of SyncTarget name, with Ready=True: kcp marks
// the target NotReady when heartbeats stop. A failed beat is logged and
// retried at the next interval. onTarget, when set, receives the
// SyncTarget read at each beat (its spec is the location's decisions, such
// as the pod security level).
func Heartbeat(ctx context.Context, upstream dynamic.Interface, name string, downstream kubernetes.Interface, interval time.Duration, resources []schema.GroupVersionResource, caughtUp func() bool, onTarget func(*workload.SyncTarget)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := beat(ctx, upstream, name, downstream, resources, caughtUp, onTarget); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "heartbeat failed", "syncTarget", name)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func beat(ctx context.Context, upstream dynamic.Interface, name string, downstream kubernetes.Interface, resources []schema.GroupVersionResource, caughtUp func() bool, onTarget func(*workload.SyncTarget)) error {
	targets := upstream.Resource(workload.SyncTargetsResource)
	obj, err := targets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading SyncTarget %s: %v", name, err)
	}
	var target workload.SyncTarget
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &target); err != nil {
		return err
	}
	if onTarget != nil {
		onTarget(&target)
	}
	st, err := observe(ctx, downstream, resources)
	if err != nil {
		return fmt.Errorf("reading the physical cluster: %v", err)
	}
	now := metav1.Now()
	target.Status.LastHeartbeatTime = &now
	target.Status.KubernetesVersion = st.version
	target.Status.Nodes, target.Status.ReadyNodes = st.nodes, st.readyNodes
	target.Status.Capacity, target.Status.Allocatable = st.capacity, st.allocatable
	target.Status.SyncedResources = st.resources
	meta.SetStatusCondition(&target.Status.Conditions, metav1.Condition{
		Type: workload.ConditionReady, Status: metav1.ConditionTrue, Reason: workload.ReasonHeartbeat,
		Message: fmt.Sprintf("the syncer reached the physical cluster (%d of %d nodes Ready)", st.readyNodes, st.nodes),
	})
	if caughtUp != nil {
		cond := metav1.Condition{Type: workload.ConditionCaughtUp, Status: metav1.ConditionTrue, Reason: "CaughtUp",
			Message: "the syncer has gone through every assigned object and every copy once since it started"}
		if !caughtUp() {
			cond.Status, cond.Reason = metav1.ConditionFalse, "Starting"
			cond.Message = "the syncer is going through what is assigned and what runs (stale copies are deleted first); no new namespaces until then"
		}
		meta.SetStatusCondition(&target.Status.Conditions, cond)
	}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&target.Status)
	if err != nil {
		return err
	}
	obj.Object["status"] = status
	_, err = targets.UpdateStatus(ctx, &unstructured.Unstructured{Object: obj.Object}, metav1.UpdateOptions{FieldManager: "kcp-syncer"})
	return err
}

type observation struct {
	version               string
	nodes, readyNodes     int
	capacity, allocatable corev1.ResourceList
	resources             []workload.ResourceState
}

// observe reads what the heartbeat reports. Capacity counts Ready,
// schedulable nodes only: it is what placement may use.
func observe(ctx context.Context, c kubernetes.Interface, resources []schema.GroupVersionResource) (observation, error) {
	var o observation
	v, err := c.Discovery().ServerVersion()
	if err != nil {
		return o, err
	}
	o.version = v.GitVersion
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, err
	}
	o.capacity, o.allocatable = corev1.ResourceList{}, corev1.ResourceList{}
	for _, n := range nodes.Items {
		o.nodes++
		if !ready(&n) || n.Spec.Unschedulable {
			continue
		}
		o.readyNodes++
		add(o.capacity, n.Status.Capacity)
		add(o.allocatable, n.Status.Allocatable)
	}
	for _, r := range resources {
		name := r.Resource + "." + r.Group + "/" + r.Version
		if r.Group == "" {
			name = r.Resource + "/" + r.Version
		}
		state := workload.ResourceNotServed
		if list, err := c.Discovery().ServerResourcesForGroupVersion(r.GroupVersion().String()); err == nil {
			for _, res := range list.APIResources {
				if res.Name == r.Resource {
					state = workload.ResourceAccepted
				}
			}
		}
		o.resources = append(o.resources, workload.ResourceState{Resource: name, State: state})
	}
	return o, nil
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func add(sum, more corev1.ResourceList) {
	for k, v := range more {
		q, ok := sum[k]
		if !ok {
			q = resource.Quantity{}
		}
		q.Add(v)
		sum[k] = q
	}
}
