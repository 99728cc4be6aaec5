package server

import (
	"context"

	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/schema/apis"
	apibindingadmission "github.com/kcpsql/kcp/server/admission/apibinding"
	"github.com/kcpsql/kcp/server/boundapis"
	"github.com/kcpsql/kcp/server/clusterauthz"
	"github.com/kcpsql/kcp/server/exportview"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// remoteBind decides binding an APIExport of a workspace on another shard:
// the shard whose copy holds the export is asked (a SubjectAccessReview
// of the verb "bind" in the provider's workspace there). An export no
// shard holds is refused like a missing grant.
func remoteBind(reviewer *shards.Reviewer, index *boundapis.Index, local func(logicalcluster.Name) bool) apibindingadmission.RemoteBindFunc {
	return remoteExportVerb(apis.VerbBind, reviewer, index, local)
}

// remoteContent decides the verb "content" (an export's view) the same way.
func remoteContent(reviewer *shards.Reviewer, index *boundapis.Index, local func(logicalcluster.Name) bool) exportview.RemoteFunc {
	return remoteExportVerb(apis.VerbContent, reviewer, index, local)
}

func remoteExportVerb(verb string, reviewer *shards.Reviewer, index *boundapis.Index, local func(logicalcluster.Name) bool) func(context.Context, user.Info, logicalcluster.Name, string) (bool, bool, error) {
	return func(ctx context.Context, who user.Info, provider logicalcluster.Name, export string) (bool, bool, error) {
		if local(provider) {
			return false, false, nil
		}
		shard, err := index.ExportShard(provider, export)
		if err != nil {
			return true, false, err
		}
		if shard == "" {
			// Not on this shard, and no peer's copy has it.
			return true, false, nil
		}
		// As the provider's RBAC sees the user: a service account of the
		// consumer's workspace under its foreign name (on the provider's
		// shard it would be a plain user named like the provider's own
		// service account of that name).
		allowed, err := reviewer.Allowed(ctx, shard, provider, clusterauthz.SeenIn(provider, who), authzv1.ResourceAttributes{
			Verb: verb, Group: apis.Group, Version: apis.Version, Resource: "apiexports", Name: export,
		})
		return true, allowed, err
	}
}
