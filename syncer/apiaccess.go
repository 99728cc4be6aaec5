package syncer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Pods talk to their workspace. Every pod the syncer runs (a Pod, or the
// template of a Deployment, StatefulSet, DaemonSet, Job or CronJob) gets,
// in place of the physical cluster's service-account token, what
// client-go's rest.InClusterConfig reads:
//
//   - KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT: kcp's address
//     as the cluster's pods reach it (the SyncTarget's
//     spec.workspaceAPI.address, else the syncer's own);
//   - at /var/run/secrets/kubernetes.io/serviceaccount: token, ca.crt and
//     namespace, from a Secret the syncer keeps in the downstream namespace
//     (APIAccessSecretPrefix + the ServiceAccount's name), holding a token
//     of the pod's ServiceAccount in its workspace that kcp issued (through
//     the syncer view), renewed at 80% of its life as the kubelet renews
//     projected tokens; the kubelet brings the new one into the pods.
//
// A request with that token and no /clusters/ path goes to the token's
// workspace (server/routing), so the pod's client sees its workspace, as
// its ServiceAccount there, under the workspace's RBAC. The physical
// cluster's own token is not mounted (automountServiceAccountToken:
// false). A workload that asks for the physical cluster's API
// (workload.APIAccessAnnotation) keeps it where the SyncTarget allows
// that (spec.workspaceAPI.allowPhysicalAPI); kcp's admission refuses the
// annotation elsewhere.

const (
	// APIAccessSecretPrefix starts the names of the Secrets holding the
	// workspace tokens (upstream Secrets with such names are not synced).
	APIAccessSecretPrefix = "kcp-api-access-"
	// APIAccessLabel marks those Secrets with the target key.
	APIAccessLabel = "workload.kcp.io/api-access"
	// ServiceAccountAnnotation names the upstream ServiceAccount.
	ServiceAccountAnnotation = "workload.kcp.io/service-account"
	// TokenRefreshAnnotation is when the token is renewed (RFC 3339).
	TokenRefreshAnnotation = "workload.kcp.io/token-refresh"
	// TokenExpiryAnnotation is when it expires.
	TokenExpiryAnnotation = "workload.kcp.io/token-expiry"
	// apiConfigAnnotation fingerprints the address and CA it was made
	// for (a change of either rewrites it).
	apiConfigAnnotation = "workload.kcp.io/api-config"
	// RedirectedAnnotation marks a downstream copy whose pods were given
	// the workspace API.
	RedirectedAnnotation = "workload.kcp.io/workspace-api"

	apiAccessVolume = "kcp-api-access"
	inClusterPath   = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// TokenSeconds is the lifetime the syncer asks for (renewed at 80%).
var TokenSeconds int64 = 3600

// apiEndpoint is where and how the pods reach kcp.
type apiEndpoint struct {
	host, port string
	ca         []byte
	// physical is the target's rule for opting out (nil: nobody may).
	physical *workload.WorkspaceAPISpec
}

func (e *apiEndpoint) fingerprint() string {
	sum := sha256.Sum256([]byte(e.host + "\x00" + e.port + "\x00" + string(e.ca)))
	return hex.EncodeToString(sum[:8])
}

// apiAccess is the syncer's part of it.
type apiAccess struct {
	// defaults come from the syncer's own connection to kcp (pull mode) or
	// from kcp (push mode, SetAPIDefaults); the SyncTarget overrides them.
	defaults atomic.Pointer[apiEndpoint]
	current  atomic.Pointer[apiEndpoint]

	core    kubernetes.Interface
	secrets cache.Indexer

	// issue serializes the check and the writing of tokens (two workers
	// syncing workloads of one ServiceAccount ask for one token).
	issue sync.Mutex
}

// defaultEndpoint derives the pods' address and CA from the syncer's
// connection to kcp.
func defaultEndpoint(up *rest.Config) *apiEndpoint {
	base, _, err := SplitServer(up.Host)
	if err != nil {
		return nil
	}
	e, err := endpointFrom(base, up.CAData)
	if err != nil {
		return nil
	}
	if len(e.ca) == 0 && up.CAFile != "" {
		e.ca, _ = os.ReadFile(up.CAFile)
	}
	return e
}

func endpointFrom(address string, ca []byte) (*apiEndpoint, error) {
	u, err := url.Parse(address)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("kcp's address for pods must be https://host[:port], not %q", address)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "443"
	}
	return &apiEndpoint{host: host, port: port, ca: ca}, nil
}

// SetAPIDefaults sets kcp's address and CA for the pods when the
// SyncTarget names none (push mode: kcp's own URL and CA).
func (s *Syncer) SetAPIDefaults(address string, ca []byte) error {
	e, err := endpointFrom(address, ca)
	if err != nil {
		return err
	}
	s.api.defaults.Store(e)
	return nil
}

// SetTarget gives the syncer its SyncTarget's spec (the heartbeat reads it)
// and fills in the part of its status the syncer keeps (conflicts).
func (s *Syncer) SetTarget(target *workload.SyncTarget) {
	// The heartbeat writes this status: the refused objects go with it.
	target.Status.Conflicts = s.ConflictStatus()
	s.setOutOfCapacity(target, time.Now())
	s.SetPodSecurity(target)
	var e *apiEndpoint
	if d := s.api.defaults.Load(); d != nil {
		c := *d
		e = &c
	}
	if w := target.Spec.WorkspaceAPI; w != nil {
		if w.Address != "" {
			if o, err := endpointFrom(w.Address, nil); err == nil {
				if e == nil {
					e = &apiEndpoint{}
				}
				e.host, e.port = o.host, o.port
			} else {
				klog.ErrorS(err, "ignoring the SyncTarget's spec.workspaceAPI.address", "syncTarget", s.target)
			}
		}
		if w.CABundle != "" && e != nil {
			e.ca = []byte(w.CABundle)
		}
	}
	if e != nil {
		e.physical = target.Spec.WorkspaceAPI.DeepCopy()
	}
	prev := s.api.current.Swap(e)
	if prev != nil && e != nil && prev.fingerprint() == e.fingerprint() && reflect.DeepEqual(prev.physical, e.physical) {
		return
	}
	if prev == nil && e == nil {
		return
	}
	// New address, CA or opt-out rule: every workload with pods again.
	for _, gvr := range s.resources {
		if podSpecPath(gvr.Resource) == nil {
			continue
		}
		for _, o := range s.upstream[gvr].List() {
			m, _ := meta.Accessor(o) // its identity, without decoding it
			s.queue.Add(item{gvr: gvr, cluster: clusterinformer.ClusterOf(m), namespace: m.GetNamespace(), name: m.GetName()})
		}
	}
}

// legacyPod reports whether a downstream copy is a Pod the syncer created
// before it gave pods the workspace API: a Pod's spec cannot change, so it
// runs on as it was (until it is recreated) rather than fail every apply.
func legacyPod(resource string, down *unstructured.Unstructured) bool {
	return resource == "pods" && down != nil && down.GetAnnotations()[RedirectedAnnotation] == ""
}

// podSpecPath is where a synced resource keeps the spec of its pods.
func podSpecPath(resource string) []string {
	switch resource {
	case "pods":
		return []string{"spec"}
	case "deployments", "statefulsets", "daemonsets", "jobs", "replicasets":
		return []string{"spec", "template", "spec"}
	case "cronjobs":
		return []string{"spec", "jobTemplate", "spec", "template", "spec"}
	}
	return nil
}

// optsOut reports whether a workload asks for the physical cluster's API
// (on itself or on its pod template).
func optsOut(obj *unstructured.Unstructured, specPath []string) bool {
	if obj.GetAnnotations()[workload.APIAccessAnnotation] == workload.APIAccessPhysical {
		return true
	}
	if len(specPath) > 1 {
		meta := append(append([]string{}, specPath[:len(specPath)-1]...), "metadata", "annotations", workload.APIAccessAnnotation)
		v, _, _ := unstructured.NestedString(obj.Object, meta...)
		return v == workload.APIAccessPhysical
	}
	return false
}

// APIAccessSecretName is the downstream Secret of a ServiceAccount's token.
func APIAccessSecretName(serviceAccount string) string {
	name := APIAccessSecretPrefix + serviceAccount
	if len(name) > 253 {
		sum := sha256.Sum256([]byte(serviceAccount))
		name = APIAccessSecretPrefix + hex.EncodeToString(sum[:16])
	}
	return name
}

// redirectPods points the pods of a downstream copy at their workspace,
// and returns the ServiceAccount whose token they mount ("" for none).
func (s *Syncer) redirectPods(resource string, up, out *unstructured.Unstructured) (string, error) {
	path := podSpecPath(resource)
	if path == nil {
		return "", nil
	}
	spec, found, err := unstructured.NestedMap(out.Object, path...)
	if err != nil || !found {
		return "", err
	}
	e := s.api.current.Load()
	if e == nil {
		e = s.api.defaults.Load()
	}
	if e == nil {
		return "", fmt.Errorf("kcp's address for the pods is not known (set the SyncTarget's spec.workspaceAPI.address)")
	}
	if optsOut(up, path) {
		if e.physical.AllowsPhysicalAPIFor(string(clusterinformer.ClusterOf(up))) {
			return "", nil
		}
		klog.V(2).InfoS("a workload asks for the physical cluster's API, which its SyncTarget does not allow; it gets its workspace's",
			"cluster", clusterinformer.ClusterOf(up), "namespace", up.GetNamespace(), "name", up.GetName())
	}
	sa, _ := spec["serviceAccountName"].(string)
	if sa == "" {
		sa, _ = spec["serviceAccount"].(string)
	}
	if sa == "" {
		sa = "default"
	}
	mount := true
	if v, ok := spec["automountServiceAccountToken"].(bool); ok {
		mount = v
	} else if obj, ok, _ := s.upstreamServiceAccount(clusterinformer.ClusterOf(up), up.GetNamespace(), sa); ok {
		if v, found, _ := unstructured.NestedBool(obj.Object, "automountServiceAccountToken"); found && !v {
			mount = false
		}
	}
	spec["automountServiceAccountToken"] = false
	ann := out.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[RedirectedAnnotation] = "true"
	out.SetAnnotations(ann)
	if mount {
		vols, _ := spec["volumes"].([]interface{})
		has := false
		for _, v := range vols {
			if m, ok := v.(map[string]interface{}); ok && m["name"] == apiAccessVolume {
				has = true
			}
		}
		if !has {
			spec["volumes"] = append(vols, map[string]interface{}{
				"name": apiAccessVolume,
				"secret": map[string]interface{}{
					"secretName":  APIAccessSecretName(sa),
					"defaultMode": int64(0o644),
				},
			})
		}
	}
	for _, field := range []string{"initContainers", "containers"} {
		cs, _ := spec[field].([]interface{})
		for _, c := range cs {
			m, ok := c.(map[string]interface{})
			if !ok {
				continue
			}
			if mount {
				mounts, _ := m["volumeMounts"].([]interface{})
				taken := false
				for _, vm := range mounts {
					if vmm, ok := vm.(map[string]interface{}); ok && strings.TrimSuffix(fmt.Sprint(vmm["mountPath"]), "/") == inClusterPath {
						taken = true // the workload mounts something of its own there
					}
				}
				if !taken {
					m["volumeMounts"] = append(mounts, map[string]interface{}{"name": apiAccessVolume, "mountPath": inClusterPath, "readOnly": true})
				}
			}
			env, _ := m["env"].([]interface{})
			set := map[string]bool{}
			for _, ev := range env {
				if em, ok := ev.(map[string]interface{}); ok {
					set[fmt.Sprint(em["name"])] = true
				}
			}
			for _, kv := range [][2]string{{"KUBERNETES_SERVICE_HOST", e.host}, {"KUBERNETES_SERVICE_PORT", e.port}} {
				if !set[kv[0]] {
					env = append(env, map[string]interface{}{"name": kv[0], "value": kv[1]})
				}
			}
			m["env"] = env
		}
	}
	if err := unstructured.SetNestedMap(out.Object, spec, path...); err != nil {
		return "", err
	}
	if !mount {
		return "", nil
	}
	return sa, nil
}

func (s *Syncer) upstreamServiceAccount(cluster logicalcluster.Name, namespace, name string) (*unstructured.Unstructured, bool, error) {
	idx, ok := s.upstream[serviceAccountsGVR]
	if !ok {
		return nil, false, nil
	}
	o, exists, err := idx.GetByKey(clusterinformer.Key(cluster, namespace, name))
	if !exists || err != nil {
		return nil, false, err
	}
	return object(o), true, nil
}

var serviceAccountsGVR = corev1.SchemeGroupVersion.WithResource("serviceaccounts")

// newAPIAccessInformer watches the Secrets the syncer keeps for tokens.
func (s *Syncer) newAPIAccessInformer(down *rest.Config) (cache.Controller, error) {
	core, err := kubernetes.NewForConfig(down)
	if err != nil {
		return nil, err
	}
	s.api.core = core
	sel := APIAccessLabel + "=" + s.key
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return core.CoreV1().Secrets("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return core.CoreV1().Secrets("").Watch(ctx, o)
		},
	}
	// Only the Secrets' metadata is kept: the syncer reads their
	// annotations, never the token (trimSecret).
	idx, inf := cache.NewTransformingIndexerInformer(lw, &corev1.Secret{}, 0, cache.ResourceEventHandlerFuncs{}, cache.Indexers{}, trimSecret)
	s.api.secrets = idx
	return inf, nil
}

