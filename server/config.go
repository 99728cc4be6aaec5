package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"strconv"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/webhook"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/controlplane"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	cpoptions "k8s.io/kubernetes/pkg/controlplane/apiserver/options"
	genericcp "k8s.io/kubernetes/pkg/controlplane/apiserver/samples/generic/server"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	"github.com/kcpsql/kcp/server/clusterauthz"
	"github.com/kcpsql/kcp/server/clusterrbac"
	"github.com/kcpsql/kcp/server/logicalclusters"
	"github.com/kcpsql/kcp/server/requester"
	"github.com/kcpsql/kcp/server/satokens"
	"github.com/kcpsql/kcp/server/serverwide"
	"github.com/kcpsql/kcp/server/viewidentity"
	"github.com/kcpsql/kcp/server/workloadapis"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// newConfig builds the configuration of the three upstream servers in the
// steps of upstream's generic control plane (genericcp.NewConfig), with the
// authenticator and authorizer made cluster-aware between the first step,
// which builds them, and the next, which hands the authorizer to every
// admission plugin (certificate approval and signing, ...) and to the API
// storage (the RBAC escalation check). Wrapped later, those would keep
// root's RBAC and answer every cluster with it.
func newConfig(opts cpoptions.CompletedOptions, rbac *clusterrbac.Authorizer, clusters *logicalclusters.Registry, parentAccess func(context.Context, logicalcluster.Name, user.Info) (bool, bool)) (*genericcp.Config, error) {
	resources := controlplane.DefaultGenericAPIResourceConfigSource()
	workloadapis.Enable(resources)
	generic, informers, storageFactory, err := controlplaneapiserver.BuildGenericConfig(opts,
		[]*runtime.Scheme{legacyscheme.Scheme, apiextensionsapiserver.Scheme, aggregatorscheme.Scheme},
		resources, generatedopenapi.GetOpenAPIDefinitions, nil)
	if err != nil {
		return nil, err
	}
	if generic.APIServerID != "" {
		generic.APIServerID = replicaIdentity(opts.SecureServing.BindAddress.String(), opts.SecureServing.BindPort)
	}
	makeAuthClusterAware(generic, rbac, clusters, parentAccess)

	serviceResolver := webhook.NewDefaultServiceResolver()
	cp, admissionInitializers, err := controlplaneapiserver.CreateConfig(opts, generic, informers, nil, storageFactory, serviceResolver, nil)
	if err != nil {
		return nil, err
	}
	cp.Extra.ServiceAccountIssuer = satokens.WithClusterClaim(cp.Extra.ServiceAccountIssuer)
	authInfoResolver := webhook.NewDefaultAuthenticationInfoResolverWrapper(cp.ProxyTransport, cp.Generic.EgressSelector,
		cp.Generic.LoopbackClientConfig, cp.Generic.TracerProvider)
	ae, err := controlplaneapiserver.CreateAPIExtensionsConfig(*cp.Generic, cp.VersionedInformers, admissionInitializers, opts, 3, serviceResolver, authInfoResolver)
	if err != nil {
		return nil, err
	}
	agg, err := controlplaneapiserver.CreateAggregatorConfig(*cp.Generic, opts, cp.VersionedInformers, serviceResolver, cp.ProxyTransport, cp.Extra.PeerProxy, admissionInitializers)
	if err != nil {
		return nil, err
	}
	agg.ExtraConfig.DisableRemoteAvailableConditionController = true
	return &genericcp.Config{Options: opts, ControlPlane: cp, APIExtensions: ae, Aggregator: agg}, nil
}

// makeAuthClusterAware: every authorization goes through clusterauthz, and
// users authenticated by a service-account token say so (satokens), since
// clusterauthz lets such a user into its own cluster without asking the
// parent.
func makeAuthClusterAware(g *genericapiserver.Config, rbac *clusterrbac.Authorizer, clusters *logicalclusters.Registry, parentAccess func(context.Context, logicalcluster.Name, user.Info) (bool, bool)) {
	if g.Authentication.Authenticator != nil {
		// A request the syncer view accepted continues as the view's
		// identity (syncerview).
		// The user proven is remembered before impersonation replaces it
		// (requester.Both).
		g.Authentication.Authenticator = requester.Remember(viewidentity.WithViewIdentity(satokens.WithServiceAccountIdentity(g.Authentication.Authenticator)))
	}
	if g.Authorization.Authorizer != nil {
		// serverwide leaves the server's own endpoints (metrics, debug,
		// health) to root's RBAC, whatever /clusters prefix reaches them.
		// A service account is itself only in its own cluster
		// (clusterauthz.SeenIn): both RBAC chains see one of another
		// cluster under its foreign name.
		root := clusterauthz.OwnClusterOnly{Next: g.Authorization.Authorizer}
		cluster := clusterauthz.Authorizer{Delegate: root, Clusters: clusterauthz.OwnClusterOnly{Next: rbac}, State: clusters.State, Owner: clusters.Owner, ParentAccess: parentAccess}
		g.Authorization.Authorizer = serverwide.Authorizer{Root: root, Next: cluster, AuditAnnotation: clusterauthz.AuditAnnotation}
	}
	if g.RuleResolver != nil {
		g.RuleResolver = clusterauthz.RuleResolver{Delegate: clusterauthz.OwnClusterRules{Next: g.RuleResolver}, Clusters: clusterauthz.OwnClusterRules{Next: rbac}}
	}
}

// convertServed turns a served default (storage/serveddefaults: a v1
// object) into the internal type the API server's stores hold, defaulted
// first, as the storage codec defaults what it decodes before converting
// (clusterstore.ConvertObject).
func convertServed(in, out runtime.Object) error {
	legacyscheme.Scheme.Default(in)
	return legacyscheme.Scheme.Convert(in, out, nil)
}

// replicaIdentity is the name of this replica's API server identity Lease
// (kube-system in root, held and renewed by upstream's identity lease
// controller): a hash of the host name and the address and port it
// serves on. Upstream hashes the host name alone, so replicas on one host
// (tests, a laptop, several replicas per node with host networking)
// shared one Lease and fought over it every few seconds ("Failed to
// update lease"). Set right after the generic config is built: before,
// only the authentication and authorization configs' reload metrics
// read the ID (kcp serves neither file), and everything that names the
// replica to others (the Lease, storage versions, the peer proxy) reads
// it from here on. Stable across restarts of the same replica, as
// upstream's is.
func replicaIdentity(bindAddress string, port int) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	sum := sha256.Sum256([]byte(host + "\x00" + net.JoinHostPort(bindAddress, strconv.Itoa(port))))
	return fmt.Sprintf("apiserver-%x", sum[:12])
}
