package satokens

import (
	"context"
	"encoding/json"
	"fmt"

	"gopkg.in/go-jose/go-jose.v2/jwt"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/kcpsql/kcp/server/routing"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// ClusterClaim is the JWT claim that names the logical cluster a
// service-account token was issued in. Every cluster's tokens share one
// issuer and key set, so a verifier outside kcp tells two tenants' default/bot
// apart by this claim (docs/tenancy.md).
// The routing filter reads it to send a pod's in-cluster requests to its
// workspace.
const ClusterClaim = routing.ClusterClaim

// WithClusterClaim makes every token the generator issues carry the
// logical cluster of the request that asked for it (TokenRequest runs in
// the request's context).
func WithClusterClaim(g serviceaccount.TokenGenerator) serviceaccount.TokenGenerator {
	if g == nil {
		return nil
	}
	return clusterClaimGenerator{g}
}

type clusterClaimGenerator struct{ serviceaccount.TokenGenerator }

func (g clusterClaimGenerator) GenerateToken(ctx context.Context, claims *jwt.Claims, private interface{}) (string, error) {
	cluster, ok := logicalcluster.From(ctx)
	if !ok {
		cluster = logicalcluster.Root
	}
	if cluster.IsWildcard() {
		return "", fmt.Errorf("service-account tokens are issued in one logical cluster, not across all")
	}
	return g.TokenGenerator.GenerateToken(ctx, claims, withCluster{private: private, cluster: string(cluster)})
}

// withCluster serializes as the upstream private claims plus ClusterClaim.
type withCluster struct {
	private any
	cluster string
}

func (w withCluster) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	if w.private != nil {
		b, err := json.Marshal(w.private)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
	}
	m[ClusterClaim] = w.cluster
	return json.Marshal(m)
}
