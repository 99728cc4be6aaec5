package namespacedefaults

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/apis/core"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestConfigMapCA: the copy of a stored kube-root-ca.crt config map that
// the controller's in-process watch hands on says which namespace of which
// cluster it belongs to and whether it holds the expected CA (wrongCA
// reads its data), carries nothing else of the object, and leaves the
// stored object as it was. Config maps that hold the expected CA share one
// data map; any other gets copies of its own.
func TestConfigMapCA(t *testing.T) {
	const ca = "-----BEGIN CERTIFICATE-----\nexpected\n-----END CERTIFICATE-----\n"
	convert := configMapCA(ca)
	stored := func(ns string, data map[string]string, binary map[string][]byte) *core.ConfigMap {
		return &core.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: RootCAConfigMap, Namespace: ns, UID: types.UID("u-" + ns), ResourceVersion: "12",
				Labels:      map[string]string{"app": "x"},
				Annotations: map[string]string{logicalcluster.Annotation: "root:a", "note": "big"}},
			Data: data, BinaryData: binary,
		}
	}
	copyOf := func(in *core.ConfigMap) *corev1.ConfigMap {
		t.Helper()
		before := in.DeepCopy()
		obj, err := convert(in)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(in, before) {
			t.Fatal("making the copy changed the stored object")
		}
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			t.Fatalf("got %T, want the versioned ConfigMap the informer expects", obj)
		}
		if got, want := namespaceKey(cm), clusterinformer.Key("root:a", "", in.Namespace); got != want {
			t.Errorf("namespace key %q, want %q", got, want)
		}
		if cm.Name != RootCAConfigMap || cm.ResourceVersion != "12" || cm.UID != in.UID {
			t.Errorf("copy lost its identity: %+v", cm.ObjectMeta)
		}
		if cm.Labels != nil || len(cm.Annotations) != 1 {
			t.Errorf("copy carries more metadata than the controller reads: %+v", cm.ObjectMeta)
		}
		return cm
	}
	wrong := func(cm *corev1.ConfigMap) bool {
		return len(cm.Data) != 1 || cm.Data["ca.crt"] != ca || len(cm.BinaryData) != 0
	}

	a, b := copyOf(stored("a", map[string]string{"ca.crt": ca}, nil)), copyOf(stored("b", map[string]string{"ca.crt": ca}, nil))
	if wrong(a) || wrong(b) {
		t.Fatalf("a config map with the expected CA reads as wrong: %v, %v", a.Data, b.Data)
	}
	if reflect.ValueOf(a.Data).Pointer() != reflect.ValueOf(b.Data).Pointer() {
		t.Error("config maps with the expected CA do not share one data map")
	}

	for name, in := range map[string]*core.ConfigMap{
		"another CA":   stored("c", map[string]string{"ca.crt": "other"}, nil),
		"an extra key": stored("d", map[string]string{"ca.crt": ca, "extra": "x"}, nil),
		"binary data":  stored("e", map[string]string{"ca.crt": ca}, map[string][]byte{"blob": {1, 2}}),
		"no data":      stored("f", nil, nil),
	} {
		cm := copyOf(in)
		orig := in.DeepCopy()
		if !wrong(cm) {
			t.Errorf("%s: reads as the expected CA: %v %v", name, cm.Data, cm.BinaryData)
		}
		if !reflect.DeepEqual(cm.Data, in.Data) || !reflect.DeepEqual(cm.BinaryData, in.BinaryData) {
			t.Errorf("%s: data %v %v, stored %v %v", name, cm.Data, cm.BinaryData, in.Data, in.BinaryData)
		}
		for k := range cm.Data {
			cm.Data[k] = "changed"
		}
		for k := range cm.BinaryData {
			cm.BinaryData[k][0] = 9
		}
		if !reflect.DeepEqual(in, orig) {
			t.Errorf("%s: changing the copy's data changed the stored object", name)
		}
	}

	if _, err := convert(&core.Secret{}); err == nil {
		t.Error("an object that is not a config map converted without an error")
	}
}
