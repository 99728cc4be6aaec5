package clusterauthz

import (
	"fmt"
	"strings"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/workload"
)

// syncerImportDenied: a syncer's service account (workload.SyncerUserPrefix
// + its SyncTarget) reaches only its own target's APIResourceImports,
// named <target>.<resource>.<group>. Its role (kubectl kcp workload sync)
// grants get, create and update on apiresourceimports, and RBAC cannot
// grant by a name prefix, so without this one syncer read every other
// target's imports in the location workspace. It may create (admission
// checks the name and spec.syncTarget), never list, watch or reach
// another target's by name.
func syncerImportDenied(attr authorizer.Attributes) (string, bool) {
	u := attr.GetUser()
	if u == nil || !attr.IsResourceRequest() || attr.GetAPIGroup() != apiresource.Group || attr.GetResource() != apiresource.ImportsResource.Resource {
		return "", false
	}
	target, ok := strings.CutPrefix(u.GetName(), workload.SyncerUserPrefix)
	if !ok || attr.GetVerb() == "create" || (attr.GetName() != "" && strings.HasPrefix(attr.GetName(), target+".")) {
		return "", false
	}
	return fmt.Sprintf("the syncer of SyncTarget %s may reach only its own APIResourceImports (named %s.<resource>.<group>), one by name", target, target), true
}
