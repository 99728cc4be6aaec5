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
