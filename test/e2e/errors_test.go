package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestErrorsKeepTheirWords (issue 50 item 6): kubectl shows the server's
// reason for a server URL with an invalid workspace name, and follows the
// server-relative URLs of the OpenAPI v3 index with kubectl get --raw.
func TestErrorsKeepTheirWords(t *testing.T) {
	s := framework.StartServer(t, "")
	s.CreateWorkspaces("root:team")
	out, err := s.KubectlErr("root", "", "--server", s.URL()+"/clusters/Bad_Name", "get", "namespaces")
	if err == nil || strings.Contains(out, "unknown reason") || !strings.Contains(out, "Bad_Name") {
		t.Errorf("kubectl against /clusters/Bad_Name: %v, want the server's reason naming the name\n%s", err, out)
	}
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(s.Kubectl("root:team", "get", "--raw", "/openapi/v3")), &index); err != nil {
		t.Fatal(err)
	}
	url := index.Paths["api/v1"].ServerRelativeURL
	if !strings.HasPrefix(url, "/clusters/root:team/openapi/v3/api/v1") {
		t.Fatalf("the index's URL of api/v1: %q", url)
	}
	if out, err := s.KubectlErr("root:team", "", "get", "--raw", url); err != nil || !strings.Contains(out, `"openapi"`) {
		t.Errorf("kubectl get --raw of the index's server-relative URL: %v\n%.300s", err, out)
	}
	if out, err := s.KubectlErr("root:team", "", "get", "--raw", "/clusters/root/api/v1/namespaces"); err == nil || strings.Contains(out, "kube-system") {
		t.Errorf("a path naming another workspace after the server's: %v\n%.300s", err, out)
	}
}
