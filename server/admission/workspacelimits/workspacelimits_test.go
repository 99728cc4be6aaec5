package workspacelimits

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func create(name string) admission.Attributes {
	cm := &corev1.ConfigMap{}
	cm.Name = name
	return admission.NewAttributesRecord(cm, nil, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "default", name,
		schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "", admission.Create, nil, false, nil)
}

// TestConcurrentCreates: with 5 objects stored and a cap of 10, exactly 5
// of 20 concurrent creates get through; another workspace and root are not
// affected; a workspace's own limit wins over the default.
func TestConcurrentCreates(t *testing.T) {
	var counted atomic.Int32
	Configure(&Config{
		Defaults: tenancy.Limits{Objects: 10},
		Limits: func(c logicalcluster.Name) tenancy.Limits {
			if c == "root:small" {
				return tenancy.Limits{Objects: 6}
			}
			return tenancy.Limits{}
		},
		Count: func(context.Context, logicalcluster.Name) (int64, int64, error) {
			counted.Add(1)
			return 5, 1000, nil
		},
	})
	defer Configure(nil)
	try := func(cluster logicalcluster.Name, n int) (ok int, refusals []string) {
		ctx := logicalcluster.WithCluster(context.Background(), cluster)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := instance.Validate(ctx, create("c"), nil)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					ok++
				} else {
					refusals = append(refusals, err.Error())
				}
			}()
		}
		wg.Wait()
		return ok, refusals
	}
	if ok, refusals := try("root:team", 20); ok != 5 || len(refusals) != 15 || !strings.Contains(refusals[0], "its limit (the server's --workspace-max-objects) is 10") {
		t.Errorf("root:team: %d admitted, refusals %v", ok, refusals)
	}
	if counted.Load() != 1 {
		t.Errorf("the count was read %d times, want once", counted.Load())
	}
	if ok, refusals := try("root:small", 5); ok != 1 || !strings.Contains(refusals[0], "spec.limits.objects of its Workspace) is 6") {
		t.Errorf("root:small: %d admitted, refusals %v", ok, refusals)
	}
	if ok, _ := try(logicalcluster.Root, 20); ok != 20 {
		t.Errorf("root: %d of 20 admitted", ok)
	}
}

// TestChildWorkspacesCountInTheParent: a workspace's caps bound what it
// and the workspaces inside it store together. Creates in a child are
// refused once the parent's tree is full, although the child's own cap has
// room; a new Workspace asks for room for its first objects too; a
// deletion in the child makes room in the parent.
func TestChildWorkspacesCountInTheParent(t *testing.T) {
	stored := map[logicalcluster.Name]int64{"root:p": 90, "root:p:c": 3, "root:p:c:d": 1}
	var mu sync.Mutex
	Configure(&Config{
		Defaults: tenancy.Limits{Objects: 1000},
		Limits: func(c logicalcluster.Name) tenancy.Limits {
			if c == "root:p" {
				return tenancy.Limits{Objects: 100}
			}
			return tenancy.Limits{}
		},
		Count: func(_ context.Context, c logicalcluster.Name) (int64, int64, error) {
			mu.Lock()
			defer mu.Unlock()
			return stored[c], 0, nil
		},
	})
	defer Configure(nil)
	in := func(c logicalcluster.Name) context.Context {
		return logicalcluster.WithCluster(context.Background(), c)
	}
	admitted := 0
	var err error
	for range 20 {
		if err = instance.Validate(in("root:p:c:d"), create("x"), nil); err != nil {
			break
		}
		admitted++
	}
	if admitted != 10 || err == nil || !strings.Contains(err.Error(), "workspace root:p, which root:p:c:d is inside") ||
		!strings.Contains(err.Error(), "spec.limits.objects of its Workspace) is 100") {
		t.Fatalf("creates in root:p:c:d: %d admitted, then %v", admitted, err)
	}
	// The parent itself is full as well.
	if err := instance.Validate(in("root:p"), create("y"), nil); err == nil {
		t.Error("a create in the full parent was admitted")
	}
	// A deletion in the grandchild makes room in the parent (the count is
	// read again).
	del := admission.NewAttributesRecord(nil, nil, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "default", "x",
		schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "", admission.Delete, nil, false, nil)
	if err := instance.Validate(in("root:p:c:d"), del, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	stored["root:p"] = 94
	mu.Unlock()
	if err := instance.Validate(in("root:p:c"), create("z"), nil); err != nil {
		t.Errorf("a create after a deletion below: %v", err)
	}
	// A new workspace needs room for its first objects: 95 stored, a
	// Workspace and its 4 objects fit, a second one does not.
	ws := func(name string) admission.Attributes {
		return admission.NewAttributesRecord(workspace(name, 0), nil, schema.GroupVersionKind{Group: tenancy.Group, Version: tenancy.Version, Kind: "Workspace"}, "", name,
			tenancy.WorkspacesResource, "", admission.Create, nil, false, nil)
	}
	if err := instance.Validate(in("root:p:c"), ws("w1"), nil); err != nil {
		t.Errorf("a workspace with room for it: %v", err)
	}
	if err := instance.Validate(in("root:p:c"), ws("w2"), nil); err == nil || !strings.Contains(err.Error(), "a new workspace needs 5") {
		t.Errorf("a workspace without room for its first objects: %v", err)
	}
	// Another tree is not affected.
	if err := instance.Validate(in("root:p2"), create("other"), nil); err != nil {
		t.Errorf("root:p2: %v", err)
	}
}
