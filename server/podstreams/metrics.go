package podstreams

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/warning"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
)

// Pod metrics (metrics.k8s.io/v1beta1 pods) in a workspace: for a
// namespace, kcp asks the physical cluster of every SyncTarget that runs
// it, by the same way as pod streams (the syncer's tunnel in pull mode,
// kcp's own connection in push mode), for
//
//	GET /apis/metrics.k8s.io/v1beta1/namespaces/<downstream namespace>/pods[/<name>]
//
// with the caller's label and field selectors, and shows the answers
// under the user's namespace, labelled as projected pods are.

// maxMetricsBody bounds one physical cluster's answer.
const maxMetricsBody = 32 << 20

// syncerNotOwned starts the syncer's refusal of a namespace it does not
// own (syncer.TunnelHandler).
const syncerNotOwned = "syncer tunnel: only pods of the namespaces this syncer owns"

// metricsQuery are the query parameters passed on to a physical cluster.
var metricsQuery = []string{"labelSelector", "fieldSelector"}

// notServedError: a physical cluster does not serve metrics.k8s.io (or
// cannot answer for it now).
type notServedError struct {
	t   target
	why string
}

func (e *notServedError) Error() string {
	return fmt.Sprintf("metrics not available: the physical cluster of %s %s", e.t, e.why)
}

// namespaceTargets are a workspace's namespace and the SyncTargets that
// run its pods.
type namespaceTargets struct {
	namespace string
	targets   []target
}

// metricsTargets are the SyncTargets that run pods of a workspace's
// namespace (each with the downstream namespace), sorted by key.
func (s *Streams) metricsTargets(ctx context.Context, cluster logicalcluster.Name, namespace string) ([]target, error) {
	core, err := s.clients.Core(cluster)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	ns, err := core.Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("reading namespace %s: %v", namespace, err))
	}
	return assignedTargets(cluster, ns.Name, ns.Labels, ns.Annotations), nil
}

