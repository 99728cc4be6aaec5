package workspace

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcpsql/kcp/schema/tenancy"
)

// Workspaces read straight from the datastore (listStored) give the
// controller's cache what the served objects give it: a Ready one the same
// compact entry (and the owners and finalizers the garbage collector
// reads), any other one the whole served object; the list carries the
// revision it was read at; a row that does not decode fails the list,
// naming its key.
func TestListStored(t *testing.T) {
	managed := `"managedFields":[{"manager":"kubectl","operation":"Update","fieldsV1":{"f:spec":{}}}]`
	owner := `"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"u-o"}]`
	rows := map[string]string{
		// Ready, with limits and an owner.
		"/registry/tenancy.kcp.io/workspaces/root/ready": `{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace",
			"metadata":{"name":"ready","uid":"u-r","generation":1,"creationTimestamp":"2026-11-26T10:00:00Z",
			"annotations":{"kcp.io/cluster":"root","` + tenancy.OwnerAnnotation + `":"{\"username\":\"alice\"}"},
			"finalizers":["` + tenancy.WorkspaceFinalizer + `"],` + owner + `,` + managed + `},
			"spec":{"limits":{"objects":100,"bytes":2048},"frozen":{"reason":"incident 4711"}},"status":{"phase":"Ready","URL":"https://kcp/clusters/root:ready"}}`,
		// Still initializing: the controller works on it.
		"/registry/tenancy.kcp.io/workspaces/root/new": `{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace",
			"metadata":{"name":"new","uid":"u-n","creationTimestamp":"2026-11-26T10:00:00Z","annotations":{"kcp.io/cluster":"root"},` + managed + `},
			"spec":{},"status":{"phase":"Initializing","conditions":[{"type":"Ready","status":"False","message":"waiting"}]}}`,
		// Ready but being deleted.
		"/registry/tenancy.kcp.io/workspaces/root:team/gone": `{"apiVersion":"tenancy.kcp.io/v1alpha1","kind":"Workspace",
			"metadata":{"name":"gone","uid":"u-g","deletionTimestamp":"2026-11-26T11:00:00Z","annotations":{"kcp.io/cluster":"root:team"},
			"finalizers":["` + tenancy.WorkspaceFinalizer + `"]},"spec":{},"status":{"phase":"Ready"}}`,
	}
	order := []string{"/registry/tenancy.kcp.io/workspaces/root/new", "/registry/tenancy.kcp.io/workspaces/root/ready", "/registry/tenancy.kcp.io/workspaces/root:team/gone"}
	ranged := func(_ context.Context, prefix string, fn func(string, []byte, int64) error) (int64, error) {
		if prefix != "/registry/tenancy.kcp.io/workspaces/" {
			t.Errorf("read prefix %q", prefix)
		}
		for i, k := range order {
			if err := fn(k, []byte(rows[k]), int64(10+i)); err != nil {
				return 0, err
			}
		}
		return 99, nil
	}
	list, err := listStored(context.Background(), ranged)
	if err != nil {
		t.Fatal(err)
	}
	if list.GetResourceVersion() != "99" || len(list.Items) != len(order) {
		t.Fatalf("list at %q with %d items, want 99 and %d", list.GetResourceVersion(), len(list.Items), len(order))
	}
	for i, k := range order {
		served := &unstructured.Unstructured{}
		if err := served.UnmarshalJSON([]byte(rows[k])); err != nil {
			t.Fatal(err)
		}
		served.SetResourceVersion(strconv.Itoa(10 + i))
		got := &list.Items[i]
		want, _ := trimReady(served)
		trimmed, _ := trimReady(got)
		if _, ready := want.(*readyWorkspace); ready {
			if !reflect.DeepEqual(trimmed, want) {
				t.Errorf("%s: cached %+v from the datastore, %+v from the served object", k, trimmed, want)
			}
			if !reflect.DeepEqual(got.GetOwnerReferences(), served.GetOwnerReferences()) || !reflect.DeepEqual(got.GetFinalizers(), served.GetFinalizers()) ||
				got.GetUID() != served.GetUID() || got.GetResourceVersion() != served.GetResourceVersion() {
				t.Errorf("%s: the collector would read owners %v, finalizers %v, uid %s at %s; served: %v, %v, %s at %s", k,
					got.GetOwnerReferences(), got.GetFinalizers(), got.GetUID(), got.GetResourceVersion(),
					served.GetOwnerReferences(), served.GetFinalizers(), served.GetUID(), served.GetResourceVersion())
			}
			continue
		}
		if !reflect.DeepEqual(got.Object, served.Object) {
			t.Errorf("%s: a Workspace the controller works on differs from the served one:\n%v\n%v", k, got.Object, served.Object)
		}
	}
	if _, ready := list.Items[1].Object["metadata"].(map[string]interface{})["managedFields"]; ready {
		t.Error("a Ready Workspace kept its managed fields")
	}
	rows[order[2]] = `{"kcp.io/deleted-default":`
	if _, err := listStored(context.Background(), ranged); err == nil || !strings.Contains(err.Error(), order[2]) {
		t.Errorf("a row that does not decode: %v, want an error naming its key", err)
	}
}
