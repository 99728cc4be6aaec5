package garbagecollector

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/kcpsql/kcp/server/controllers/worker"
)

type listedResources struct {
	discovery.DiscoveryInterface
	lists []*metav1.APIResourceList
}

func (l *listedResources) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return l.lists, nil
}

// A custom resource whose last CRD is gone stops being watched after
// forgetAfter complete discoveries without it, and is watched again when
// it comes back (issue 50 item 7: its reflector failed to list forever).
func TestForgetsVanishedResources(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	verbs := metav1.Verbs{"list", "watch", "delete", "patch", "get"}
	widgets := &metav1.APIResourceList{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: verbs}}}
	configmaps := &metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: verbs}}}
	disc := &listedResources{lists: []*metav1.APIResourceList{configmaps, widgets}}
	c := &Controller{
		queue:     worker.NewQueue[item](name),
		discovery: disc,
		wildcard:  metadatafake.NewSimpleMetadataClient(runtime.NewScheme()),
		resources: map[schema.GroupVersionResource]*resourceInfo{},
		kinds:     map[schema.GroupVersionKind]*resourceInfo{},
	}
	widgetsGVR := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	widgetGVK := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	watched := func() (bool, *resourceInfo) {
		c.mu.RLock()
		defer c.mu.RUnlock()
		info, ok := c.resources[widgetsGVR]
		_, kind := c.kinds[widgetGVK]
		if ok != kind {
			t.Fatalf("resources and kinds disagree: %v %v", ok, kind)
		}
		return ok, info
	}
	c.discover(ctx)
	ok, info := watched()
	if !ok || info.stop == nil {
		t.Fatal("widgets not watched after discovery")
	}
	disc.lists = []*metav1.APIResourceList{configmaps}
	for i := 1; i < forgetAfter; i++ {
		c.discover(ctx)
		if ok, _ := watched(); !ok {
			t.Fatalf("widgets forgotten after %d discoveries without it, want %d", i, forgetAfter)
		}
	}
	c.discover(ctx)
	if ok, _ := watched(); ok {
		t.Fatalf("widgets still watched after %d discoveries without it", forgetAfter)
	}
	if c.resources[schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}] == nil {
		t.Fatal("configmaps forgotten")
	}
	disc.lists = []*metav1.APIResourceList{configmaps, widgets}
	c.discover(ctx)
	if ok, _ := watched(); !ok {
		t.Fatal("widgets not watched again when served again")
	}
}
