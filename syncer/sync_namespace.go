package syncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// syncNamespace keeps a downstream namespace for each assigned upstream
// namespace, and removes it once the namespace leaves this target.
func (s *Syncer) syncNamespace(ctx context.Context, it item) error {
	name := DownstreamNamespace(it.cluster, it.name)
	up, ok := s.upstreamObj(it)
	if !ok {
		if _, exists := s.downstreamObj(namespacesGVR, "", name); !exists {
			return nil
		}
		// Objects of the namespace can be assigned before the namespace
		// itself is (kcp labels them first): the namespace stays while any
		// is in the view, and is looked at again when the last one goes.
		for _, gvr := range s.resources {
			if objs, _ := s.upstream[gvr].ByIndex(clusterinformer.ByClusterNamespace, string(it.cluster)+"|"+it.name); len(objs) > 0 {
				return nil
			}
		}
		if ns, ok := s.downstreamObj(namespacesGVR, "", name); ok && ns.GetAnnotations()[AdoptedAnnotation] != "" {
			// Adopted, not created by kcp: what else is in it is not the
			// workspace's. Released, not deleted.
			return s.releaseNamespace(ctx, name)
		}
		err := s.down.Resource(namespacesGVR).Delete(ctx, name, metav1.DeleteOptions{})
		if err == nil {
			klog.InfoS("deleted downstream namespace", "namespace", name, "cluster", it.cluster, "upstream", it.name)
		}
		return ignoreNotFound(err)
	}
	if up.GetDeletionTimestamp() != nil {
		return nil // its objects go first; the namespace goes when it leaves the view
	}
	if pol, _ := s.policy(it.cluster, it.name); pol.Suspended(s.key) {
		return nil // suspended: the downstream namespace stays as it is
	}
	err := s.ensureNamespace(ctx, it.cluster, it.name)
	if err == errNamespaceTerminating || err == errLevelUnknown {
		s.queue.AddAfter(it, time.Second)
		return nil
	}
	var conflict errNamespaceConflict
	if errors.As(err, &conflict) {
		// Its objects report it; looked at again in a while.
		s.queue.AddAfter(it, conflictRecheck)
		return nil
	}
	return err
}

// errNamespaceTerminating: the downstream namespace is still being deleted
// (the namespace left this target a moment ago and came back); objects
// wait for it to go, then it is created anew.
var errNamespaceTerminating = fmt.Errorf("the downstream namespace is still terminating")

func (s *Syncer) ensureNamespace(ctx context.Context, cluster logicalcluster.Name, upstreamNS string) error {
	name := DownstreamNamespace(cluster, upstreamNS)
	psLabels, err := s.podSecurityLabels()
	if err != nil {
		return err
	}
	upNS, known := s.upstreamObj(item{gvr: namespacesGVR, cluster: cluster, name: upstreamNS})
	want := workspaceNamespaceLabels(cluster, upNS)
	for k, v := range psLabels {
		want[k] = v
	}
	if ns, ok := s.downstreamObj(namespacesGVR, "", name); ok {
		if ns.GetDeletionTimestamp() != nil {
			return errNamespaceTerminating
		}
		var stale []string
		if known {
			for k := range ns.GetLabels() {
				if _, keep := want[k]; !keep && strings.HasPrefix(k, NamespaceLabelPrefix) {
					stale = append(stale, k)
				}
			}
		}
		return s.relabelNamespace(ctx, ns, want, stale)
	}
	ns := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Namespace"}}
	ns.SetName(name)
	want[TargetLabel] = s.key
	ns.SetLabels(want)
	ns.SetAnnotations(map[string]string{UpstreamClusterAnnotation: string(cluster), UpstreamNamespaceAnnotation: upstreamNS})
	_, err = s.down.Resource(namespacesGVR).Create(ctx, ns, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		// Not in the cache of the syncer's own namespaces: just created
		// (the cache lags), or someone else's (conflicts.go).
		have, err := s.down.Resource(namespacesGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return ignoreNotFound(err)
		}
		pol, _ := s.policy(cluster, upstreamNS)
		if why := s.foreign(have, "namespace "+name, pol.Adopts()); why != "" {
			return errNamespaceConflict{reason: why}
		}
		if have.GetLabels()[TargetLabel] != s.key {
			return s.adoptNamespace(ctx, name, cluster, upstreamNS, want)
		}
		return nil
	}
	return err
}
