package localwatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/cache"
	api "k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// fakeStorage stands in for a REST storage: what it was asked, what it
// answers. The server's real storages are exercised by the e2e tests
// (namespace defaults, garbage collection, RBAC, namespace lifecycle all
// read through this package).
type fakeStorage struct {
	rest.TableConvertor
	list       *api.NamespaceList
	refusals   int   // 429 "storage is (re)initializing" answers before the list
	err        error // every list's answer, when set
	calls      int
	watcher    *watch.FakeWatcher
	gotCluster logicalcluster.Name
	gotNS      string
	gotOpts    *metainternalversion.ListOptions
}

func (f *fakeStorage) NewList() runtime.Object { return &api.NamespaceList{} }
func (f *fakeStorage) New() runtime.Object     { return &api.Namespace{} }
func (f *fakeStorage) Destroy()                {}

func (f *fakeStorage) seen(ctx context.Context, o *metainternalversion.ListOptions) {
	f.gotCluster, _ = logicalcluster.From(ctx)
	f.gotNS, _ = genericapirequest.NamespaceFrom(ctx)
	f.gotOpts = o
}

func (f *fakeStorage) List(ctx context.Context, o *metainternalversion.ListOptions) (runtime.Object, error) {
	f.seen(ctx, o)
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	if f.refusals > 0 {
		f.refusals--
		return nil, apierrors.NewTooManyRequests("storage is (re)initializing", 1)
	}
	return f.list, nil
}

func (f *fakeStorage) Watch(ctx context.Context, o *metainternalversion.ListOptions) (watch.Interface, error) {
	f.seen(ctx, o)
	return f.watcher, nil
}

func namespace(name string, labels map[string]string) *api.Namespace {
	return &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "7", Labels: labels,
		Annotations: map[string]string{logicalcluster.Annotation: "root:a"}}}
}

var nsGVR = corev1.SchemeGroupVersion.WithResource("namespaces")

func newStorages(f *fakeStorage) *Storages {
	s := New()
	s.storages[nsGVR] = f
	return s
}

func cacheWatch(lw cache.ListerWatcher, o metav1.ListOptions) (watch.Interface, error) {
	return cache.ToListerWatcherWithContext(lw).WatchWithContext(context.Background(), o)
}

func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case e, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return watch.Event{}
}

func TestListConvertsCopiesAndAddressesEveryCluster(t *testing.T) {
	stored := namespace("default", map[string]string{"team": "a"})
	stored.Spec.Finalizers = []api.FinalizerName{api.FinalizerKubernetes}
	stored.OwnerReferences = []metav1.OwnerReference{{Name: "owner"}}
	f := &fakeStorage{list: &api.NamespaceList{ListMeta: metav1.ListMeta{ResourceVersion: "42"}, Items: []api.Namespace{*stored}}, refusals: 2}
	lw, ok := newStorages(f).ListWatch(nsGVR, Versioned(corev1.SchemeGroupVersion))
	if !ok {
		t.Fatal("namespaces not found")
	}
	if _, ok := newStorages(f).ListWatch(corev1.SchemeGroupVersion.WithResource("widgets"), Versioned(corev1.SchemeGroupVersion)); ok {
		t.Fatal("a resource without a storage here must fall back to the loopback")
	}
	obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "0", LabelSelector: "team=a"})
	if err != nil {
		t.Fatalf("list after two refusals of a filling cache: %v", err)
	}
	if f.gotCluster != logicalcluster.Wildcard || f.gotNS != "" {
		t.Fatalf("list asked cluster %q namespace %q, want every cluster and namespace", f.gotCluster, f.gotNS)
	}
	if f.gotOpts.ResourceVersion != "0" || f.gotOpts.LabelSelector.String() != "team=a" {
		t.Fatalf("list options not passed on: %+v", f.gotOpts)
	}
	list := obj.(*metav1.List)
	if list.ResourceVersion != "42" || len(list.Items) != 1 {
		t.Fatalf("list: resourceVersion %q, %d items", list.ResourceVersion, len(list.Items))
	}
	ns, ok := list.Items[0].Object.(*corev1.Namespace)
	if !ok {
		t.Fatalf("item is %T, want *v1.Namespace", list.Items[0].Object)
	}
	if ns.Name != "default" || ns.Labels["team"] != "a" || ns.Annotations[logicalcluster.Annotation] != "root:a" || ns.APIVersion != "v1" || ns.Kind != "Namespace" {
		t.Fatalf("converted item: %+v", ns)
	}
	// The informer's copy is its own: changing it must not change what the
	// storage (the watch cache) holds.
	// Every map and slice is its own, not only the labels (the conversion
	// takes over a copy instead of copying twice).
	if len(ns.Spec.Finalizers) != 1 || ns.Spec.Finalizers[0] != corev1.FinalizerKubernetes || len(ns.OwnerReferences) != 1 {
		t.Fatalf("converted item lost its finalizers or owners: %+v", ns)
	}
	ns.Labels["team"] = "b"
	ns.Annotations[logicalcluster.Annotation] = "root:b"
	ns.Spec.Finalizers[0] = "other"
	ns.OwnerReferences[0].Name = "other"
	if got := f.list.Items[0]; got.Labels["team"] != "a" || got.Annotations[logicalcluster.Annotation] != "root:a" ||
		got.Spec.Finalizers[0] != api.FinalizerKubernetes || got.OwnerReferences[0].Name != "owner" {
		t.Fatalf("changing a listed object changed the storage's: %+v", got)
	}
}

