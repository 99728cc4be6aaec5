// Package negotiation turns the APIResourceImports of a location workspace
// into NegotiatedAPIResources: per resource, the least common denominator
// (schema/lcd) of the definitions every SyncTarget's physical cluster
// serves, taken in SyncTarget name order. An import that conflicts with
// what came before (a type conflict, different names or scope) is marked
// Compatible=False and left out; what a cluster lacks is dropped and listed.
// One controller for all clusters, keyed by location and resource.
//
// The negotiated definitions of resources that are not built in are then
// published through API sharing, in the location workspace: one immutable
// APIResourceSchema per definition (named by a hash of it, so a changed
// definition is a new schema) and the APIExport "kubernetes" naming the
// current ones. Placed workspaces bind that export (the placement
// controller creates the bindings): one mechanism serves shared and
// negotiated APIs.
package negotiation

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/schema/lcd"
	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const (
	name         = "kcp-api-negotiation"
	fieldManager = "kcp-api-negotiation"
	byResource   = "resource"
)

// Controller negotiates.
type Controller struct {
	queue    workqueue.TypedRateLimitingInterface[string]
	imports  cache.Indexer
	informer cache.Controller
	clients  *clusterinformer.Clients
	// exporting serializes publishExport per location (a *sync.Mutex per
	// cluster): two workers negotiating two resources of one location must
	// not write the export from lists read in the other order.
	exporting sync.Map
}

func resourceKey(cluster logicalcluster.Name, gr schema.GroupResource) string {
	return string(cluster) + "|" + apiresource.NegotiatedName(gr)
}

func groupResource(u *unstructured.Unstructured) schema.GroupResource {
	g, _, _ := unstructured.NestedString(u.Object, "spec", "crd", "group")
	r, _, _ := unstructured.NestedString(u.Object, "spec", "crd", "names", "plural")
	return schema.GroupResource{Group: g, Resource: r}
}

// NewController watches APIResourceImports of all logical clusters.
func NewController(loopback *rest.Config) (*Controller, error) {
	wildcard, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{queue: worker.NewQueue[string](name), clients: clients}
	enqueue := func(obj interface{}) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if u, ok := obj.(*unstructured.Unstructured); ok {
			c.queue.Add(resourceKey(clusterinformer.ClusterOf(u), groupResource(u)))
		}
	}
	r := wildcard.Resource(apiresource.ImportsResource)
	c.imports, c.informer = clusterinformer.New(clusterinformer.ListWatch(r.List, r.Watch), &unstructured.Unstructured{},
		cache.Indexers{byResource: func(obj interface{}) ([]string, error) {
			u := obj.(*unstructured.Unstructured)
			return []string{resourceKey(clusterinformer.ClusterOf(u), groupResource(u))}, nil
		}},
		cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o interface{}) { enqueue(o) }, DeleteFunc: enqueue})
	return c, nil
}

// Run processes the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, name, c.queue, workers, []cache.Controller{c.informer}, func(ctx context.Context, key string) (time.Duration, error) {
		if err := c.negotiate(ctx, key); err != nil {
			return 0, err
		}
		cl, _, _ := strings.Cut(key, "|")
		return 0, c.publishExport(ctx, logicalcluster.Name(cl))
	})
}

type imported struct {
	obj *unstructured.Unstructured
	imp apiresource.APIResourceImport
}

