package podstreams

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
)

// Subresources are the pod subresources this package serves, with their
// REST storage, reading pods from pods.
func (s *Streams) Subresources(pods rest.Getter) map[string]rest.Storage {
	return map[string]rest.Storage{
		"pods/log":         &connecter{s: s, pods: pods, sub: "log", methods: []string{"GET"}, options: func() runtime.Object { return &api.PodLogOptions{} }},
		"pods/exec":        &connecter{s: s, pods: pods, sub: "exec", methods: []string{"GET", "POST"}, options: func() runtime.Object { return &api.PodExecOptions{} }},
		"pods/attach":      &connecter{s: s, pods: pods, sub: "attach", methods: []string{"GET", "POST"}, options: func() runtime.Object { return &api.PodAttachOptions{} }},
		"pods/portforward": &connecter{s: s, pods: pods, sub: "portforward", methods: []string{"GET", "POST"}, options: func() runtime.Object { return &api.PodPortForwardOptions{} }},
	}
}

// connecter is one subresource: a rest.Connecter that forwards to the
// pod's physical cluster.
type connecter struct {
	s       *Streams
	pods    rest.Getter
	sub     string
	methods []string
	options func() runtime.Object
}

var _ rest.Connecter = &connecter{}

func (c *connecter) New() runtime.Object { return &api.Pod{} }
func (c *connecter) Destroy()            {}

func (c *connecter) ConnectMethods() []string { return c.methods }

func (c *connecter) NewConnectOptions() (runtime.Object, bool, string) { return c.options(), false, "" }

// Connect runs after authentication, the workspace's authorization of the
// subresource and admission: it finds the pod in the workspace (NotFound
// as for any pod the workspace does not have) and where it runs.
func (c *connecter) Connect(ctx context.Context, name string, _ runtime.Object, responder rest.Responder) (http.Handler, error) {
	cluster, ok := logicalcluster.From(ctx)
	if !ok || cluster.IsWildcard() {
		return nil, apierrors.NewBadRequest("pod streams are served in one workspace")
	}
	namespace, ok := genericapirequest.NamespaceFrom(ctx)
	if !ok || namespace == "" {
		return nil, apierrors.NewBadRequest("a namespace is required")
	}
	obj, err := c.pods.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if c.sub != "log" {
		// A websocket upgrade is a GET, authorized by the chain as get;
		// running something in a pod needs create, as upstream checks.
		if err := c.s.authorizeCreate(ctx, c.sub, name); err != nil {
			return nil, err
		}
	}
	pod, ok := obj.(*api.Pod)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("pod storage returned %T", obj))
	}
	if c.s.clients == nil {
		return nil, apierrors.NewServiceUnavailable("pod streams are not set up yet")
	}
	t, err := c.s.route(ctx, cluster, pod)
	if err != nil {
		return nil, err
	}
	base, rt, upgrade, err := c.s.dialer(t)
	if err != nil {
		return nil, err
	}
	loc, err := url.Parse(base)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	loc.Path = strings.TrimSuffix(loc.Path, "/") + "/api/v1/namespaces/" + t.Namespace + "/pods/" + pod.Name + "/" + c.sub
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		release, err := c.s.acquire(cluster, t)
		if err != nil {
			responder.Error(err)
			return
		}
		defer release()
		l := *loc
		l.RawQuery = req.URL.RawQuery
		h := proxy.NewUpgradeAwareHandler(&l, rt, false, false, errorResponder{responder, t})
		h.UpgradeTransport = upgrade
		h.UseLocationHost = true
		// Logs -f: every chunk as it comes.
		h.FlushInterval = -1
		ctx, cancel := context.WithCancel(req.Context())
		defer cancel()
		go func() {
			select {
			case <-c.s.stopping:
				cancel()
			case <-ctx.Done():
			}
		}()
		out := req.Clone(ctx)
		syncer.StripCredentials(out.Header)
		h.ServeHTTP(w, out)
	}), nil
}

// errorResponder words errors of reaching the physical cluster.
type errorResponder struct {
	r rest.Responder
	t target
}

func (e errorResponder) Error(_ http.ResponseWriter, _ *http.Request, err error) {
	e.r.Error(apierrors.NewServiceUnavailable(fmt.Sprintf("reaching the physical cluster of %s: %v", e.t, err)))
}

// authorizeCreate checks the verb create on pods/<sub> for the caller, in
// the request's workspace.
func (s *Streams) authorizeCreate(ctx context.Context, sub, name string) error {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return apierrors.NewUnauthorized("no user")
	}
	namespace, _ := genericapirequest.NamespaceFrom(ctx)
	s.mu.Lock()
	authz := s.authz
	s.mu.Unlock()
	if authz == nil {
		return apierrors.NewServiceUnavailable("pod streams are not set up yet")
	}
	d, reason, err := authz.Authorize(ctx, authorizer.AttributesRecord{User: u, Verb: "create", Namespace: namespace,
		APIVersion: "v1", Resource: "pods", Subresource: sub, Name: name, ResourceRequest: true})
	if d == authorizer.DecisionAllow {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("%s", reason)
	}
	return apierrors.NewForbidden(schema.GroupResource{Resource: "pods/" + sub}, name, err)
}