// assignedTargets are the targets a namespace is assigned to and synced
// on, sorted by key.
func assignedTargets(cluster logicalcluster.Name, namespace string, labels, annotations map[string]string) []target {
	var out []target
	for _, a := range workload.AssignedTargets(labels, annotations) {
		out = append(out, target{Key: a.Key, Location: a.Location, Name: a.Name, Namespace: syncer.DownstreamNamespace(cluster, namespace)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// fetchMetrics asks one target's physical cluster for the pod metrics of
// its downstream namespace (name "": all, with query's selectors). A pod
// it has no metrics of is (nil, nil) for a get.
func (s *Streams) fetchMetrics(ctx context.Context, t target, name string, query url.Values) ([]metricsv1beta1.PodMetrics, error) {
	base, rt, _, err := s.dialer(t)
	if err != nil {
		if se, ok := err.(apierrors.APIStatus); ok {
			return nil, &notServedError{t, "cannot be reached: " + se.Status().Message}
		}
		return nil, &notServedError{t, "cannot be reached: " + err.Error()}
	}
	if name != "" && len(validation.IsDNS1123Subdomain(name)) > 0 {
		return nil, nil
	}
	loc, err := url.Parse(base)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	loc.Path = strings.TrimSuffix(loc.Path, "/") + "/apis/metrics.k8s.io/v1beta1/namespaces/" + t.Namespace + "/pods"
	if name != "" {
		loc.Path += "/" + name
	}
	q := url.Values{}
	for _, k := range metricsQuery {
		if v := query.Get(k); v != "" && name == "" {
			q.Set(k, v)
		}
	}
	loc.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc.String(), nil)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return nil, &notServedError{t, "cannot be reached: " + err.Error()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetricsBody+1))
	if err != nil {
		return nil, &notServedError{t, "cannot be reached: " + err.Error()}
	}
	if len(body) > maxMetricsBody {
		return nil, &notServedError{t, fmt.Sprintf("answered with more than %d bytes of metrics", maxMetricsBody)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, metricsFailure(t, name, resp.StatusCode, body)
	}
	if name != "" {
		var m metricsv1beta1.PodMetrics
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, &notServedError{t, "answered with what is no PodMetrics: " + err.Error()}
		}
		return []metricsv1beta1.PodMetrics{m}, nil
	}
	var list metricsv1beta1.PodMetricsList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, &notServedError{t, "answered with what is no PodMetricsList: " + err.Error()}
	}
	return list.Items, nil
}

// metricsFailure words a physical cluster's refusal: a get of a pod it
// has no metrics of is no error (NotFound naming it), nor a namespace the
// syncer has not created yet; a 404 of anything else means metrics.k8s.io
// is not served; a 503 that its APIService is there but unavailable; an
// older syncer's 403 that it forwards no metrics; a 400 is the caller's.
func metricsFailure(t target, name string, code int, body []byte) error {
	var st metav1.Status
	isStatus := json.Unmarshal(body, &st) == nil && st.Kind == "Status"
	msg := strings.TrimSpace(string(body))
	if isStatus {
		msg = st.Message
	}
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	switch {
	// metrics-server names a pod <namespace>/<name> in its NotFound.
	case code == http.StatusNotFound && name != "" && isStatus && st.Details != nil && (st.Details.Name == name || strings.HasSuffix(st.Details.Name, "/"+name)):
		return nil
	case code == http.StatusNotFound:
		return &notServedError{t, "does not serve metrics.k8s.io (install metrics-server there)"}
	case code == http.StatusServiceUnavailable:
		return &notServedError{t, "does not serve metrics.k8s.io now: " + msg}
	case code == http.StatusForbidden && strings.HasPrefix(msg, syncerNotOwned):
		// The syncer has not created the namespace (yet): no pods there.
		return nil
	case code == http.StatusForbidden && strings.HasPrefix(msg, "syncer tunnel:"):
		return &notServedError{t, "is reached through a syncer that does not forward metrics (upgrade the syncer): " + msg}
	case code == http.StatusBadRequest:
		// The caller's selectors, as the physical cluster read them.
		return apierrors.NewBadRequest(fmt.Sprintf("the physical cluster of %s: %s", t, msg))
	case code == http.StatusForbidden:
		return &notServedError{t, "refused the syncer's metrics request (its ClusterRole needs get and list on pods.metrics.k8s.io): " + msg}
	}
	return &notServedError{t, fmt.Sprintf("answered %d: %s", code, msg)}
}

// workspaceMetrics are a downstream pod's metrics as the workspace shows
// them: in the user's namespace, with the pod's labels without the
// syncer's, labelled projected-from and annotated with the physical
// cluster like projected pods.
func workspaceMetrics(m metricsv1beta1.PodMetrics, namespace string, t target) metricsv1beta1.PodMetrics {
	labels := map[string]string{}
	for k, v := range m.Labels {
		if k != syncer.TargetLabel && !strings.HasPrefix(k, workload.StateLabelPrefix) {
			labels[k] = v
		}
	}
	labels[ProjectedFromLabel] = t.Key
	return metricsv1beta1.PodMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: namespace, Labels: labels, CreationTimestamp: m.CreationTimestamp,
			Annotations: map[string]string{workload.PhysicalClusterAnnotation: t.Location + "/" + t.Name}},
		Timestamp: m.Timestamp, Window: m.Window, Containers: m.Containers,
	}
}

// collectMetrics asks every (namespace, target) pair at once, at most
// metricsParallel at a time, and merges the answers. Targets that fail
// are warned about when the others' answers show pods; else their
// failures are the error (503).
func (s *Streams) collectMetrics(ctx context.Context, namespaces []namespaceTargets, name string, query url.Values) ([]metricsv1beta1.PodMetrics, error) {
	type job struct {
		ns string
		t  target
	}
	var jobs []job
	for _, n := range namespaces {
		for _, t := range n.targets {
			jobs = append(jobs, job{n.namespace, t})
		}
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	results := make([][]metricsv1beta1.PodMetrics, len(jobs))
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, metricsParallel)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			items, err := s.fetchMetrics(ctx, j.t, name, query)
			for _, m := range items {
				results[i] = append(results[i], workspaceMetrics(m, j.ns, j.t))
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	var out []metricsv1beta1.PodMetrics
	var failed []error
	for i := range jobs {
		if errs[i] != nil {
			if _, ok := errs[i].(*notServedError); !ok {
				return nil, errs[i]
			}
			failed = append(failed, errs[i])
			continue
		}
		out = append(out, results[i]...)
	}
	// Nothing to show while a target failed: the failure, not an empty
	// answer (that target may run the pods asked for).
	if len(out) == 0 && len(failed) > 0 {
		msgs := make([]string, 0, len(failed))
		for _, err := range failed {
			msgs = append(msgs, err.Error())
		}
		return nil, apierrors.NewServiceUnavailable(strings.Join(dedupe(msgs), "; "))
	}
	for _, err := range failed {
		warning.AddWarning(ctx, "", err.Error()+" (its pods are not shown)")
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// metricsParallel bounds the physical clusters asked at once for one
// request.
const metricsParallel = 8

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
