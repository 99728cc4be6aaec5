package syncer

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Namespaces of a workspace as a NetworkPolicy sees them on a shared
// physical cluster. A tenant writes its policies for its own cluster: a
// namespaceSelector means namespaces of its workspace (and, where the
// selector asks for nothing but a name that kube-system has, the physical
// cluster's kube-system, where DNS runs). So every downstream namespace
// carries
//
//   - WorkspaceLabel: a hash of its workspace, the same for all of the
//     workspace's namespaces and on every physical cluster;
//   - the labels of the workspace's namespace, each under a key of kcp's
//     own (NamespaceLabelPrefix and a hash of the tenant's key), so that a
//     tenant's label never means anything to the physical cluster's own
//     policies (an injection or an exemption keyed on a namespace label),
//
// and the syncer rewrites every namespaceSelector of a NetworkPolicy to
// select by those labels, within the workspace only. A label a tenant puts
// on its namespace therefore never admits another tenant's traffic, and
// `namespaceSelector: {}` means "every namespace of my workspace" (plus
// kube-system), as it means every namespace of one's own cluster.
const (
	// WorkspaceLabel's value is WorkspaceHash of the namespace's workspace.
	WorkspaceLabel = "workload.kcp.io/workspace"
	// NamespaceLabelPrefix + NamespaceLabelKey(key) carries the workspace
	// namespace's label key downstream, with its value.
	NamespaceLabelPrefix = "ns.workload.kcp.io/"
)

// WorkspaceHash is the value of WorkspaceLabel for a workspace.
func WorkspaceHash(cluster logicalcluster.Name) string {
	sum := sha256.Sum256([]byte(cluster))
	return hex.EncodeToString(sum[:])[:20]
}

// NamespaceLabelKey is the downstream key carrying a workspace namespace's
// label key.
func NamespaceLabelKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return NamespaceLabelPrefix + hex.EncodeToString(sum[:])[:24]
}

// carriedLabel reports whether a label of a workspace's namespace goes
// downstream: not its name (the downstream namespace has its own) and not
// kcp's assignment labels.
func carriedLabel(key string) bool {
	if key == namespaceNameLabel {
		return false
	}
	prefix, _, ok := strings.Cut(key, "/")
	return !ok || !(prefix == "kcp.io" || strings.HasSuffix(prefix, ".kcp.io"))
}

// workspaceNamespaceLabels are the labels a downstream namespace carries
// for its workspace and its upstream namespace (nil: not in the view).
func workspaceNamespaceLabels(cluster logicalcluster.Name, up *unstructured.Unstructured) map[string]string {
	out := map[string]string{WorkspaceLabel: WorkspaceHash(cluster)}
	if up == nil {
		return out
	}
	for k, v := range up.GetLabels() {
		if carriedLabel(k) {
			out[NamespaceLabelKey(k)] = v
		}
	}
	return out
}

// scopeNamespaceSelector rewrites one NetworkPolicy peer's
// namespaceSelector (already with names mapped downstream) to select
// within the workspace only, by the labels the workspace's namespaces
// carry downstream. It reports whether the tenant's selector, as written,
// selects kube-system: a namespace whose only label is its name (the caller
// then adds a peer for the physical cluster's kube-system).
func scopeNamespaceSelector(sel map[string]interface{}, original map[string]interface{}, cluster logicalcluster.Name) bool {
	if ml, ok := sel["matchLabels"].(map[string]interface{}); ok {
		mapped := map[string]interface{}{}
		for k, v := range ml {
			if k == namespaceNameLabel {
				mapped[k] = v
			} else {
				mapped[NamespaceLabelKey(k)] = v
			}
		}
		sel["matchLabels"] = mapped
	}
	if exprs, ok := sel["matchExpressions"].([]interface{}); ok {
		for _, e := range exprs {
			if em, ok := e.(map[string]interface{}); ok {
				if k, _ := em["key"].(string); k != namespaceNameLabel {
					em["key"] = NamespaceLabelKey(k)
				}
			}
		}
	}
	ml, _ := sel["matchLabels"].(map[string]interface{})
	if ml == nil {
		ml = map[string]interface{}{}
		sel["matchLabels"] = ml
	}
	ml[WorkspaceLabel] = WorkspaceHash(cluster)

	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(original, &ls); err != nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return false
	}
	return s.Matches(labels.Set{namespaceNameLabel: "kube-system"})
}
