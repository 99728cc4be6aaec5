package syncerview

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func TestProjectedList(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	own := labels.Set{workload.ProjectedFromLabel: "k1", "app": "web"}
	for _, c := range []struct {
		gr         schema.GroupResource
		selector   string
		projection bool // a list of the syncer's projections
		listsOwn   bool // which lists its own projections
	}{
		{pods, workload.ProjectedFromLabel + "=k1", true, true},
		{pods, workload.ProjectedFromLabel, true, true},
		{pods, workload.ProjectedFromLabel + ",app=web", true, true},
		// Another target's key: the forced one makes the answer empty.
		{pods, workload.ProjectedFromLabel + "=k2", true, false},
		{pods, workload.ProjectedFromLabel + "!=k1", true, false},
		{pods, "app=web", false, false},
		{schema.GroupResource{Group: "apps", Resource: "deployments"}, workload.ProjectedFromLabel + "=k1", false, false},
	} {
		sel, err := labels.Parse(c.selector)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := projectedList(c.gr, sel, "k1")
		if ok != c.projection {
			t.Errorf("%s %q: projection list %v, want %v", c.gr, c.selector, ok, c.projection)
		}
		if !ok {
			continue
		}
		if got.Matches(own) != c.listsOwn {
			t.Errorf("%s %q: %s lists the syncer's own: %v, want %v", c.gr, c.selector, got, !c.listsOwn, c.listsOwn)
		}
		// Never another target's projections, nor a tenant's objects.
		if got.Matches(labels.Set{workload.ProjectedFromLabel: "k2", "app": "web"}) || got.Matches(labels.Set{"app": "web"}) {
			t.Errorf("%s %q: %s matches what is not k1's", c.gr, c.selector, got)
		}
	}
}

func TestProjectedWrite(t *testing.T) {
	cl := logicalcluster.Name("root:a")
	for _, c := range []struct {
		info apirequest.RequestInfo
		cl   logicalcluster.Name
		want bool
	}{
		{apirequest.RequestInfo{Verb: "create", Resource: "pods", Namespace: "default"}, cl, true},
		{apirequest.RequestInfo{Verb: "update", Resource: "pods", Namespace: "default", Name: "p", Subresource: "status"}, cl, true},
		{apirequest.RequestInfo{Verb: "update", APIGroup: "apps", Resource: "replicasets", Namespace: "default", Name: "r"}, cl, true},
		{apirequest.RequestInfo{Verb: "delete", Resource: "events", Namespace: "default", Name: "e"}, cl, true},
		{apirequest.RequestInfo{Verb: "create", Resource: "pods", Namespace: "default"}, logicalcluster.Wildcard, false},
		{apirequest.RequestInfo{Verb: "create", Resource: "pods"}, cl, false},
		{apirequest.RequestInfo{Verb: "deletecollection", Resource: "pods", Namespace: "default"}, cl, false},
		{apirequest.RequestInfo{Verb: "update", Resource: "pods", Namespace: "default", Name: "p", Subresource: "ephemeralcontainers"}, cl, false},
		{apirequest.RequestInfo{Verb: "create", Resource: "pods", Namespace: "default", Name: "p", Subresource: "binding"}, cl, false},
		{apirequest.RequestInfo{Verb: "create", Resource: "configmaps", Namespace: "default"}, cl, false},
		{apirequest.RequestInfo{Verb: "create", APIGroup: "apps", Resource: "deployments", Namespace: "default"}, cl, false},
		{apirequest.RequestInfo{Verb: "patch", Resource: "pods", Namespace: "default", Name: "p"}, cl, false},
	} {
		if got := projectedWrite(&c.info, c.cl); got != c.want {
			t.Errorf("%+v in %s: %v, want %v", c.info, c.cl, got, c.want)
		}
	}
}

func TestProjectedBody(t *testing.T) {
	in := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"elsewhere","finalizers":["` + workload.FinalizerPrefix + `k1","x"],` +
		`"labels":{"app":"web","` + workload.ProjectedFromLabel + `":"k2","` + workload.StateLabelPrefix + `k1":"Sync"},` +
		`"annotations":{"a":"b","` + workload.AssignedTargetAnnotation + `":"x","` + workload.StatusAnnotationPrefix + `k1":"{}"}},"spec":{"n":1}}`
	out, err := projectedBody([]byte(in), "k1", "default")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct {
			Namespace   string            `json:"namespace"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
			Finalizers  []string          `json:"finalizers"`
		} `json:"metadata"`
		Spec map[string]int `json:"spec"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	m := got.Metadata
	if m.Namespace != "default" || len(m.Finalizers) != 0 || len(m.Labels) != 2 || m.Labels["app"] != "web" || m.Labels[workload.ProjectedFromLabel] != "k1" ||
		len(m.Annotations) != 1 || m.Annotations["a"] != "b" || got.Spec["n"] != 1 {
		t.Errorf("forwarded %s", out)
	}
	for _, bad := range []string{`[]`, `null`, `"x"`, `{"metadata":"x"}`, `{"metadata":{"labels":["x"]}}`, `{} trailing`} {
		if out, err := projectedBody([]byte(bad), "k1", "default"); err == nil {
			t.Errorf("projectedBody(%s) = %s, want an error", bad, out)
		}
	}
}
