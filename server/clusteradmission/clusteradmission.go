// Package clusteradmission applies each logical cluster's admission
// policies (ValidatingAdmissionPolicy, MutatingAdmissionPolicy and their
// bindings) and admission webhooks (Validating- and
// MutatingWebhookConfiguration) to the requests of that cluster, and only
// there.
//
// It runs upstream's four plugins unchanged, one set per logical cluster
// that has at least one such object (a "stack"), each set wired to clients
// of its own cluster and to cluster views of informers shared by all
// clusters: its policies, bindings, parameters, namespaces (for namespace
// selectors), REST mapping and OpenAPI are the cluster's, but a stack adds
// no watch of its own (parameter resources aside). The policy plugins and
// the webhook plugins are set up when the cluster first has objects of
// their kind. A cluster without any costs nothing but an index lookup per
// request; the stacks are found through six shared watches of the
// configuration objects of all clusters, and a stack is stopped a while
// after its cluster's last configuration object is gone.
//
// Webhook calls go through outbound.Policy: no server credentials, only
// allowed networks for URLs, and a service reference names a Service of
// the cluster itself, called on its pods on a physical cluster
// (server/servicedial).
package clusteradmission

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	mutatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	mutatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	validatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/component-base/featuregate"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/localwatch"
	"github.com/kcpsql/kcp/server/outbound"
	"github.com/kcpsql/kcp/server/percluster"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/ClusterAdmission"

// ConfigResources are the objects whose presence in a cluster gives it a
// stack.
var ConfigResources = []schema.GroupVersionResource{
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
}

// Plugin dispatches each request to the stack of its logical cluster.
type Plugin struct {
	*admission.Handler
	outbound *outbound.Policy
	authz    authorizer.Authorizer
	features featuregate.FeatureGate
	excluded []schema.GroupResource
	stacks   *percluster.Registry[*stack]
	clients  *clusterinformer.Clients // set by Start before stacks starts
	shared   *sharedInformers         // likewise
}

var instance = newPlugin()

func newPlugin() *Plugin {
	p := &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete, admission.Connect)}
	p.stacks = percluster.New("admission policies and webhooks", ConfigResources, func(ctx context.Context, cluster logicalcluster.Name) (*stack, error) {
		return p.build(ctx, cluster)
	})
	return p
}

var (
	_ admission.MutationInterface                 = &Plugin{}
	_ admission.ValidationInterface               = &Plugin{}
	_ initializer.WantsAuthorizer                 = &Plugin{}
	_ initializer.WantsFeatures                   = &Plugin{}
	_ initializer.WantsExcludedAdmissionResources = &Plugin{}
)

// Register adds the plugin, calling webhooks as policy allows, to a plugin
// registry. There is one instance per process, started by Start.
func Register(plugins *admission.Plugins, policy *outbound.Policy) {
	instance.outbound = policy
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return instance, nil })
}

// SetAuthorizer receives the server's authorizer, which the policies' CEL
// authorizer checks use (it decides by the request's cluster).
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authz = a }

// InspectFeatureGates receives the server's feature gates.
func (p *Plugin) InspectFeatureGates(f featuregate.FeatureGate) { p.features = f }

// SetExcludedAdmissionResources receives the resources (reviews) that no
// policy or webhook may intercept.
func (p *Plugin) SetExcludedAdmissionResources(r []schema.GroupResource) {
	p.excluded = append(p.excluded, r...)
}

// ValidateInitialization checks that the server gave the plugin its
// authorizer.
func (p *Plugin) ValidateInitialization() error {
	if p.authz == nil {
		return fmt.Errorf("%s: no authorizer", PluginName)
	}
	return nil
}

// Start watches the configuration objects of all clusters and starts and
// stops stacks as they come and go. It returns once the watches have their
// first lists (or after 30 s), so that a ready server enforces the policies
// it has stored.
func Start(ctx context.Context, loopback *rest.Config, namespaces *clusterinformer.Namespaces, local *localwatch.Storages) error {
	p := instance
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return err
	}
	p.clients = clients
	if p.shared, err = startShared(ctx, loopback, namespaces, local); err != nil {
		return err
	}
	return p.stacks.Start(ctx, loopback)
}

// stack is upstream's four plugins for one logical cluster, in two halves
// built when the cluster first has objects of their kind: its admission
// policies (and bindings), and its webhook configurations. Each webhook
// plugin sets up a CEL compiler of its own for match conditions (about
// 0.45 MiB), which a cluster with policies alone does not pay.
type stack struct {
	build             func(webhooks bool) (*half, error)
	hasPolicies       func() bool
	hasWebhooks       func() bool
	mu                sync.Mutex
	policies, webhook atomic.Pointer[half]
}

// half is a mutating and a validating plugin: policies or webhooks.
type half struct {
	mutator   admission.MutationInterface
	validator admission.ValidationInterface
}

