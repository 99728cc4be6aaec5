// Package pushsyncer runs syncers inside kcp (push mode): for every
// SyncTarget whose spec.push names a Secret with a kubeconfig of its
// physical cluster, kcp runs the same syncer library that bin/syncer runs
// in pull mode, through the same syncer view, and its heartbeat.
//
// A tenant-supplied kubeconfig makes kcp dial an address of the tenant's
// choosing, so push mode is off unless the server is started with
// --push-mode; the kubeconfig may hold inline credentials only (no files,
// no exec or auth-provider plugins, no proxy), and every connection goes
// through the outbound policy that tenants' webhooks use
// (--webhook-allowed-networks): loopback, private and link-local addresses
// are refused unless the operator allows them.
//
// kcp uses only the Secret that admission checked its writer may read
// (workload.PushSecretCheckedAnnotation, server/admission/pushsecret): a
// SyncTarget whose spec.push names another Secret runs no syncer, and its
// status says nothing of that Secret (not whether it exists, nor its
// server).
package pushsyncer

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/controllers/worker"
	"github.com/kcpsql/kcp/server/outbound"
	"github.com/kcpsql/kcp/server/podstreams"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
)

const (
	name = "kcp-push-syncers"
	// recheck reads a running target's Secret again this often.
	recheck = 30 * time.Second
	// HeartbeatInterval is how often a push-mode syncer reports.
	HeartbeatInterval = 5 * time.Second
)

// ReasonSecretNotChecked is the PushSyncer condition's reason for a
// SyncTarget whose spec.push names a Secret admission did not check.
const ReasonSecretNotChecked = "SecretNotChecked"

// Controller starts and stops push-mode syncers.
type Controller struct {
	enabled  bool
	loopback *rest.Config
	policy   *outbound.Policy
	clients  *clusterinformer.Clients
	queue    workqueue.TypedRateLimitingInterface[string]
	indexer  cache.Indexer
	informer cache.Controller

	serverURL string
	ca        []byte

	mu      sync.Mutex
	running map[string]*run
}

type run struct {
	cancel      context.CancelFunc
	fingerprint string
}

// NewController watches SyncTargets of all logical clusters. Disabled, it
// only reports on targets that ask for push mode that this server does not
// run it.
//
// serverURL and ca are kcp's own address and CA, which the pods of push-mode
// targets reach their workspace with unless the SyncTarget says otherwise
// (spec.workspaceAPI).
func NewController(loopback *rest.Config, enabled bool, policy *outbound.Policy, serverURL string, ca []byte) (*Controller, error) {
	wildcard, err := dynamic.NewForConfig(clusterinformer.WildcardConfig(loopback))
	if err != nil {
		return nil, err
	}
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{enabled: enabled, loopback: rest.CopyConfig(loopback), policy: policy, clients: clients, serverURL: serverURL, ca: ca,
		queue: worker.NewQueue[string](name), running: map[string]*run{}}
	enqueue := func(obj interface{}) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if key, err := clusterinformer.KeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	r := wildcard.Resource(workload.SyncTargetsResource)
	c.indexer, c.informer = clusterinformer.New(clusterinformer.ListWatch(r.List, r.Watch), &unstructured.Unstructured{}, nil,
		cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(old, obj interface{}) {
			if pushOf(old) != pushOf(obj) {
				enqueue(obj)
			}
		}, DeleteFunc: enqueue})
	return c, nil
}

func pushOf(obj interface{}) string {
	u := obj.(*unstructured.Unstructured)
	p, _, _ := unstructured.NestedStringMap(u.Object, "spec", "push")
	r, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "resources")
	return fmt.Sprint(p, r, u.GetAnnotations()[workload.PushSecretCheckedAnnotation])
}

// resolve finds the CRDs of spec.resources on the physical cluster.
func resolve(ctx context.Context, down *rest.Config, names []string) ([]syncer.ImportedResource, error) {
	grs, err := syncer.ParseResources(names)
	if err != nil || len(grs) == 0 {
		return nil, err
	}
	ext, err := apiextensionsclient.NewForConfig(down)
	if err != nil {
		return nil, err
	}
	return syncer.ResolveImports(ctx, ext, grs)
}

