package placement

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	apps "k8s.io/kubernetes/pkg/apis/apps"
	api "k8s.io/kubernetes/pkg/apis/core"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/kcpsql/kcp/schema/workload"
)

// TestPodSpecOf: the pod kcp judges is the one that will run, from the
// internal objects admission sees and from unstructured ones, for every
// kind with a pod template; a privileged container or a host path breaks
// baseline, an ordinary container does not.
func TestPodSpecOf(t *testing.T) {
	privileged := true
	internalDeployment := &apps.Deployment{Spec: apps.DeploymentSpec{Template: api.PodTemplateSpec{Spec: api.PodSpec{
		Containers: []api.Container{{Name: "c", Image: "x", SecurityContext: &api.SecurityContext{Privileged: &privileged}}},
	}}}}
	internalPod := &api.Pod{Spec: api.PodSpec{Containers: []api.Container{{Name: "c", Image: "x"}}}}
	cronJob := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "batch/v1", "kind": "CronJob", "spec": map[string]interface{}{
		"jobTemplate": map[string]interface{}{"spec": map[string]interface{}{"template": map[string]interface{}{"spec": map[string]interface{}{
			"containers": []interface{}{map[string]interface{}{"name": "c", "image": "x"}},
			"volumes":    []interface{}{map[string]interface{}{"name": "h", "hostPath": map[string]interface{}{"path": "/"}}},
		}}}}}}}
	e := podEvaluator()
	if e == nil {
		t.Fatal("no evaluator")
	}
	for _, c := range []struct {
		name    string
		obj     interface{}
		allowed bool
	}{
		{"privileged deployment", internalDeployment, false},
		{"ordinary pod", internalPod, true},
		{"cronjob with a host path", cronJob, false},
	} {
		var gv = corev1.SchemeGroupVersion
		switch c.obj.(type) {
		case *apps.Deployment:
			gv = appsv1.SchemeGroupVersion
		case *unstructured.Unstructured:
			gv = batchv1.SchemeGroupVersion
		}
		meta, spec, err := podSpecOf(c.obj.(runtime.Object), gv)
		if err != nil || spec == nil {
			t.Fatalf("%s: %v %v", c.name, spec, err)
		}
		lv := psaapi.LevelVersion{Level: psaapi.Level(workload.PodSecurityBaseline), Version: psaapi.LatestVersion()}
		if got := psapolicy.AggregateCheckResults(e.EvaluatePod(lv, meta, spec)).Allowed; got != c.allowed {
			t.Errorf("%s: allowed %v, want %v", c.name, got, c.allowed)
		}
	}
	if (&workload.SyncTargetSpec{}).PodSecurityLevel() != workload.PodSecurityBaseline {
		t.Error("the default level is not baseline")
	}
}
