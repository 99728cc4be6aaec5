package clusteradmission

import (
	"context"
	"fmt"
	"reflect"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	admissionregistrationinformers "k8s.io/client-go/informers/admissionregistration"
	admissionregistrationv1informers "k8s.io/client-go/informers/admissionregistration/v1"
	coreinformers "k8s.io/client-go/informers/core"
	corev1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	admissionregistrationv1listers "k8s.io/client-go/listers/admissionregistration/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/client/clusterinformer"
	serverinformer "github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// sharedInformers are one informer per resource the plugins read, over
// all clusters, shared by every cluster's stack through cluster views:
// a stack adds no watch and no informer goroutines, only its handlers.
type sharedInformers struct {
	namespaces *clusterinformer.Informer[*corev1.Namespace]
	vap        *clusterinformer.Informer[*admissionregistrationv1.ValidatingAdmissionPolicy]
	vapb       *clusterinformer.Informer[*admissionregistrationv1.ValidatingAdmissionPolicyBinding]
	mapo       *clusterinformer.Informer[*admissionregistrationv1.MutatingAdmissionPolicy]
	mapb       *clusterinformer.Informer[*admissionregistrationv1.MutatingAdmissionPolicyBinding]
	vwc        *clusterinformer.Informer[*admissionregistrationv1.ValidatingWebhookConfiguration]
	mwc        *clusterinformer.Informer[*admissionregistrationv1.MutatingWebhookConfiguration]
}

// startShared starts the configuration informers and waits for them.
// Namespaces are the server's shared informer, started by its owner and
// not waited for here: with 100,000 workspaces its first list takes tens of
// seconds, and until Start returns every request in every cluster is
// refused ("not loaded yet"), the server's own start-up writes included.
// The plugins of a cluster with policies wait for it themselves (their
// ready function) before they admit a request.
func startShared(ctx context.Context, loopback *rest.Config, namespaces *clusterinformer.Informer[*corev1.Namespace], local *localwatch.Storages) (*sharedInformers, error) {
	cs, err := kubernetes.NewForConfig(serverinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	a := cs.AdmissionregistrationV1()
	gv := admissionregistrationv1.SchemeGroupVersion
	vap, vapb := a.ValidatingAdmissionPolicies(), a.ValidatingAdmissionPolicyBindings()
	mapo, mapb := a.MutatingAdmissionPolicies(), a.MutatingAdmissionPolicyBindings()
	vwc, mwc := a.ValidatingWebhookConfigurations(), a.MutatingWebhookConfigurations()
	s := &sharedInformers{
		namespaces: namespaces,
		vap:        clusterinformer.New[*admissionregistrationv1.ValidatingAdmissionPolicy](localwatch.OrTyped(local, gv.WithResource("validatingadmissionpolicies"), vap.List, vap.Watch)),
		vapb:       clusterinformer.New[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](localwatch.OrTyped(local, gv.WithResource("validatingadmissionpolicybindings"), vapb.List, vapb.Watch)),
		mapo:       clusterinformer.New[*admissionregistrationv1.MutatingAdmissionPolicy](localwatch.OrTyped(local, gv.WithResource("mutatingadmissionpolicies"), mapo.List, mapo.Watch)),
		mapb:       clusterinformer.New[*admissionregistrationv1.MutatingAdmissionPolicyBinding](localwatch.OrTyped(local, gv.WithResource("mutatingadmissionpolicybindings"), mapb.List, mapb.Watch)),
		vwc:        clusterinformer.New[*admissionregistrationv1.ValidatingWebhookConfiguration](localwatch.OrTyped(local, gv.WithResource("validatingwebhookconfigurations"), vwc.List, vwc.Watch)),
		mwc:        clusterinformer.New[*admissionregistrationv1.MutatingWebhookConfiguration](localwatch.OrTyped(local, gv.WithResource("mutatingwebhookconfigurations"), mwc.List, mwc.Watch)),
	}
	for _, st := range []interface{ Start(context.Context) }{s.vap, s.vapb, s.mapo, s.mapb, s.vwc, s.mwc} {
		st.Start(ctx)
	}
	for _, w := range []interface {
		WaitForCacheSync(context.Context) error
	}{s.vap, s.vapb, s.mapo, s.mapb, s.vwc, s.mwc} {
		if err := w.WaitForCacheSync(ctx); err != nil {
			return nil, fmt.Errorf("admission policies and webhooks: %w", err)
		}
	}
	return s, nil
}

// hasPolicies says whether cluster has an admission policy or binding.
func (s *sharedInformers) hasPolicies(cluster logicalcluster.Name) bool {
	return has(cluster, s.vap.Indexer(), s.vapb.Indexer(), s.mapo.Indexer(), s.mapb.Indexer())
}

// hasWebhooks says whether cluster has a webhook configuration.
func (s *sharedInformers) hasWebhooks(cluster logicalcluster.Name) bool {
	return has(cluster, s.vwc.Indexer(), s.mwc.Indexer())
}

func has(cluster logicalcluster.Name, indexers ...cache.Indexer) bool {
	for _, i := range indexers {
		if keys, _ := i.IndexKeys(clusterinformer.ByCluster, string(cluster)); len(keys) > 0 {
			return true
		}
	}
	return false
}

// factory is the informer factory upstream's plugins get for one cluster:
// the accessors they use (namespaces and the six configuration resources)
// answer cluster views of the shared informers; any other accessor is the
// nil embedded interface and panics, which build turns into an error (a
// newer upstream plugin reading another informer would be caught by the
// admission e2e tests).
type factory struct {
	informers.SharedInformerFactory
	views map[string]cache.SharedIndexInformer
}

func (s *sharedInformers) factory(ctx context.Context, cluster logicalcluster.Name) *factory {
	return &factory{views: map[string]cache.SharedIndexInformer{
		"namespaces": s.namespaces.ClusterView(ctx, cluster),
		"vap":        s.vap.ClusterView(ctx, cluster),
		"vapb":       s.vapb.ClusterView(ctx, cluster),
		"map":        s.mapo.ClusterView(ctx, cluster),
		"mapb":       s.mapb.ClusterView(ctx, cluster),
		"vwc":        s.vwc.ClusterView(ctx, cluster),
		"mwc":        s.mwc.ClusterView(ctx, cluster),
	}}
}

// ForResource answers the generic informer of a resource the factory
// holds, and otherwise an error: upstream's policy plugins then watch a
// parameter resource (a policy's paramKind, say ConfigMaps) with an
// informer of their own on the cluster's dynamic client, scoped to that
// cluster. Without this method the nil embedded factory panicked in the
// plugins' background goroutine and ended the process.
func (f *factory) ForResource(gvr schema.GroupVersionResource) (informers.GenericInformer, error) {
	if gvr == corev1.SchemeGroupVersion.WithResource("namespaces") {
		return genericInformer{f.views["namespaces"], gvr.GroupResource()}, nil
	}
	if gvr.GroupVersion() == admissionregistrationv1.SchemeGroupVersion {
		for key, res := range map[string]string{"vap": "validatingadmissionpolicies", "vapb": "validatingadmissionpolicybindings", "map": "mutatingadmissionpolicies", "mapb": "mutatingadmissionpolicybindings", "vwc": "validatingwebhookconfigurations", "mwc": "mutatingwebhookconfigurations"} {
			if gvr.Resource == res {
				return genericInformer{f.views[key], gvr.GroupResource()}, nil
			}
		}
	}
	return nil, fmt.Errorf("no shared informer for %s", gvr)
}

type genericInformer struct {
	inf cache.SharedIndexInformer
	gr  schema.GroupResource
}

func (g genericInformer) Informer() cache.SharedIndexInformer { return g.inf }
func (g genericInformer) Lister() cache.GenericLister {
	return cache.NewGenericLister(g.inf.GetIndexer(), g.gr)
}

// Start and WaitForCacheSync have nothing to run: the shared informers
// run for the server's lifetime.
func (f *factory) Start(<-chan struct{}) {}

func (f *factory) WaitForCacheSync(<-chan struct{}) map[reflect.Type]bool { return nil }

func (f *factory) Core() coreinformers.Interface { return coreGroup{f: f} }

func (f *factory) Admissionregistration() admissionregistrationinformers.Interface {
	return admissionGroup{f: f}
}

type coreGroup struct {
	coreinformers.Interface
	f *factory
}

func (g coreGroup) V1() corev1informers.Interface { return coreV1{f: g.f} }

type coreV1 struct {
	corev1informers.Interface
	f *factory
}

func (c coreV1) Namespaces() corev1informers.TypedNamespaceInformer {
	return namespaceInformer{inf: c.f.views["namespaces"]}
}

type namespaceInformer struct {
	corev1informers.TypedNamespaceInformer
	inf cache.SharedIndexInformer
}

func (n namespaceInformer) Informer() cache.SharedIndexInformer { return n.inf }
func (n namespaceInformer) Lister() corev1listers.NamespaceLister {
	return corev1listers.NewNamespaceLister(n.inf.GetIndexer())
}

type admissionGroup struct {
	admissionregistrationinformers.Interface
	f *factory
}

func (g admissionGroup) V1() admissionregistrationv1informers.Interface { return admissionV1{f: g.f} }

type admissionV1 struct {
	admissionregistrationv1informers.Interface
	f *factory
}

func (a admissionV1) ValidatingAdmissionPolicies() admissionregistrationv1informers.TypedValidatingAdmissionPolicyInformer {
	return vapInformer{inf: a.f.views["vap"]}
}

func (a admissionV1) ValidatingAdmissionPolicyBindings() admissionregistrationv1informers.TypedValidatingAdmissionPolicyBindingInformer {
	return vapbInformer{inf: a.f.views["vapb"]}
}

func (a admissionV1) MutatingAdmissionPolicies() admissionregistrationv1informers.TypedMutatingAdmissionPolicyInformer {
	return mapInformer{inf: a.f.views["map"]}
}

func (a admissionV1) MutatingAdmissionPolicyBindings() admissionregistrationv1informers.TypedMutatingAdmissionPolicyBindingInformer {
	return mapbInformer{inf: a.f.views["mapb"]}
}

func (a admissionV1) ValidatingWebhookConfigurations() admissionregistrationv1informers.TypedValidatingWebhookConfigurationInformer {
	return vwcInformer{inf: a.f.views["vwc"]}
}

func (a admissionV1) MutatingWebhookConfigurations() admissionregistrationv1informers.TypedMutatingWebhookConfigurationInformer {
	return mwcInformer{inf: a.f.views["mwc"]}
}

type vapInformer struct {
	admissionregistrationv1informers.TypedValidatingAdmissionPolicyInformer
	inf cache.SharedIndexInformer
}

func (i vapInformer) Informer() cache.SharedIndexInformer { return i.inf }
func (i vapInformer) Lister() admissionregistrationv1listers.ValidatingAdmissionPolicyLister {
	return admissionregistrationv1listers.NewValidatingAdmissionPolicyLister(i.inf.GetIndexer())
}

type vapbInformer struct {
	admissionregistrationv1informers.TypedValidatingAdmissionPolicyBindingInformer
	inf cache.SharedIndexInformer
}

func (i vapbInformer) Informer() cache.SharedIndexInformer { return i.inf }
func (i vapbInformer) Lister() admissionregistrationv1listers.ValidatingAdmissionPolicyBindingLister {
	return admissionregistrationv1listers.NewValidatingAdmissionPolicyBindingLister(i.inf.GetIndexer())
}

type mapInformer struct {
	admissionregistrationv1informers.TypedMutatingAdmissionPolicyInformer
	inf cache.SharedIndexInformer
}

func (i mapInformer) Informer() cache.SharedIndexInformer { return i.inf }
func (i mapInformer) Lister() admissionregistrationv1listers.MutatingAdmissionPolicyLister {
	return admissionregistrationv1listers.NewMutatingAdmissionPolicyLister(i.inf.GetIndexer())
}

type mapbInformer struct {
	admissionregistrationv1informers.TypedMutatingAdmissionPolicyBindingInformer
	inf cache.SharedIndexInformer
}

func (i mapbInformer) Informer() cache.SharedIndexInformer { return i.inf }
func (i mapbInformer) Lister() admissionregistrationv1listers.MutatingAdmissionPolicyBindingLister {
	return admissionregistrationv1listers.NewMutatingAdmissionPolicyBindingLister(i.inf.GetIndexer())
}

type vwcInformer struct {
	admissionregistrationv1informers.TypedValidatingWebhookConfigurationInformer
	inf cache.SharedIndexInformer
}

func (i vwcInformer) Informer() cache.SharedIndexInformer { return i.inf }
func (i vwcInformer) Lister() admissionregistrationv1listers.ValidatingWebhookConfigurationLister {
	return admissionregistrationv1listers.NewValidatingWebhookConfigurationLister(i.inf.GetIndexer())
}

type mwcInformer struct {
	admissionregistrationv1informers.TypedMutatingWebhookConfigurationInformer
	inf cache.SharedIndexInformer
}

func (i mwcInformer) Informer() cache.SharedIndexInformer { return i.inf }
func (i mwcInformer) Lister() admissionregistrationv1listers.MutatingWebhookConfigurationLister {
	return admissionregistrationv1listers.NewMutatingWebhookConfigurationLister(i.inf.GetIndexer())
}