func (c *Controller) negotiate(ctx context.Context, key string) error {
	cl, res, _ := strings.Cut(key, "|")
	cluster := logicalcluster.Name(cl)
	objs, _ := c.imports.ByIndex(byResource, key)
	var imps []imported
	for _, o := range objs {
		u := o.(*unstructured.Unstructured)
		var imp apiresource.APIResourceImport
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &imp); err != nil || imp.DeletionTimestamp != nil {
			continue
		}
		imps = append(imps, imported{obj: u, imp: imp})
	}
	sort.Slice(imps, func(i, j int) bool { return imps[i].imp.Spec.SyncTarget < imps[j].imp.Spec.SyncTarget })
	d, err := c.clients.Dynamic(cluster)
	if err != nil {
		return err
	}
	negotiated := d.Resource(apiresource.NegotiatedResource)
	if len(imps) == 0 {
		err := negotiated.Delete(ctx, res, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	var result *apiextensionsv1.CustomResourceDefinition
	var status apiresource.NegotiatedStatus
	for _, it := range imps {
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: res}, Spec: it.imp.Spec.CRD}
		cond := metav1.Condition{Type: apiresource.ConditionCompatible, Status: metav1.ConditionTrue, Reason: "Negotiated",
			Message: "part of the negotiated definition", ObservedGeneration: it.imp.Generation}
		if result == nil {
			result = crd
			status.Imports = append(status.Imports, it.imp.Name)
		} else {
			out, problems := lcd.CRDs(result, crd)
			if out == nil {
				var msgs []string
				for _, p := range problems {
					if p.Incompatible {
						msgs = append(msgs, p.String())
					}
				}
				cond.Status, cond.Reason = metav1.ConditionFalse, "Incompatible"
				cond.Message = "conflicts with the definition negotiated from " + strings.Join(status.Imports, ", ") + ": " + strings.Join(msgs, "; ")
				status.Incompatible = append(status.Incompatible, it.imp.Name)
			} else {
				if len(status.Imports) == 1 {
					// What the first import lacks and this one has: the
					// comparison the other way round says it.
					if _, reverse := lcd.CRDs(crd, result); len(reverse) > 0 {
						for _, p := range reverse {
							if !p.Incompatible {
								status.Dropped = append(status.Dropped, imps[0].imp.Spec.SyncTarget+": "+p.String())
							}
						}
					}
				}
				for _, p := range problems {
					status.Dropped = append(status.Dropped, it.imp.Spec.SyncTarget+": "+p.String())
				}
				result = out
				status.Imports = append(status.Imports, it.imp.Name)
			}
		}
		if err := c.setImportCondition(ctx, d, it, cond); err != nil {
			return err
		}
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: apiresource.ConditionPublished, Status: metav1.ConditionTrue, Reason: "Negotiated",
		Message: fmt.Sprintf("served in every workspace placed on %s, from %d import(s)", cluster, len(status.Imports))})
	return c.publish(ctx, negotiated, res, result.Spec, status)
}

func (c *Controller) setImportCondition(ctx context.Context, d dynamic.Interface, it imported, cond metav1.Condition) error {
	if prev := meta.FindStatusCondition(it.imp.Status.Conditions, cond.Type); prev != nil && prev.Status == cond.Status &&
		prev.Reason == cond.Reason && prev.Message == cond.Message && prev.ObservedGeneration == cond.ObservedGeneration {
		return nil
	}
	meta.SetStatusCondition(&it.imp.Status.Conditions, cond)
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&it.imp.Status)
	if err != nil {
		return err
	}
	u := it.obj.DeepCopy()
	u.Object["status"] = st
	_, err = d.Resource(apiresource.ImportsResource).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (c *Controller) publish(ctx context.Context, r dynamic.ResourceInterface, name string, spec apiextensionsv1.CustomResourceDefinitionSpec, status apiresource.NegotiatedStatus) error {
	want := &apiresource.NegotiatedAPIResource{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiresource.Group + "/" + apiresource.Version, Kind: "NegotiatedAPIResource"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       apiresource.NegotiatedSpec{CRD: spec},
	}
	existing, err := r.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
		if err != nil {
			return err
		}
		if existing, err = r.Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	var cur apiresource.NegotiatedAPIResource
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(existing.Object, &cur); err != nil {
		return err
	}
	if !equality.Semantic.DeepEqual(cur.Spec, want.Spec) {
		cur.Spec = want.Spec
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cur)
		if err != nil {
			return err
		}
		if existing, err = r.Update(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return err
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(existing.Object, &cur); err != nil {
			return err
		}
	}
	for i := range status.Conditions {
		if prev := meta.FindStatusCondition(cur.Status.Conditions, status.Conditions[i].Type); prev != nil && prev.Status == status.Conditions[i].Status {
			status.Conditions[i].LastTransitionTime = prev.LastTransitionTime
		}
	}
	if equality.Semantic.DeepEqual(cur.Status, status) {
		return nil
	}
	cur.Status = status
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cur)
	if err != nil {
		return err
	}
	_, err = r.UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

