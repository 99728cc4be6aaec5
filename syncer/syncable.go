package syncer

import (
	"context"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// unsyncable finds the resources the syncer cannot keep downstream: ones
// the physical cluster does not serve, and ones its credential there may
// not list, watch and patch (a syncer manifest from before a kind was
// added to workload.SyncedResources). Without this one such resource
// would keep every informer from syncing and the syncer would sync
// nothing. Those resources are still watched upstream, so that a deleted
// object's finalizer for this target goes (nothing of it runs here).
func unsyncable(ctx context.Context, cfg *rest.Config, resources []schema.GroupVersionResource) (map[schema.GroupVersionResource]string, error) {
	return unsyncableFor(ctx, cfg, resources, []string{"list", "watch", "patch", "delete"})
}

// unsyncableFor finds the resources the physical cluster does not serve or
// the syncer's credential there may not use with every one of verbs.
func unsyncableFor(ctx context.Context, cfg *rest.Config, resources []schema.GroupVersionResource, verbs []string) (map[schema.GroupVersionResource]string, error) {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out := map[schema.GroupVersionResource]string{}
	served := map[schema.GroupVersion]map[string]bool{}
	for _, r := range resources {
		gv := r.GroupVersion()
		if _, ok := served[gv]; !ok {
			served[gv] = map[string]bool{}
			list, err := c.Discovery().ServerResourcesForGroupVersion(gv.String())
			if err != nil && !isNotFound(err) {
				return nil, fmt.Errorf("discovery of %s on the physical cluster: %v", gv, err)
			}
			if list != nil {
				for _, res := range list.APIResources {
					served[gv][res.Name] = true
				}
			}
		}
		if !served[gv][r.Resource] {
			out[r] = "the physical cluster does not serve it"
			continue
		}
		for _, verb := range verbs {
			rev, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Group: r.Group, Version: r.Version, Resource: r.Resource, Verb: verb},
			}}, metav1.CreateOptions{})
			if err != nil {
				return nil, fmt.Errorf("asking the physical cluster whether the syncer may %s %s: %v", verb, r.GroupResource(), err)
			}
			if !rev.Status.Allowed {
				out[r] = fmt.Sprintf("the syncer's credential on the physical cluster may not %s it (apply the manifest of this version: kubectl kcp workload sync)", verb)
				break
			}
		}
	}
	for r, why := range out {
		klog.InfoS("not syncing a resource to this physical cluster", "resource", r.GroupResource().String(), "reason", why)
	}
	return out, nil
}

func isNotFound(err error) bool {
	type status interface{ Status() metav1.Status }
	if s, ok := err.(status); ok {
		return s.Status().Code == 404
	}
	return false
}
