package placement

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// The patch written from the trimmed cache gives an object exactly what
// reconcileAssignment of the whole object gives it, its other labels,
// finalizers and annotations untouched.
func TestAssignmentPatchFromCache(t *testing.T) {
	pc1, pc2 := workload.StateLabel("root:compute", "pc1"), workload.StateLabel("root:compute", "pc2")
	f1, f2 := workload.Finalizer("root:compute", "pc1"), workload.Finalizer("root:compute", "pc2")
	s1, s2 := workload.StatusAnnotationPrefix+"root:compute/pc1", workload.StatusAnnotationPrefix+"root:compute/pc2"
	nsOf := func(labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: labels}}
	}
	for _, tc := range []struct {
		name string
		obj  metav1.ObjectMeta
		ns   *corev1.Namespace
	}{
		{"new assignment", metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Finalizers: []string{"user/keep"}},
			nsOf(map[string]string{pc1: workload.StateSync, pc2: workload.StateSync})},
		{"failover: pc1 out, pc2 in", metav1.ObjectMeta{Labels: map[string]string{"app": "web", pc1: workload.StateSync}, Finalizers: []string{f1, "user/keep"},
			Annotations: map[string]string{s1: `{"x":1}`, "user": "a"}}, nsOf(map[string]string{pc2: workload.StateSync})},
		{"one of two leaves: every status annotation goes", metav1.ObjectMeta{Labels: map[string]string{pc1: workload.StateSync, pc2: workload.StateSync},
			Finalizers: []string{"user/keep", f1, f2}, Annotations: map[string]string{s1: "a", s2: "b"}}, nsOf(map[string]string{pc2: workload.StateSync})},
		{"unassigned", metav1.ObjectMeta{Labels: map[string]string{pc1: workload.StateSync}, Finalizers: []string{f1}}, nsOf(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole := &corev1.ConfigMap{ObjectMeta: tc.obj}
			whole.Name, whole.Namespace, whole.ResourceVersion = "app", "default", "7"
			whole.Annotations = maps.Clone(whole.Annotations)
			if whole.Annotations == nil {
				whole.Annotations = map[string]string{}
			}
			whole.Annotations["kcp.io/cluster"] = "root:ws"
			cached := trimmedAssignment(whole)
			if cached.Annotations["user"] != "" || cached.Labels["app"] != "" || slices.Contains(cached.Finalizers, "user/keep") {
				t.Fatalf("the cache keeps more than assignment data: %+v", cached.ObjectMeta)
			}
			if !wantsAssignment(cached, tc.ns) {
				t.Fatal("the cached object does not want the namespace's assignment")
			}
			patch, err := assignmentPatch(cached, tc.ns)
			if err != nil {
				t.Fatal(err)
			}
			before, _ := json.Marshal(whole)
			after, err := strategicpatch.StrategicMergePatch(before, patch, &corev1.ConfigMap{})
			if err != nil {
				t.Fatalf("patch %s: %v", patch, err)
			}
			var got corev1.ConfigMap
			if err := json.Unmarshal(after, &got); err != nil {
				t.Fatal(err)
			}
			// What reconcileAssignment makes of the whole object.
			u := assignmentOf(&metav1.PartialObjectMetadata{ObjectMeta: *whole.ObjectMeta.DeepCopy()})
			u.SetLabels(whole.Labels)
			u.SetAnnotations(whole.Annotations)
			reconcileAssignment(u, tc.ns)
			if !maps.Equal(got.Labels, u.GetLabels()) && !(len(got.Labels) == 0 && len(u.GetLabels()) == 0) {
				t.Errorf("labels %v, want %v (patch %s)", got.Labels, u.GetLabels(), patch)
			}
			if !maps.Equal(got.Annotations, u.GetAnnotations()) {
				t.Errorf("annotations %v, want %v (patch %s)", got.Annotations, u.GetAnnotations(), patch)
			}
			gf, wf := slices.Sorted(slices.Values(got.Finalizers)), slices.Sorted(slices.Values(u.GetFinalizers()))
			if !slices.Equal(gf, wf) {
				t.Errorf("finalizers %v, want %v (patch %s)", gf, wf, patch)
			}
			// Patched, the object wants nothing more.
			if wantsAssignment(trimmedAssignment(&got), tc.ns) {
				t.Errorf("after the patch the object still differs from its namespace: %+v", got.ObjectMeta)
			}
		})
	}
}

// An object created with an assignment other than its namespace's (its
// admission read the namespace before the controller's write) queues the
// namespace: no look again after each change is needed to find it.
func TestObjectWithStaleAssignmentQueuesItsNamespace(t *testing.T) {
	pc1 := workload.StateLabel("root:compute", "pc1")
	namespaces := cache.NewIndexer(clusterinformer.KeyFunc, clusterinformer.ClusterIndexers)
	c := &Controller{queue: worker.NewQueue[string]("test"), namespaces: namespaces}
	defer c.queue.ShutDown()
	cluster := logicalcluster.Name("root:ws")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{pc1: workload.StateSync},
		Annotations: map[string]string{"kcp.io/cluster": string(cluster)}}}
	if err := namespaces.Add(ns); err != nil {
		t.Fatal(err)
	}
	obj := func(labels map[string]string, fins ...string) *metav1.PartialObjectMetadata {
		return trimmedAssignment(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default", Labels: labels, Finalizers: fins,
			Annotations: map[string]string{"kcp.io/cluster": string(cluster)}}})
	}
	c.onObject(workload.SyncedResources[0], obj(map[string]string{pc1: workload.StateSync}, workload.Finalizer("root:compute", "pc1")))
	if n := c.queue.Len(); n != 0 {
		t.Fatalf("an object with its namespace's assignment queued %d keys", n)
	}
	c.onObject(workload.SyncedResources[0], obj(nil))
	if n := c.queue.Len(); n != 1 {
		t.Fatalf("an object without its namespace's assignment queued %d keys, want 1", n)
	}
	if key, _ := c.queue.Get(); key != "ns:"+clusterinformer.Key(cluster, "", "default") {
		t.Fatalf("queued %q", key)
	}
}