// publishExport keeps the location's APIExport of its negotiated
// resources that are not built in, and their schemas, in step with the
// NegotiatedAPIResources. Schemas no longer named are deleted.
func (c *Controller) publishExport(ctx context.Context, cluster logicalcluster.Name) error {
	mu, _ := c.exporting.LoadOrStore(cluster, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	d, err := c.clients.Dynamic(cluster)
	if err != nil {
		return err
	}
	list, err := d.Resource(apiresource.NegotiatedResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	schemas := d.Resource(apis.SchemasResource)
	var names []string
	for i := range list.Items {
		var n apiresource.NegotiatedAPIResource
		if runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &n) != nil || n.DeletionTimestamp != nil || len(n.Spec.CRD.Versions) == 0 ||
			workload.IsWorkloadResource(schema.GroupResource{Group: n.Spec.CRD.Group, Resource: n.Spec.CRD.Names.Plural}) {
			continue
		}
		s, err := SchemaOf(&n)
		if err != nil {
			return err
		}
		names = append(names, s.Name)
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
		if err != nil {
			return err
		}
		if _, err := schemas.Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("publishing %s in %s: %v", s.Name, cluster, err)
		}
	}
	sort.Strings(names)
	exports := d.Resource(apis.ExportsResource)
	want := apis.APIExport{
		TypeMeta:   metav1.TypeMeta{APIVersion: apis.Group + "/" + apis.Version, Kind: "APIExport"},
		ObjectMeta: metav1.ObjectMeta{Name: apiresource.ExportName, Labels: map[string]string{apiresource.NegotiatedLabel: "true"}},
		Spec:       apis.APIExportSpec{LatestResourceSchemas: names},
	}
	existing, err := exports.Get(ctx, apiresource.ExportName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&want)
		if err != nil {
			return err
		}
		if _, err := exports.Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		var cur apis.APIExport
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(existing.Object, &cur); err != nil {
			return err
		}
		// kcp's: whatever was written there is replaced.
		if !equality.Semantic.DeepEqual(cur.Spec, want.Spec) || cur.Labels[apiresource.NegotiatedLabel] != "true" {
			cur.Spec = want.Spec
			if cur.Labels == nil {
				cur.Labels = map[string]string{}
			}
			cur.Labels[apiresource.NegotiatedLabel] = "true"
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cur)
			if err != nil {
				return err
			}
			if _, err := exports.Update(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
				return err
			}
		}
	}
	// Schemas of earlier negotiations: bindings follow the export, so a
	// schema it no longer names serves nobody.
	old, err := schemas.List(ctx, metav1.ListOptions{LabelSelector: apiresource.NegotiatedLabel + "=true"})
	if err != nil {
		return err
	}
	for _, o := range old.Items {
		if _, found := slices.BinarySearch(names, o.GetName()); found {
			continue
		}
		if err := schemas.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
			return err
		}
	}
	return nil
}

// SchemaOf is the APIResourceSchema a negotiated definition is published
// as: n<hash of the definition>.<plural>.<group>.
func SchemaOf(n *apiresource.NegotiatedAPIResource) (*apis.APIResourceSchema, error) {
	spec := n.Spec.CRD
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	h.Write(raw)
	return &apis.APIResourceSchema{
		TypeMeta: metav1.TypeMeta{APIVersion: apis.Group + "/" + apis.Version, Kind: "APIResourceSchema"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%x.%s.%s", h.Sum64()&0xffffffff, spec.Names.Plural, spec.Group),
			Labels: map[string]string{apiresource.NegotiatedLabel: "true"}},
		Spec: apis.APIResourceSchemaSpec{Group: spec.Group, Names: spec.Names, Scope: spec.Scope, Versions: spec.Versions},
	}, nil
}
