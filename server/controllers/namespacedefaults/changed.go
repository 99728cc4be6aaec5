package namespacedefaults

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/keys"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// listingChanged is lw (a watch of resource's defaults) whose list reads
// only the stored rows of resource instead of every namespace's default.
// When the defaults are served, a default is stored only once it was
// changed, or deleted (a tombstone row): those rows are all a relist must
// look at. Each row of a default (named name) is handed to found with the
// key of its namespace; the list returned is empty, at the revision the
// rows were read at, which the watch resumes from. At 100,000 workspaces
// the list of every default was 600,000 objects held at once, only to
// find the few that were deleted or changed (docs/performance.md).
func listingChanged(changed clusterinformer.RangeFunc, lw cache.ListerWatcher, resource, name string, found func(namespaceKey string, value []byte)) cache.ListerWatcher {
	prefix := keys.Prefix + keys.ResourcePrefix(corev1.Resource(resource)) + "/"
	watchFn := cache.ToListerWatcherWithContext(lw).WatchWithContext
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			rev, err := changed(ctx, prefix, func(key string, value []byte, _ int64) error {
				// <prefix><cluster>/<namespace>/<name>
				parts := strings.Split(strings.TrimPrefix(key, prefix), "/")
				if len(parts) == 3 && parts[2] == name {
					found(clusterinformer.Key(logicalcluster.Name(parts[0]), "", parts[1]), value)
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
			return &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(rev, 10)}}, nil
		},
		WatchFuncWithContext: watchFn,
	}
}

// storedWrongCA says whether a stored kube-root-ca.crt (its row's value,
// JSON as the API server stores it) holds anything but the published CA;
// a value it cannot read counts as wrong (the reconciler reads the config
// map through the API and decides).
func storedWrongCA(value []byte, caPEM string) bool {
	var cm struct {
		Data       map[string]string `json:"data"`
		BinaryData map[string][]byte `json:"binaryData"`
	}
	if err := json.Unmarshal(value, &cm); err != nil {
		return true
	}
	return !holdsOnlyCA(cm.Data, cm.BinaryData, caPEM)
}