// Run processes the queue until ctx ends; every syncer it started stops
// with ctx.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.stopAll()
	worker.Run(ctx, name, c.queue, workers, []cache.Controller{c.informer}, func(wctx context.Context, key string) (time.Duration, error) {
		return c.reconcile(ctx, wctx, key)
	})
}

func (c *Controller) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, r := range c.running {
		r.cancel()
		delete(c.running, k)
	}
}

func (c *Controller) stop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.running[key]; r != nil {
		r.cancel()
		delete(c.running, key)
		klog.InfoS("stopped push-mode syncer", "syncTarget", key)
	}
}

func (c *Controller) reconcile(parent, ctx context.Context, key string) (time.Duration, error) {
	obj, ok, _ := c.indexer.GetByKey(key)
	if !ok {
		c.stop(key)
		return 0, nil
	}
	u := obj.(*unstructured.Unstructured)
	var target workload.SyncTarget
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &target); err != nil || target.Spec.Push == nil || target.DeletionTimestamp != nil {
		c.stop(key)
		return 0, nil
	}
	cluster := clusterinformer.ClusterOf(u)
	if !c.enabled {
		return 0, c.report(ctx, cluster, target.Name, metav1.ConditionFalse, "PushModeOff",
			"this kcp server does not run syncers itself (push mode is off: kcp start --push-mode); run bin/syncer beside the physical cluster instead (pull mode)")
	}
	p := target.Spec.Push
	if checked := target.Annotations[workload.PushSecretCheckedAnnotation]; checked == "" || checked != workload.PushSecretRef(p) {
		// Not the Secret admission checked: nothing of it is read or shown.
		c.stop(key)
		return 0, c.report(ctx, cluster, target.Name, metav1.ConditionFalse, ReasonSecretNotChecked,
			"kcp has not checked that whoever set spec.push may read the Secret it names, so it does not use it; "+
				"set spec.push again as a user allowed to get that Secret (see docs/multicluster.md, push mode)")
	}
	core, err := c.clients.Core(cluster)
	if err != nil {
		return 0, err
	}
	secret, err := core.Secrets(p.SecretNamespace).Get(ctx, p.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.stop(key)
		return recheck, c.report(ctx, cluster, target.Name, metav1.ConditionFalse, "SecretNotFound",
			fmt.Sprintf("Secret %s/%s does not exist in this workspace", p.SecretNamespace, p.SecretName))
	}
	if err != nil {
		return 0, err
	}
	raw := secret.Data["kubeconfig"]
	down, err := DownstreamConfig(raw, c.policy)
	if err != nil {
		c.stop(key)
		return recheck, c.report(ctx, cluster, target.Name, metav1.ConditionFalse, "InvalidKubeconfig",
			fmt.Sprintf("Secret %s/%s: %v", p.SecretNamespace, p.SecretName, err))
	}
	fp := fmt.Sprintf("%x/%v", sha256.Sum256(raw), target.Spec.Resources)
	c.mu.Lock()
	r := c.running[key]
	c.mu.Unlock()
	if r != nil && r.fingerprint == fp {
		return recheck, nil
	}
	c.stop(key)
	up := rest.CopyConfig(c.loopback)
	up.Host = strings.TrimSuffix(up.Host, "/") + "/clusters/" + string(cluster)
	imports, err := resolve(ctx, down, target.Spec.Resources)
	if err != nil {
		c.stop(key)
		return recheck, c.report(ctx, cluster, target.Name, metav1.ConditionFalse, "InvalidResources", err.Error())
	}
	synced := append([]schema.GroupVersionResource{}, workload.SyncedResources...)
	for _, imp := range imports {
		synced = append(synced, imp.Storage)
	}
	s, err := syncer.NewSyncer(up, target.Name, down, synced)
	if err != nil {
		return recheck, c.report(ctx, cluster, target.Name, metav1.ConditionFalse, "InvalidKubeconfig", err.Error())
	}
	if c.serverURL != "" {
		// Not the loopback connection's address and CA: kcp's own.
		if err := s.SetAPIDefaults(c.serverURL, c.ca); err != nil {
			klog.ErrorS(err, "kcp's address for the pods of push-mode targets")
		}
	}
	upClient, err := dynamic.NewForConfig(up)
	if err != nil {
		return 0, err
	}
	downClient, err := kubernetes.NewForConfig(down)
	if err != nil {
		return 0, err
	}
	sctx, cancel := context.WithCancel(parent)
	c.mu.Lock()
	c.running[key] = &run{cancel: cancel, fingerprint: fp}
	c.mu.Unlock()
	go s.Run(sctx, 2)
	// Pod streams (logs, exec, ...) of the target go over kcp's own
	// connection to the cluster.
	removeDirect := podstreams.Shared.AddDirect(workload.TargetKey(string(cluster), target.Name), down)
	go func() { <-sctx.Done(); removeDirect() }()
	go syncer.Heartbeat(sctx, upClient, target.Name, downClient, HeartbeatInterval, synced, s.CaughtUp, s.SetTarget)
	if ext, err := apiextensionsclient.NewForConfig(down); err == nil {
		go syncer.ReportImports(sctx, upClient, target.Name, ext, append(syncer.BuiltInImports(), imports...), recheck)
	}
	klog.InfoS("started push-mode syncer", "syncTarget", key, "physicalCluster", down.Host)
	return recheck, c.report(ctx, cluster, target.Name, metav1.ConditionTrue, "Running", "kcp runs this target's syncer (push mode) against "+down.Host)
}