func TestListGivesUpOnOtherErrors(t *testing.T) {
	f := &fakeStorage{err: apierrors.NewTooManyRequests("too many requests", 1)}
	lw, _ := newStorages(f).ListWatch(nsGVR, Versioned(corev1.SchemeGroupVersion))
	if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); !apierrors.IsTooManyRequests(err) || f.calls != 1 {
		t.Fatalf("a 429 that is not a filling cache: err %v after %d calls, want it returned at once", err, f.calls)
	}
}

func TestWatchConvertsEventsAndStops(t *testing.T) {
	f := &fakeStorage{watcher: watch.NewFake()}
	s := newStorages(f)
	lw := WithFieldSelector(s.Or(nsGVR, Versioned(corev1.SchemeGroupVersion), nil), fields.OneTermEqualSelector("metadata.name", "default"))
	w, err := cacheWatch(lw, metav1.ListOptions{ResourceVersion: "42", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	if f.gotCluster != logicalcluster.Wildcard || f.gotOpts.FieldSelector.String() != "metadata.name=default" || !f.gotOpts.Watch || !f.gotOpts.AllowWatchBookmarks || f.gotOpts.ResourceVersion != "42" {
		t.Fatalf("watch asked cluster %q with %+v", f.gotCluster, f.gotOpts)
	}
	stored := namespace("default", nil)
	stored.OwnerReferences = []metav1.OwnerReference{{Name: "owner", UID: "u1"}}
	go f.watcher.Add(stored)
	e := next(t, w)
	m, ok := e.Object.(*corev1.Namespace)
	if e.Type != watch.Added || !ok || m.Name != "default" || m.ResourceVersion != "7" ||
		m.Annotations[logicalcluster.Annotation] != "root:a" || len(m.OwnerReferences) != 1 {
		t.Fatalf("event %s %#v", e.Type, e.Object)
	}
	m.OwnerReferences[0].Name = "changed"
	m.Annotations["x"] = "y"
	if stored.OwnerReferences[0].Name != "owner" || stored.Annotations["x"] != "" {
		t.Fatal("changing a watched object changed the storage's")
	}
	status := &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired}
	go f.watcher.Error(status)
	if e := next(t, w); e.Type != watch.Error || e.Object != status {
		t.Fatalf("an error event must pass as it is, got %s %#v", e.Type, e.Object)
	}
	if _, open := <-w.ResultChan(); open {
		t.Fatal("the watch must end after an error event")
	}
	if !f.watcher.IsStopped() {
		t.Fatal("the storage's watch was not stopped")
	}
}

func TestWatchStopsWithoutEvents(t *testing.T) {
	f := &fakeStorage{watcher: watch.NewFake()}
	w, err := cacheWatch(newStorages(f).Or(nsGVR, Versioned(corev1.SchemeGroupVersion), nil), metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	w.Stop() // twice is fine
	select {
	case _, open := <-w.ResultChan():
		if open {
			t.Fatal("event after Stop")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop of an idle watch did not end it")
	}
	if !f.watcher.IsStopped() {
		t.Fatal("the storage's watch was not stopped")
	}
}

func TestWatchReportsObjectsItCannotConvert(t *testing.T) {
	f := &fakeStorage{watcher: watch.NewFake()}
	w, err := cacheWatch(newStorages(f).Or(nsGVR, func(runtime.Object) (runtime.Object, error) { return nil, errors.New("no conversion") }, nil), metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	go f.watcher.Add(namespace("default", nil))
	e := next(t, w)
	status, ok := e.Object.(*metav1.Status)
	if e.Type != watch.Error || !ok || status.Code != 500 {
		t.Fatalf("got %s %#v, want a 500 error event", e.Type, e.Object)
	}
}

// cacheable wraps an object as the watch cache wraps watch events' objects
// for its serialization cache: GetObject hands out a deep copy.
type cacheable struct{ obj runtime.Object }

func (c cacheable) CacheEncode(_ runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	return encode(c.obj, w)
}
func (c cacheable) GetObject() runtime.Object        { return c.obj.DeepCopyObject() }
func (c cacheable) GetObjectKind() schema.ObjectKind { return c.obj.GetObjectKind() }
func (c cacheable) DeepCopyObject() runtime.Object   { return cacheable{c.obj.DeepCopyObject()} }

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestTrimmedDropsManagedFieldsAndSharesMapsWithoutTouchingTheStorage(t *testing.T) {
	stored := func(name string) *api.Namespace {
		ns := namespace(name, map[string]string{"kubernetes.io/metadata.name": "default"})
		ns.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kcp", Operation: metav1.ManagedFieldsOperationUpdate}}
		ns.Spec.Finalizers = []api.FinalizerName{api.FinalizerKubernetes}
		ns.OwnerReferences = []metav1.OwnerReference{{Name: "owner"}}
		ns.Finalizers = []string{"f"}
		ns.Status.Phase = api.NamespaceActive
		return ns
	}
	var items []api.Namespace
	for i := range 3 {
		items = append(items, *stored(fmt.Sprint("ns-", i)))
	}
	f := &fakeStorage{list: &api.NamespaceList{ListMeta: metav1.ListMeta{ResourceVersion: "42"}, Items: items}, watcher: watch.NewFake()}
	lw, _ := newStorages(f).ListWatch(nsGVR, Trimmed(corev1.SchemeGroupVersion))
	obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list := obj.(*metav1.List)
	var got []*corev1.Namespace
	for i, it := range list.Items {
		ns, ok := it.Object.(*corev1.Namespace)
		if !ok {
			t.Fatalf("item %d is %T, want *v1.Namespace", i, it.Object)
		}
		want := stored(fmt.Sprint("ns-", i))
		if ns.Name != want.Name || ns.ResourceVersion != "7" || ns.APIVersion != "v1" || ns.Kind != "Namespace" ||
			ns.Labels["kubernetes.io/metadata.name"] != "default" || len(ns.Labels) != 1 ||
			ns.Annotations[logicalcluster.Annotation] != "root:a" || len(ns.Annotations) != 1 ||
			len(ns.Spec.Finalizers) != 1 || ns.Spec.Finalizers[0] != corev1.FinalizerKubernetes ||
			len(ns.OwnerReferences) != 1 || ns.OwnerReferences[0].Name != "owner" ||
			len(ns.Finalizers) != 1 || ns.Finalizers[0] != "f" || ns.Status.Phase != corev1.NamespaceActive {
			t.Fatalf("item %d lost something but its managed fields: %+v", i, ns)
		}
		if ns.ManagedFields != nil {
			t.Fatalf("item %d kept its managed fields", i)
		}
		if sameMap(ns.Labels, f.list.Items[i].Labels) || sameMap(ns.Annotations, f.list.Items[i].Annotations) {
			t.Fatalf("item %d holds the storage's own labels or annotations", i)
		}
		got = append(got, ns)
	}
	// Equal labels and annotations are one map from the second object on.
	if !sameMap(got[1].Labels, got[2].Labels) || !sameMap(got[1].Annotations, got[2].Annotations) {
		t.Fatal("equal labels and annotations are not shared")
	}
	// What is not shared is the informer's own; the storage keeps its
	// managed fields.
	got[0].Spec.Finalizers[0] = "other"
	got[0].OwnerReferences[0].Name = "other"
	got[0].Finalizers[0] = "other"
	if s := f.list.Items[0]; s.Spec.Finalizers[0] != api.FinalizerKubernetes || s.OwnerReferences[0].Name != "owner" ||
		s.Finalizers[0] != "f" || len(s.ManagedFields) != 1 || len(s.Labels) != 1 || len(s.Annotations) != 1 {
		t.Fatalf("changing a listed object changed the storage's: %+v", s)
	}

	// A watch event's object, wrapped as the watch cache wraps it.
	w, err := cacheWatch(lw, metav1.ListOptions{ResourceVersion: "42"})
	if err != nil {
		t.Fatal(err)
	}
	event := stored("ns-9")
	go f.watcher.Add(cacheable{event})
	e := next(t, w)
	ns, ok := e.Object.(*corev1.Namespace)
	if !ok || ns.Name != "ns-9" || ns.ManagedFields != nil || !sameMap(ns.Labels, got[1].Labels) || !sameMap(ns.Annotations, got[1].Annotations) {
		t.Fatalf("watched object not trimmed and shared: %#v", e.Object)
	}
	if len(event.ManagedFields) != 1 || sameMap(ns.Labels, event.Labels) {
		t.Fatal("the watched storage object was changed or its labels handed out")
	}
	w.Stop()
}
