// Package keys owns the storage key layout. It is fixed, because SQL auditing
// and the generated `cluster` column of the kine table depend on it:
//
//	/registry/<group>/<resource>/<cluster>/<namespace>/<name>   namespaced
//	/registry/<group>/<resource>/<cluster>/<name>               cluster-scoped
//
// <group> is "core" for the legacy group; CRD groups always contain a dot, so
// they never clash with it. The cluster is always the fifth '/'-field.
package keys

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Prefix is the etcd prefix every key starts with.
const Prefix = "/registry"

// CoreGroup is the key segment for the legacy ("") API group.
const CoreGroup = "core"

// cohabiting maps resources that upstream stores in the location of another
// group to that group, so both APIs keep reading and writing the same objects.
var cohabiting = map[schema.GroupResource]string{
	{Group: "events.k8s.io", Resource: "events"}: CoreGroup,
}

// Group returns the <group> key segment of a resource.
func Group(gr schema.GroupResource) string {
	if g, ok := cohabiting[gr]; ok {
		return g
	}
	if gr.Group == "" {
		return CoreGroup
	}
	return gr.Group
}

// ResourcePrefix is the prefix below Prefix shared by one resource in all
// logical clusters: "/<group>/<resource>".
func ResourcePrefix(gr schema.GroupResource) string {
	return "/" + Group(gr) + "/" + gr.Resource
}

// WithCluster inserts the cluster into a key produced by the generic registry
// for a store whose resource prefix is resourcePrefix:
//
//	/core/configmaps/ns/name -> /core/configmaps/<cluster>/ns/name
//	/core/configmaps         -> /core/configmaps/<cluster>
func WithCluster(resourcePrefix, key string, cluster logicalcluster.Name) (string, error) {
	if cluster == "" || cluster.IsWildcard() || strings.ContainsAny(string(cluster), "/") {
		return "", fmt.Errorf("invalid logical cluster %q for key %q", cluster, key)
	}
	rest, ok := strings.CutPrefix(key, resourcePrefix)
	if !ok || (rest != "" && rest[0] != '/') {
		return "", fmt.Errorf("key %q is not below resource prefix %q", key, resourcePrefix)
	}
	return resourcePrefix + "/" + string(cluster) + rest, nil
}

// ClusterOf returns the cluster segment of a full key (with or without the
// /registry prefix being present is not allowed: keys here start with Prefix).
// It mirrors the SQL generated column: the fifth '/'-separated field.
func ClusterOf(key string) string {
	fields := strings.SplitN(key, "/", 6)
	if len(fields) < 5 {
		return ""
	}
	return fields[4]
}

// BoundResourcePrefix is the resource prefix of a resource served through
// an APIBinding: "/<group>/<resource>:<export identity>". Two exports of
// the same group and resource are two key ranges, so the view of one export
// lists and watches its objects in all consumers without ever seeing the
// other's; the cluster stays the fifth '/'-field.
func BoundResourcePrefix(gr schema.GroupResource, identity string) string {
	return ResourcePrefix(gr) + ":" + identity
}
