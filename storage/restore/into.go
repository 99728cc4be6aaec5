package restore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/serveddefaults"
)

// PlanInto computes the writes that make cluster into hold state, the rows
// of cluster from (keys of from). Into another cluster, keys and the
// objects' cluster annotation are rewritten for into, and each object gets a UID of its own (derived
// from its UID and into, so that planning again gives the same), its
// owner references following. Objects of into that state does not have
// are deleted; its LogicalCluster and child workspaces are left alone.
func (s Source) PlanInto(ctx context.Context, state map[string][]byte, from, into logicalcluster.Name) (*Plan, error) {
	lives, err := s.Live(ctx, into)
	if err != nil {
		return nil, err
	}
	want := map[string][]byte{}
	for key, value := range state {
		if from == into {
			// In place (a snapshot of the cluster itself): rows as stored.
			if ClusterOfKey(key) == string(into) && !skipped(into, key) {
				want[key] = value
			}
			continue
		}
		k, ok := moveKey(key, from, into)
		if !ok || skipped(into, k) {
			continue
		}
		v, err := moveObject(value, into)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		want[k] = v
	}
	plan := &Plan{Cluster: into}
	plan.writeWanted(want, lives)
	for key, l := range lives {
		if _, ok := want[key]; !ok && !skipped(into, key) {
			plan.Changes = append(plan.Changes, Change{Key: key, Action: Delete, Revision: l.rev})
		}
	}
	order(plan.Changes)
	return plan, nil
}

// ClusterOfKey is a key's cluster (its 5th '/'-field).
func ClusterOfKey(key string) string {
	f := strings.SplitN(key, "/", 6)
	if len(f) < 6 {
		return ""
	}
	return f[4]
}

// moveKey puts into in place of from as the key's cluster (5th field).
func moveKey(key string, from, into logicalcluster.Name) (string, bool) {
	f := strings.SplitN(key, "/", 6)
	if len(f) < 6 || f[4] != string(from) {
		return "", false
	}
	f[4] = string(into)
	return strings.Join(f, "/"), true
}

// moveObject rewrites a stored object for cluster into: its cluster
// annotation, its UID and the UIDs its owner references name.
func moveObject(value []byte, into logicalcluster.Name) ([]byte, error) {
	if serveddefaults.IsTombstone(value) {
		// A deleted served default names the UID of its namespace.
		var t map[string]map[string]string
		if err := json.Unmarshal(value, &t); err != nil {
			return nil, err
		}
		for _, fields := range t {
			for k, uid := range fields {
				fields[k] = MovedUID(into, uid)
			}
		}
		return json.Marshal(t)
	}
	var obj map[string]interface{}
	if err := json.Unmarshal(value, &obj); err != nil {
		return nil, err
	}
	md, _ := obj["metadata"].(map[string]interface{})
	if md == nil {
		return value, nil
	}
	ann, _ := md["annotations"].(map[string]interface{})
	if ann == nil {
		ann = map[string]interface{}{}
	}
	ann[ClusterAnnotation] = string(into)
	md["annotations"] = ann
	if uid, ok := md["uid"].(string); ok && uid != "" {
		md["uid"] = MovedUID(into, uid)
	}
	if refs, ok := md["ownerReferences"].([]interface{}); ok {
		for _, r := range refs {
			if ref, ok := r.(map[string]interface{}); ok {
				if uid, ok := ref["uid"].(string); ok && uid != "" {
					ref["uid"] = MovedUID(into, uid)
				}
			}
		}
	}
	return json.Marshal(obj)
}

// ClusterAnnotation is the annotation the storage layer writes on every
// object: its logical cluster.
const ClusterAnnotation = "kcp.io/cluster"

// MovedUID is the UID an object of UID uid gets in a copy into cluster
// into: the same for the same pair, distinct from uid.
func MovedUID(into logicalcluster.Name, uid string) string {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(string(into)+"/"+uid)).String()
}