// ensureAPIAccess makes sure the downstream namespace holds a valid token
// of the ServiceAccount for the current address and CA.
func (s *Syncer) ensureAPIAccess(ctx context.Context, cluster logicalcluster.Name, upstreamNS, dns, sa string) error {
	e := s.api.current.Load()
	if e == nil {
		e = s.api.defaults.Load()
	}
	if e == nil {
		return fmt.Errorf("kcp's address for the pods is not known")
	}
	s.api.issue.Lock()
	defer s.api.issue.Unlock()
	key := dns + "/" + APIAccessSecretName(sa)
	now := time.Now()
	if o, ok, _ := s.api.secrets.GetByKey(key); ok {
		sec := o.(*corev1.Secret)
		t, err := time.Parse(time.RFC3339, sec.Annotations[TokenRefreshAnnotation])
		if err == nil && now.Before(t) && sec.Annotations[apiConfigAnnotation] == e.fingerprint() &&
			sec.Annotations[ServiceAccountAnnotation] == sa {
			return nil
		}
	}
	return s.issueToken(ctx, cluster, upstreamNS, dns, sa, e)
}

// issueToken asks kcp for a token and writes the Secret.
func (s *Syncer) issueToken(ctx context.Context, cluster logicalcluster.Name, upstreamNS, dns, sa string, e *apiEndpoint) error {
	up, err := s.upClient(cluster)
	if err != nil {
		return err
	}
	seconds := TokenSeconds
	tr := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"metadata": map[string]interface{}{"name": sa, "namespace": upstreamNS},
		"spec":     map[string]interface{}{"expirationSeconds": seconds},
	}}
	got, err := up.Resource(serviceAccountsGVR).Namespace(upstreamNS).Create(ctx, tr, metav1.CreateOptions{}, "token")
	if err != nil {
		return fmt.Errorf("a token of ServiceAccount %s/%s in %s for its pods: %v", upstreamNS, sa, cluster, err)
	}
	token, _, _ := unstructured.NestedString(got.Object, "status", "token")
	expiry := time.Now().Add(time.Duration(seconds) * time.Second)
	if ts, _, _ := unstructured.NestedString(got.Object, "status", "expirationTimestamp"); ts != "" {
		if t, err := time.Parse(time.RFC3339, ts); err == nil {
			expiry = t
		}
	}
	if token == "" {
		return fmt.Errorf("kcp answered a TokenRequest for %s/%s in %s without a token", upstreamNS, sa, cluster)
	}
	issued := time.Now()
	refresh := issued.Add(expiry.Sub(issued) * 8 / 10)
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: APIAccessSecretName(sa), Namespace: dns,
			Labels: map[string]string{APIAccessLabel: s.key},
			Annotations: map[string]string{
				UpstreamClusterAnnotation: string(cluster), UpstreamNamespaceAnnotation: upstreamNS,
				ServiceAccountAnnotation: sa,
				TokenRefreshAnnotation:   refresh.UTC().Format(time.RFC3339),
				TokenExpiryAnnotation:    expiry.UTC().Format(time.RFC3339),
				apiConfigAnnotation:      e.fingerprint(),
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"token": []byte(token), "ca.crt": e.ca, "namespace": []byte(upstreamNS)},
	}
	secrets := s.api.core.CoreV1().Secrets(dns)
	written, err := secrets.Update(ctx, sec, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		written, err = secrets.Create(ctx, sec, metav1.CreateOptions{FieldManager: FieldManager})
	}
	if err != nil {
		return err
	}
	// What was written counts at once (the informer shows it a moment
	// later): the next workload of the ServiceAccount asks for no token.
	if kept, err := trimSecret(written); err == nil {
		_ = s.api.secrets.Update(kept)
	}
	klog.V(2).InfoS("workspace token for pods written", "cluster", cluster, "namespace", upstreamNS, "serviceAccount", sa,
		"downstreamNamespace", dns, "refresh", refresh.Format(time.RFC3339))
	return nil
}

