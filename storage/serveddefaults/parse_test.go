package serveddefaults

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/kcpsql/kcp/schema/tenancy"
)

// TestParseParents: what a namespace's or a LogicalCluster's stored JSON
// says about its defaults, read without decoding the whole value: the UID,
// the creation time, whether it is live, the recorded owner; nothing from
// a value that is malformed or has no UID.
func TestParseParents(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 11, 26, 23, 0, 0, 0, time.UTC))
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:uid":{},"f:status":{"f:phase":{}}}}`)}}}
	encode := func(ns *corev1.Namespace) []byte {
		var buf bytes.Buffer
		ns.TypeMeta = metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}
		if err := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, clientgoscheme.Scheme, clientgoscheme.Scheme, kjson.SerializerOptions{}).Encode(ns, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	ns := func(mutate func(*corev1.Namespace)) []byte {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "u-1", CreationTimestamp: created, ManagedFields: managed,
			Annotations: map[string]string{"x": `"uid":"not-this"`}}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
		mutate(n)
		return encode(n)
	}
	for _, c := range []struct {
		name   string
		value  []byte
		want   bool // a parent
		active bool
	}{
		{"active", ns(func(*corev1.Namespace) {}), true, true},
		{"no status", ns(func(n *corev1.Namespace) { n.Status = corev1.NamespaceStatus{} }), true, true},
		{"terminating", ns(func(n *corev1.Namespace) { n.Status.Phase = corev1.NamespaceTerminating }), true, false},
		{"being deleted", ns(func(n *corev1.Namespace) { n.DeletionTimestamp = &created }), true, false},
		{"no uid", ns(func(n *corev1.Namespace) { n.UID = "" }), false, false},
		{"indented", func() []byte {
			var b bytes.Buffer
			json.Indent(&b, ns(func(*corev1.Namespace) {}), "", "  ")
			return b.Bytes()
		}(), true, true},
		{"escaped uid", []byte(`{"metadata":{"uid":"u-\u0031","creationTimestamp":"2026-11-26T23:00:00Z"},"status":{"phase":"Active"}}`), true, true},
		{"cut", func() []byte { v := ns(func(*corev1.Namespace) {}); return v[:len(v)-3] }(), false, false},
		{"metadata not an object", []byte(`{"metadata":"u-1"}`), false, false},
		{"bad time", []byte(`{"metadata":{"uid":"u-1","creationTimestamp":"yesterday"}}`), false, false},
		{"not JSON", []byte(`u-1`), false, false},
	} {
		p := parseNamespace("root:org/a", c.value)
		if (p != nil) != c.want {
			t.Errorf("%s: parent %v, want %v", c.name, p != nil, c.want)
			continue
		}
		if p == nil {
			continue
		}
		if p.uid != "u-1" || !p.created.Equal(&created) || p.active != c.active {
			t.Errorf("%s: uid %q created %v active %v; want u-1, %v, %v", c.name, p.uid, p.created, p.active, created, c.active)
		}
	}
	if p := parseNamespace("root:org/a/b", ns(func(*corev1.Namespace) {})); p != nil {
		t.Errorf("a key that is not <cluster>/<name> read as a parent")
	}

	lc := func(annotations string) []byte {
		return []byte(`{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"LogicalCluster","metadata":{"annotations":` + annotations +
			`,"creationTimestamp":"2026-11-26T23:00:00Z","managedFields":[{"manager":"kcp","fieldsV1":{"f:metadata":{"f:uid":{}}}}],"name":"cluster","uid":"u-2"},"status":{"phase":"Ready"}}`)
	}
	owner, _ := json.Marshal(map[string]any{"username": "alice", "groups": []string{"team"}})
	quoted, _ := json.Marshal(string(owner))
	for _, c := range []struct {
		name, annotations, owner string
	}{
		{"owner", `{"` + tenancy.OwnerAnnotation + `":` + string(quoted) + `,"kcp.io/cluster":"root:a"}`, "alice"},
		{"no annotations", `null`, ""},
		{"no owner", `{"kcp.io/cluster":"root:a"}`, ""},
		{"owner not JSON", `{"` + tenancy.OwnerAnnotation + `":"alice"}`, ""},
	} {
		p := parseLogicalCluster("root:a/"+tenancy.LogicalClusterName, lc(c.annotations))
		if p == nil {
			t.Errorf("%s: no parent", c.name)
			continue
		}
		if p.uid != "u-2" || !p.created.Equal(&created) || !p.active || p.owner != c.owner {
			t.Errorf("%s: uid %q created %v active %v owner %q; want u-2, %v, true, %q", c.name, p.uid, p.created, p.active, p.owner, created, c.owner)
		}
	}
	if p := parseLogicalCluster("root:a/"+tenancy.LogicalClusterName, lc(`["not","a","map"]`)); p != nil {
		t.Errorf("annotations that are not an object: read as a parent")
	}
	if p := parseLogicalCluster("root:a/other", lc(`null`)); p != nil {
		t.Errorf("an object not named %s read as a LogicalCluster parent", tenancy.LogicalClusterName)
	}
}