// report sets the PushSyncer condition.
func (c *Controller) report(ctx context.Context, cluster logicalcluster.Name, targetName string, status metav1.ConditionStatus, reason, msg string) error {
	d, err := c.clients.Dynamic(cluster)
	if err != nil {
		return err
	}
	r := d.Resource(workload.SyncTargetsResource)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := r.Get(ctx, targetName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var st workload.SyncTargetStatus
		raw, _, _ := unstructured.NestedMap(obj.Object, "status")
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(st.Conditions, workload.ConditionPushSyncer); c != nil && c.Status == status && c.Reason == reason && c.Message == msg {
			return nil
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: workload.ConditionPushSyncer, Status: status, Reason: reason, Message: msg})
		out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			return err
		}
		obj.Object["status"] = out
		_, err = r.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: name})
		return err
	})
}

// DownstreamConfig builds the client configuration of a push-mode
// physical cluster from a tenant's kubeconfig: its current context, inline
// credentials only, dialing through the outbound policy.
func DownstreamConfig(raw []byte, policy *outbound.Policy) (*rest.Config, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("no key \"kubeconfig\"")
	}
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %v", err)
	}
	ctxName := cfg.CurrentContext
	kctx := cfg.Contexts[ctxName]
	if kctx == nil {
		return nil, fmt.Errorf("the kubeconfig has no current context")
	}
	cl, ai := cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo]
	if cl == nil {
		return nil, fmt.Errorf("the current context names no cluster")
	}
	switch {
	case cl.CertificateAuthority != "":
		return nil, fmt.Errorf("certificate-authority names a file; give certificate-authority-data")
	case cl.ProxyURL != "":
		return nil, fmt.Errorf("proxy-url is not allowed in push mode")
	case ai != nil && (ai.ClientCertificate != "" || ai.ClientKey != "" || ai.TokenFile != ""):
		return nil, fmt.Errorf("client-certificate, client-key and tokenFile name files; give their -data forms or a token")
	case ai != nil && (ai.Exec != nil || ai.AuthProvider != nil):
		return nil, fmt.Errorf("exec and auth-provider plugins are not allowed in push mode: kcp would run them")
	case ai != nil && (ai.Impersonate != "" || len(ai.ImpersonateGroups) > 0):
		return nil, fmt.Errorf("impersonation is not allowed in push mode")
	}
	if err := policy.CheckURL(cl.Server); err != nil {
		return nil, err
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*cfg, ctxName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 50, 100
	rc.Dial = policy.DialContext
	rc.Proxy = outbound.NoProxy
	return rc, nil
}