// renewTokens renews tokens due for it, and deletes the Secrets no synced
// workload mounts any more, until ctx ends.
func (s *Syncer) renewTokens(ctx context.Context) {
	wait.UntilWithContext(ctx, s.renewOnce, 10*time.Second)
}

func (s *Syncer) renewOnce(ctx context.Context) {
	used := s.mountedServiceAccounts()
	for _, o := range s.api.secrets.List() {
		sec := o.(*corev1.Secret)
		a := sec.Annotations
		cl, err := logicalcluster.Parse(a[UpstreamClusterAnnotation])
		if err != nil {
			continue
		}
		sa, ns := a[ServiceAccountAnnotation], a[UpstreamNamespaceAnnotation]
		// A suspended namespace's copies run on as they were, with the
		// tokens they mount: kept and renewed, whatever the workspace
		// says now.
		pol, _ := s.policy(cl, ns)
		if !used[saKey{cl, ns, sa}] && !pol.Suspended(s.key) {
			// Only once the syncer has gone through everything: a
			// workload not looked at yet may still mount it.
			if s.CaughtUp() && sec.DeletionTimestamp == nil {
				if err := s.api.core.CoreV1().Secrets(sec.Namespace).Delete(ctx, sec.Name, metav1.DeleteOptions{}); err == nil {
					klog.V(2).InfoS("deleted a workspace token no synced workload mounts", "namespace", sec.Namespace, "name", sec.Name)
				}
			}
			continue
		}
		if err := s.ensureAPIAccess(ctx, cl, ns, sec.Namespace, sa); err != nil {
			klog.ErrorS(err, "renewing a workspace token for pods")
		}
	}
}

type saKey struct {
	cluster   logicalcluster.Name
	namespace string
	name      string
}

// mountedServiceAccounts are the ServiceAccounts whose tokens the synced
// workloads mount.
func (s *Syncer) mountedServiceAccounts() map[saKey]bool {
	used := map[saKey]bool{}
	for _, gvr := range s.resources {
		path := podSpecPath(gvr.Resource)
		if path == nil {
			continue
		}
		if _, skip := s.unsynced[gvr]; skip {
			continue
		}
		for _, o := range s.upstream[gvr].List() {
			if st, ok := o.(*stored); ok {
				// Kept apart when cached: no decoding.
				used[saKey{clusterinformer.ClusterOf(st), st.Namespace, st.serviceAccount}] = true
				continue
			}
			m := object(o)
			used[saKey{clusterinformer.ClusterOf(m), m.GetNamespace(), serviceAccountOf(m, path)}] = true
		}
	}
	return used
}
