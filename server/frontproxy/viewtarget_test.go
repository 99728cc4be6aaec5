package frontproxy

import (
	"testing"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestExportViewTarget: an export's view path names the provider (the
// shard of discovery), the consumer (all: fanned out; one: its shard) and
// the API path; anything else is not an export's view.
func TestExportViewTarget(t *testing.T) {
	for path, want := range map[string]struct {
		provider, consumer logicalcluster.Name
		apiPath            string
		ok                 bool
	}{
		"/services/apiexport/root:p/db/clusters/*/apis/x.io/v1/dbs":                   {"root:p", "*", "/apis/x.io/v1/dbs", true},
		"/services/apiexport/root:p/db/clusters/root:c/apis/x.io/v1/namespaces/a/dbs": {"root:p", "root:c", "/apis/x.io/v1/namespaces/a/dbs", true},
		"/services/apiexport/root:p/db/clusters/*":                                    {"root:p", "*", "/", true},
		"/services/apiexport/root:p/db/openapi/v3":                                    {"root:p", "", "", true},
		"/services/apiexport/root:p/db/clusters/Bad/apis":                             {"root:p", "", "", true},
		"/services/apiexport/*/db/clusters/*/apis":                                    {"", "", "", false},
		"/services/syncer/root:p/east/clusters/*/api/v1/pods":                         {"", "", "", false},
		"/clusters/root:p/services/apiexport/root:p/db/clusters/*/apis":               {"", "", "", false},
	} {
		p, c, a, ok := exportViewTarget(path)
		if p != want.provider || c != want.consumer || a != want.apiPath || ok != want.ok {
			t.Errorf("%s: %q %q %q %v; want %q %q %q %v", path, p, c, a, ok, want.provider, want.consumer, want.apiPath, want.ok)
		}
	}
}