// halves returns the stack's halves built so far, first building one
// whose kind the cluster now has, policies before webhooks (upstream's
// order).
func (s *stack) halves() ([]*half, error) {
	var out []*half
	for _, webhooks := range []bool{false, true} {
		slot, present := &s.policies, s.hasPolicies
		if webhooks {
			slot, present = &s.webhook, s.hasWebhooks
		}
		h := slot.Load()
		if h == nil && present() {
			var err error
			if h, err = s.buildOnce(slot, webhooks); err != nil {
				return nil, err
			}
		}
		if h != nil {
			out = append(out, h)
		}
	}
	return out, nil
}

func (s *stack) buildOnce(slot *atomic.Pointer[half], webhooks bool) (*half, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := slot.Load(); h != nil {
		return h, nil
	}
	h, err := s.build(webhooks)
	if err != nil {
		return nil, err
	}
	slot.Store(h)
	return h, nil
}

func (p *Plugin) build(ctx context.Context, cluster logicalcluster.Name) (*stack, error) {
	client, err := p.clients.Kubernetes(cluster)
	if err != nil {
		return nil, err
	}
	dyn, err := p.clients.Dynamic(cluster)
	if err != nil {
		return nil, err
	}
	factory := p.shared.factory(ctx, cluster)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	features := p.features
	if features == nil {
		features = utilfeature.DefaultFeatureGate
	}
	init := initializer.New(client, dyn, factory, p.authz, features, nil, ctx.Done(), mapper)
	return &stack{
		hasPolicies: func() bool { return p.shared.hasPolicies(cluster) },
		hasWebhooks: func() bool { return p.shared.hasWebhooks(cluster) },
		build: func(webhooks bool) (*half, error) {
			return p.buildHalf(init, cluster, webhooks)
		},
	}, nil
}

// buildHalf sets up upstream's policy plugins, or its webhook plugins,
// for one cluster.
func (p *Plugin) buildHalf(init admission.PluginInitializer, cluster logicalcluster.Name, webhooks bool) (_ *half, err error) {
	defer func() {
		// An upstream plugin reading an informer the cluster factory does
		// not offer (see factory).
		if r := recover(); r != nil {
			err = fmt.Errorf("setting up upstream's admission plugins: %v", r)
		}
	}()
	var h half
	if webhooks {
		mw, err := mutatingwebhook.NewMutatingWebhook(nil)
		if err != nil {
			return nil, err
		}
		vw, err := validatingwebhook.NewValidatingAdmissionWebhook(nil)
		if err != nil {
			return nil, err
		}
		// Service references are Services of this cluster.
		mw.SetAuthenticationInfoResolverWrapper(p.outbound.AuthResolverWrapperFor(cluster))
		vw.SetAuthenticationInfoResolverWrapper(p.outbound.AuthResolverWrapperFor(cluster))
		h = half{mutator: mw, validator: vw}
	} else {
		mp, err := mutatingpolicy.NewPlugin(nil)
		if err != nil {
			return nil, err
		}
		vp, err := validatingpolicy.NewPlugin(nil)
		if err != nil {
			return nil, err
		}
		h = half{mutator: mp, validator: vp}
	}
	for _, pl := range []admission.Interface{h.mutator, h.validator} {
		if w, ok := pl.(initializer.WantsExcludedAdmissionResources); ok {
			w.SetExcludedAdmissionResources(p.excluded)
		}
		if w, ok := pl.(initializer.WantsAPIServerID); ok {
			w.SetAPIServerID("kcp")
		}
		init.Initialize(pl)
		if v, ok := pl.(admission.InitializationValidator); ok {
			if err := v.ValidateInitialization(); err != nil {
				return nil, fmt.Errorf("%T: %v", pl, err)
			}
		}
	}
	return &h, nil
}

// forRequest returns the plugins of the request's cluster: none if it
// has no stack.
func (p *Plugin) forRequest(ctx context.Context, a admission.Attributes) ([]*half, error) {
	cluster, ok := logicalcluster.From(ctx)
	if !ok || cluster == logicalcluster.Wildcard {
		return nil, nil
	}
	s, ok, err := p.stacks.Get(ctx, cluster)
	if err == nil && ok {
		var halves []*half
		if halves, err = s.halves(); err == nil {
			return halves, nil
		}
	}
	if err != nil {
		return nil, admission.NewForbidden(a, fmt.Errorf("the admission policies and webhooks of this logical cluster: %v", err))
	}
	return nil, nil
}

// Admit runs the cluster's mutating admission policies, then its mutating
// webhooks.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	halves, err := p.forRequest(ctx, a)
	if err != nil {
		return err
	}
	for _, h := range halves {
		if h.mutator.Handles(a.GetOperation()) {
			if err := h.mutator.Admit(ctx, a, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// Validate runs the cluster's validating admission policies, then its
// validating webhooks.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	halves, err := p.forRequest(ctx, a)
	if err != nil {
		return err
	}
	for _, h := range halves {
		if h.validator.Handles(a.GetOperation()) {
			if err := h.validator.Validate(ctx, a, o); err != nil {
				return err
			}
		}
	}
	return nil
}
